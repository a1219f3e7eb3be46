package checkpoint

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Every writer of checkpoints in exactly-once delivery writes them in a
// Kafka transaction: the relay (with the records they cover) and the
// checkpoint commands (Store.Write). A record of a pipeline's name written
// outside a transaction was written by something else: a client with WRITE
// on a shared checkpoint topic setting another pipeline's position (a
// tombstone would even send it back to source.start). A record cannot tell
// which transactional id wrote it, so a principal that may write the topic
// transactionally can still forge one: give each pipeline its own topic
// and ACLs (docs/security.md, "Checkpoints").

// ErrNotTransactional is matched (errors.Is) by the error Load returns,
// with TransactionalOnly, when the newest record of a name was not written
// in a transaction. It matches ErrCorrupt too: the relay stops on it as on
// a checkpoint it cannot decode, and `checkpoint set --force` replaces it.
var ErrNotTransactional = errors.New("checkpoint not written in a transaction")

// NotTransactionalError is that error: the offset of the record and what
// it holds (nil for a tombstone or an undecodable value), for diagnostics.
type NotTransactionalError struct {
	Name       string
	Offset     int64
	Checkpoint *Checkpoint
}

func (e *NotTransactionalError) Error() string {
	what := "a tombstone"
	if e.Checkpoint != nil {
		what = fmt.Sprintf("gtid_set %q", e.Checkpoint.GTIDSet)
	}
	return fmt.Sprintf("%v: the newest checkpoint record of %s (offset %d, %s) was written outside a Kafka transaction, "+
		"which neither an exactly-once relay nor the checkpoint commands do: a client with WRITE on the checkpoint topic wrote it, "+
		"or the pipeline ran with kafka.delivery at-least-once before; check it with `outbox-relay checkpoint history`, then "+
		"write the right position with `outbox-relay checkpoint set --force`", ErrNotTransactional, e.Name, e.Offset, what)
}

// Is matches ErrNotTransactional and ErrCorrupt.
func (e *NotTransactionalError) Is(target error) bool {
	return target == ErrNotTransactional || target == ErrCorrupt
}

func notTransactional(name string, r stored) error {
	cp, err := r.decode()
	if err != nil {
		return err // undecodable, or in a newer format: stops the relay as it is
	}
	return &NotTransactionalError{Name: name, Offset: r.offset, Checkpoint: cp}
}

// TransactionalOnly returns a copy of s whose Load refuses a newest record
// written outside a transaction (NotTransactionalError): for pipelines with
// exactly-once delivery, whose checkpoints are all written in transactions.
// At-least-once relays write theirs without one.
func (s *Store) TransactionalOnly() *Store {
	c := *s
	c.txnOnly = true
	return &c
}

// WritePlain commits cp for name (nil writes a tombstone) without a Kafka
// transaction, as a relay with kafka.delivery at-least-once writes its
// checkpoints: the checkpoint commands' write for such a pipeline, whose
// principal may be allowed no transactional id and whose brokers may
// support no transactions (what at-least-once is for). It fences nothing
// (an at-least-once relay writes no transactions): the caller makes sure no
// relay of name runs. It returns once the record is visible to
// read_committed readers (AwaitVisible).
func (s *Store) WritePlain(ctx context.Context, name string, cp *Checkpoint) error {
	cl, err := s.newClient()
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	defer cl.Close()
	rec := s.Tombstone(name)
	if cp != nil {
		rec = s.Record(cp)
	}
	written, err := cl.ProduceSync(ctx, rec).First()
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return s.AwaitVisible(ctx, kadm.NewClient(cl), written.Offset)
}
