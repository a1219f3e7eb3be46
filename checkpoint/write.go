package checkpoint

// Writing a checkpoint from the checkpoint commands (under the pipeline's
// transactional ids, fencing its producers), and waiting until a committed
// checkpoint is visible to read_committed readers (the commands, and the
// relay at its stop).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/committed"
	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
)

// TransactionalIDs are the transactional ids the pipeline name writes its
// Kafka transactions under: name, and with kafka.transaction_lanes 2 also
// name followed by "#2" ('#' is in no pipeline name, so the id is no other
// pipeline's). A relay initialises both at every start, whatever its lanes,
// and Write fences both.
func TransactionalIDs(name string) []string {
	return []string{name, name + "#2"}
}

// Write commits cp for name (nil writes a tombstone: no checkpoint) in a
// Kafka transaction whose transactional id is name, the relay's own, after
// initialising its second one (TransactionalIDs): it fences a running relay
// of that name in both its lanes, which then stops, and aborts their open
// transactions. lanes is the pipeline's kafka.transaction_lanes: with 1, a
// principal not allowed the second id (so no relay under it wrote with it)
// is not an error.
//
// The order is the relay's own (name, then the second id, then the write):
// one that initialised name before is fenced in its first lane, and its
// second lane never commits after a first-lane commit failed (or, name
// being initialised by another, at all: see the relay's check before a
// second-lane commit). A relay that initialises name after Write did (a
// fenced relay starts again within a second) aborts Write's open
// transaction, whose produce or commit is then refused (takenOver): nothing
// of it is committed, and Write starts over, fencing the relay again, at
// most writeAttempts times while ctx lasts.
//
// It returns nil only once the record is proved committed: visible to
// read_committed readers and read back from the partition at its offset
// (committed.Prove), whatever the commit answered. A transaction the broker
// aborted after its commit was answered (the client never sent its EndTxn:
// franz-go's first produce to a topic can race its metadata) is written
// again, at most writeAttempts times, else an error wrapping
// committed.ErrNotCommitted ("checkpoint not written"). Held back by an
// older open transaction, it returns an error wrapping ErrNotVisible only
// when the partition's log holds the commit marker of its transaction
// after the record (committed, visible once that one ends), else an error
// saying the commit is not proved.
func (s *Store) Write(ctx context.Context, name string, lanes int, cp *Checkpoint) error {
	for attempt := 1; ; attempt++ {
		err := s.write(ctx, name, lanes, cp)
		retry := errors.Is(err, errTakenOver) || errors.Is(err, committed.ErrNotCommitted)
		if err == nil || !retry || attempt == writeAttempts || ctx.Err() != nil {
			switch {
			case errors.Is(err, errTakenOver):
				err = fmt.Errorf("%w (%d attempts: a relay of pipeline %s keeps starting again: stop it, then write)", err, attempt, name)
			case errors.Is(err, committed.ErrNotCommitted):
				err = fmt.Errorf("checkpoint not written (%d attempts): %w", attempt, err)
			}
			return err
		}
	}
}

// writeAttempts bounds Write's attempts when a producer of the same
// transactional id keeps aborting its transaction.
const writeAttempts = 5

// errTakenOver is wrapped by write's error when another producer of the
// pipeline's transactional id ended the write's transaction before its
// commit: nothing of it was committed.
var errTakenOver = errors.New("transaction aborted by another producer of the same transactional id")

// takenOver reports whether err, a produce's or a commit's, says that the
// transaction was ended by another producer initialising the same
// transactional id: refused as fenced, with a stale epoch, or (Apache Kafka
// 4, transaction version 2: the epoch one below the new one reads as a
// retry of the abort) as an invalid state.
func takenOver(err error) bool { return kafkaerr.TakenOver(err) }

// write is one attempt of Write.
func (s *Store) write(ctx context.Context, name string, lanes int, cp *Checkpoint) error {
	cl, err := s.newClient(kgo.TransactionalID(name))
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	defer cl.Close()
	if _, _, err := cl.ProducerID(ctx); err != nil {
		return fmt.Errorf("write checkpoint: init transactional producer %s: %w", name, err)
	}
	if err := s.fence(ctx, TransactionalIDs(name)[1]); err != nil {
		if lanes > 1 || !kafkaerr.TxnIDDenied(err) {
			return fmt.Errorf("write checkpoint: %w", err)
		}
	}
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	rec := s.Tombstone(name)
	if cp != nil {
		rec = s.Record(cp)
	}
	written, err := cl.ProduceSync(ctx, rec).First()
	if err != nil {
		_ = cl.EndTransaction(ctx, kgo.TryAbort)
		if takenOver(err) {
			return fmt.Errorf("write checkpoint: %w: %w", errTakenOver, err)
		}
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		if takenOver(err) {
			return fmt.Errorf("write checkpoint: commit: %w: %w", errTakenOver, err)
		}
		return fmt.Errorf("write checkpoint: commit: %w", err)
	}
	return s.prove(ctx, cl, written)
}

// fence initialises the transactional id: a producer that used it can
// commit nothing more, and its open transaction is aborted (or, already
// being committed, completed) before this returns.
func (s *Store) fence(ctx context.Context, id string) error {
	cl, err := s.newClient(kgo.TransactionalID(id))
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, _, err := cl.ProducerID(ctx); err != nil {
		return fmt.Errorf("init transactional producer %s: %w", id, err)
	}
	return nil
}

// ErrNotVisible is returned by AwaitVisible when its context ends before a
// committed checkpoint record is visible to read_committed readers (an older
// open transaction on the topic holds the last stable offset below it). The
// record stays committed: it becomes visible once that transaction ends.
var ErrNotVisible = errors.New("committed checkpoint not yet visible")

// AwaitVisible waits until the checkpoint record at offset is below the
// topic's last stable offset, so that Load returns it (or something newer).
// A broker answers a transaction's commit before it has written the commit
// markers; a reader that comes right after would still see the previous
// checkpoint. It polls every few milliseconds until ctx ends, or until a
// Kafka error that retrying cannot fix (not authorised). Visible is not
// committed: an aborted record is below the last stable offset too
// (Write reads its record back).
func (s *Store) AwaitVisible(ctx context.Context, adm *kadm.Client, offset int64) error {
	err := committed.AwaitVisible(ctx, adm, map[string]map[int32]int64{s.topic: {0: offset}})
	if errors.Is(err, committed.ErrNotVisible) {
		return fmt.Errorf("await checkpoint at offset %d of %s: %w: %w", offset, s.topic, ErrNotVisible, err)
	}
	if err != nil {
		return fmt.Errorf("await checkpoint at offset %d of %s: %w", offset, s.topic, err)
	}
	return nil
}

// ErrCommitNotProved is wrapped by Prove's error when a record whose
// transaction's commit was answered is neither visible to read_committed
// readers nor followed by an end of its transaction within the context:
// the commit may never have reached the broker (franz-go can answer a
// commit it did not send), and the broker then aborts the transaction at
// its timeout. Callers branch on it to report nothing as committed.
var ErrCommitNotProved = errors.New("commit not proved")

// Prove returns nil once written, a checkpoint record of a transaction
// whose commit was answered success (produced: its offset set), is proved
// committed: visible to read_committed readers and read back at its offset
// (committed.ReadBack). Otherwise it returns an error wrapping
// committed.ErrNotCommitted when it is not there (aborted, or the
// partition holds the abort of its transaction); ErrNotVisible when an
// older open transaction holds it back and the partition's log holds the
// commit marker of its transaction after it (committed: visible once that
// one ends; told as soon as the marker is there, not once ctx ends:
// awaitVisibleOrEnd); ErrCommitNotProved when it is not visible and no end of its
// transaction follows it (outcome). adm is any client of the cluster.
func (s *Store) Prove(ctx context.Context, adm *kadm.Client, written *kgo.Record) error {
	err := s.awaitVisibleOrEnd(ctx, adm, written)
	var end transactionEnd
	if errors.As(err, &end) {
		if !end.commit {
			return fmt.Errorf("%w: the partition holds the abort of its transaction after offset %d", committed.ErrNotCommitted, written.Offset)
		}
		return fmt.Errorf("%w: the partition holds the commit of its transaction after offset %d", ErrNotVisible, written.Offset)
	}
	if errors.Is(err, ErrNotVisible) {
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), diagnoseBudget)
		defer cancel()
		switch ended, commit, oerr := s.outcome(octx, written); {
		case oerr != nil || !ended:
			why := ""
			if oerr != nil {
				why = " (" + oerr.Error() + ")"
			}
			return fmt.Errorf("%w: the record at offset %d of %s is not visible to read_committed readers and no end of its transaction follows it%s: the broker may abort it at the transaction's timeout", ErrCommitNotProved, written.Offset, s.topic, why)
		case !commit:
			return fmt.Errorf("%w: the partition holds the abort of its transaction after offset %d (%v)", committed.ErrNotCommitted, written.Offset, err)
		}
		return err // committed, visible once the older transaction ends
	}
	if err != nil {
		return err
	}
	return committed.ReadBack(ctx, s.newClient, committed.Last([]*kgo.Record{written}))
}

// heldBackLook is how long Prove waits for its record to become visible
// before it also reads the partition for the end of the record's
// transaction: an older open transaction (another pipeline's, one that
// crashed) can hold the record back for as long as that one stays open,
// up to its transaction timeout.
const heldBackLook = 200 * time.Millisecond

// transactionEnd is what awaitVisibleOrEnd found in the partition's log
// before its record became visible: the marker that ended its transaction.
type transactionEnd struct{ commit bool }

func (transactionEnd) Error() string { return "transaction ended, record not visible" }

// awaitVisibleOrEnd is AwaitVisible of written, that returns a
// transactionEnd as soon as the partition's log holds the marker ending
// written's transaction while an older open transaction holds the record
// back (outcome), instead of waiting for ctx to end.
func (s *Store) awaitVisibleOrEnd(ctx context.Context, adm *kadm.Client, written *kgo.Record) error {
	lctx, cancel := context.WithTimeout(ctx, heldBackLook)
	err := s.AwaitVisible(lctx, adm, written.Offset)
	cancel()
	if !errors.Is(err, ErrNotVisible) || ctx.Err() != nil {
		return err
	}
	vctx, stopVisible := context.WithCancel(ctx)
	defer stopVisible()
	ended := make(chan transactionEnd, 1)
	go func() {
		if end, commit, oerr := s.outcome(vctx, written); oerr == nil && end {
			ended <- transactionEnd{commit: commit}
			stopVisible()
		}
		close(ended)
	}()
	err = s.AwaitVisible(vctx, adm, written.Offset)
	stopVisible()
	if end, ok := <-ended; ok && (err != nil || !end.commit) {
		return end
	}
	return err
}

// prove is Prove of write's record, with what the commands say about it.
func (s *Store) prove(ctx context.Context, cl *kgo.Client, written *kgo.Record) error {
	switch err := s.Prove(ctx, kadm.NewClient(cl), written); {
	case err == nil, errors.Is(err, ErrNotVisible) && !errors.Is(err, committed.ErrNotCommitted):
		return err
	case errors.Is(err, ErrCommitNotProved):
		return fmt.Errorf("write checkpoint: %w; see `checkpoint show`, and write again", err)
	default:
		return fmt.Errorf("write checkpoint: %w", err)
	}
}

// outcome reads the partition, read_uncommitted, past written for the
// marker that ended written's transaction (its producer id): ended is
// false when there is none yet (ctx ended first).
func (s *Store) outcome(ctx context.Context, written *kgo.Record) (ended, commit bool, err error) {
	cl, err := s.newClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.topic: {0: kgo.NewOffset().At(written.Offset + 1)}}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.KeepControlRecords(),
	)
	if err != nil {
		return false, false, err
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return false, false, nil
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return false, false, fmt.Errorf("fetch %s: %w", s.topic, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !ended {
				ended, commit = committed.EndOf(r, written.ProducerID)
			}
		})
		if ended {
			return ended, commit, nil
		}
	}
}
