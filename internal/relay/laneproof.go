package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
)

// A lane's first commit of each topic is proved, not taken on its word.
//
// franz-go (v1.22.3) hands a client's first records to a topic to a
// partition before it stores the topic's partitions; a transaction ended in
// between misses them. When it then knows of no partition written in the
// transaction, EndTransaction sends no EndTxn and returns nil: "committed".
// Under transaction version 2 the produce itself added the partitions, so
// the broker keeps the transaction open until its timeout aborts it, or
// until the producer's next transaction joins it and commits both. With two
// lanes, the second lane's first transaction of an attempt writes topics
// all new to its client; the first lane's next commit then writes a
// checkpoint covering that batch, and a source gone quiet, a stop, a crash
// or a fence (the next attempt initialises the id: the open transaction is
// aborted) loses the batch under a checkpoint that covers it.
//
// So a commit whose transaction holds the first records its lane's client
// wrote to some topic (the checkpoint topic included) is reported committed
// only once its checkpoint record is proved committed
// (checkpoint.Store.Prove: visible to read_committed readers and read back
// at its offset), within the delivery's timeout. Both lanes write their
// checkpoints to the checkpoint topic's partition 0 and the other lane's
// next checkpoint comes only after this commit has answered, so the
// partition's last stable offset passes the record once its markers are
// written. A commit not proved fails (errNotProved): the attempt ends, the
// next one resumes from the stored checkpoint and its fencing aborts the
// transaction left open. Once proved, the client knows the topic's
// partitions, and its later transactions there send their EndTxn; a
// transaction with any known partition does too, and the broker commits
// every partition the transaction's produces added.
//
// The cost on the hot path is a comparison per record (the topic of the
// record before) and a map lookup per change of topic.

// errNotProved: a commit was answered but its checkpoint record was not
// proved committed (see above). Not fatal: the attempt ends and the next
// one resumes from the stored checkpoint.
var errNotProved = errclass.New(errclass.Transient, "kafka", "not proved committed")

// laneTopics is what a lane knows of the topics its client wrote: proved,
// those of a transaction proved committed; fresh, the open transaction's
// others; last, the topic of the last record produced ("" at a
// transaction's beginning).
type laneTopics struct {
	proved map[string]struct{}
	fresh  []string
	last   string
}

// note counts a record to topic in the open transaction: a comparison
// when the record before went to the same topic.
func (t *laneTopics) note(topic string) {
	if topic != t.last || topic == "" {
		t.changed(topic)
	}
}

// changed notes a record to topic after one to another topic.
func (t *laneTopics) changed(topic string) {
	t.last = topic
	if _, ok := t.proved[topic]; !ok && !slices.Contains(t.fresh, topic) {
		t.fresh = append(t.fresh, topic)
	}
}

// ended forgets the open transaction's topics.
func (t *laneTopics) ended() {
	t.fresh = t.fresh[:0]
	t.last = ""
}

// proveCommitted proves, after a commit was answered, that written (the
// transaction's checkpoint record) is committed when the transaction held
// the first records of a topic (see above); the topics are proved then.
func (s *lane) proveCommitted(ctx context.Context, written *kgo.Record) error {
	t := &s.topics
	defer t.ended()
	if len(t.fresh) == 0 {
		return nil
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	// Committed but held back by an older open transaction: the
	// partition's log holds its commit marker (ErrNotVisible).
	if err := s.store.Prove(pctx, s.adm, written); err != nil && !errors.Is(err, checkpoint.ErrNotVisible) {
		return fmt.Errorf("commit kafka transaction: %w (it held this lane's first records to %s): %w",
			errNotProved, strings.Join(t.fresh, ", "), err)
	}
	if t.proved == nil {
		t.proved = map[string]struct{}{}
	}
	for _, topic := range t.fresh {
		t.proved[topic] = struct{}{}
	}
	return nil
}
