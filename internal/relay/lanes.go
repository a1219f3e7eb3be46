package relay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/errclass"
)

// Two transaction lanes (kafka.transaction_lanes 2; how batches alternate
// between them is exactlyonce.go's).
//
// Kafka fences one transactional id at a time. A producer that initialises
// the pipeline's name alone (an outbox-relay from before transaction lanes
// taking over, or its checkpoint commands) fences the first lane only: the
// second would still commit the batch it holds, over the checkpoint that
// producer wrote, or after an instance taking over read the checkpoint
// (its batch published twice). So before each commit the second lane asks
// the coordinator for the name's producer id and epoch and compares them
// with the first lane's after its last commit: another producer id, or a
// larger epoch, means another producer initialised the name, and the
// second lane does not commit (errclass.ErrFenced). It asks once its own batch is
// flushed: a producer that initialised the name after the question writes
// its checkpoint after this batch's, and one taking over reads the
// checkpoint only once this transaction has ended (its checkpoint record
// holds the topic's last stable offset).
//
// Only an answer decides: a question that fails (the coordinator loading
// or moving, no answer within checkMax) lets the commit go on, as before
// this check, with a warning once per attempt; after settleGiveUp failures
// in a row the second lane does not ask for settlePause, and a refusal
// (not allowed, not supported) ends the asking for the attempt, as the
// settle wait does (txnsettle.go). Instances and commands of this version
// fence both ids, so then only a producer that fences the name alone, at
// that moment, is not seen.

// The question goes through a client of its own (laneCheck.adm): franz-go
// sends a client's requests to one broker on one connection, which the
// broker answers in order, so a question left unanswered would hold the
// second lane's EndTxn behind it until the commit's time runs out.

// checkMax bounds the question: a healthy coordinator answers in a few
// milliseconds; one that is loading or moving would otherwise hold the
// commit (franz-go retries until the context ends) while the first lane's
// next transaction stays open, up to its transaction timeout.
const checkMax = 100 * time.Millisecond

// laneCheck is a lane's part of the check: the first lane keeps its
// producer id and epoch after each commit (keepEpoch, epochAfter); the
// second checks, before each commit, that the first lane's transactional
// id is still this instance's (follows; off once the brokers refuse to
// tell, fails failed in a row, no check before paused, warned once a
// failed check was logged). The lane's goroutine alone uses it, but for
// epochAfter, which the other lane reads.
type laneCheck struct {
	keepEpoch  bool
	epochAfter atomic.Pointer[committedAs]
	follows    *lane
	adm        *kadm.Client // asks the question (a client of its own: see above)
	off        bool
	fails      int
	paused     time.Time
	warned     bool
}

// producerEpoch is a producer id and epoch.
type producerEpoch struct {
	id    int64
	epoch int16
}

// committedAs is the first lane's producer id and epoch around its last
// commit: before its EndTxn and after it. Under transaction protocol v2
// EndTxn bumps the epoch (franz-go keeps the one the coordinator answered),
// and at the epoch's last value it moves to a new producer id at epoch 0;
// until the coordinator has completed that commit it still reports the old
// id with the bumped epoch.
type committedAs struct {
	before, after producerEpoch
}

// ours reports whether the coordinator's state (id, epoch) of the first
// lane's id is one this instance's last commit left: the id and epoch after
// it, or, while the commit completes, the id before it with at most one
// bump. Another producer's InitProducerID leaves a larger epoch (or another
// id).
func (c committedAs) ours(state producerEpoch) bool {
	switch state.id {
	case c.after.id:
		return state.epoch <= c.after.epoch
	case c.before.id:
		return int(state.epoch) <= int(c.before.epoch)+1
	}
	return false
}

// producerState is the producer id and epoch franz-go holds; call it only
// where the producer has no error to recover from (after a flush without
// errors, or a successful commit), or franz-go would initialise the id
// again.
func (s *lane) producerState(ctx context.Context) (producerEpoch, bool) {
	id, epoch, err := s.cl.ProducerID(ctx)
	return producerEpoch{id, epoch}, err == nil
}

// keepCommittedEpoch (first lane) keeps before (taken after the flush) and
// the state after a successful commit; nil when either is unknown (the
// second lane then does not commit: firstLaneOurs).
func (s *lane) keepCommittedEpoch(ctx context.Context, before producerEpoch, known bool) {
	if !s.check.keepEpoch {
		return
	}
	after, ok := s.producerState(ctx)
	if !known || !ok {
		s.check.epochAfter.Store(nil)
		return
	}
	s.check.epochAfter.Store(&committedAs{before, after})
}

// firstLaneOurs (second lane, after its batch is flushed and before its
// EndTxn) checks that the first lane's transactional id is still this
// instance's; see above. Without a first lane, it does nothing.
func (s *lane) firstLaneOurs(ctx context.Context) error {
	c := &s.check
	f := c.follows
	if f == nil || c.off || time.Now().Before(c.paused) {
		return nil
	}
	own := f.check.epochAfter.Load()
	if own == nil {
		// The second lane commits only after the first lane committed
		// (exactlyonce.go); not knowing its epoch then is not to be guessed.
		return errors.New("check the first transaction lane: its producer epoch after its last commit is unknown")
	}
	id, _ := f.cl.OptValue(kgo.TransactionalID).(string)
	qctx, cancel := context.WithTimeout(ctx, checkMax)
	defer cancel()
	t, err := describeTxn(qctx, c.adm, id)
	state := producerEpoch{t.ProducerID, t.ProducerEpoch}
	if err != nil {
		if settleVerdict(qctx, err) == settleNever {
			c.off = true // Kafka before 3.0, or not allowed to DESCRIBE
		} else if c.fails++; c.fails >= settleGiveUp {
			c.fails = 0
			c.paused = time.Now().Add(settlePause)
		}
		if c.warned {
			s.log.Debug().Err(err).Str("transactional_id", id).Msg("cannot ask the coordinator before a commit of the second transaction lane: committing")
		} else {
			c.warned = true
			s.log.Warn().Err(err).Str("transactional_id", id).
				Msg("cannot ask the coordinator whether the pipeline's name is still this instance's before a commit of the second transaction lane: committing; a producer that initialises only the name (an outbox-relay from before transaction lanes, or its checkpoint commands) would not stop that lane: run one outbox-relay version everywhere, or set kafka.transaction_lanes: 1")
		}
		return nil
	}
	c.fails = 0
	if !own.ours(state) {
		return fmt.Errorf("%w: transactional id %s was initialised by another producer (the coordinator has producer id %d epoch %d, this instance's first lane %d epoch %d after its last commit, %d epoch %d before it): the second lane does not commit",
			errclass.ErrFenced, id, state.id, state.epoch, own.after.id, own.after.epoch, own.before.id, own.before.epoch)
	}
	return nil
}
