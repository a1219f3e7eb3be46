package relay

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

// A source transaction of exactly kafka.batch.max_records rows fits one
// batch: it is not committed in parts. When the relay then stops inside it
// (a statement-logged change after its outbox rows), none of its rows is
// visible and the checkpoint holds no partial: `checkpoint skip --gtid`
// passes over the whole transaction, and publishing it by hand duplicates
// nothing. One row more, and it is split at the bound.
func TestAttack23ExactlyMaxRecordsStaysWhole(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		const bound = 3
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.tx(s.insert("order", "1", bound-1), s.insert("order", "2", 1)) // exactly the bound, in two rows events
		h := newHarness(t, s, maxRecords(bound))
		a := h.start()
		a.feed(s.through(1))
		a.feed(s.through(2) - 1) // tx 2's rows, not its commit
		a.readErr <- fmt.Errorf("%w: gtid %s", binlog.ErrStatementLogged, s.gtid(2))
		err := a.wait()
		if !errors.Is(err, binlog.ErrStatementLogged) {
			t.Fatalf("stop: %v, want the statement-logged stop", err)
		}
		cp := h.load()
		if cp.GTIDSet != s.set(1) || cp.Partial != nil {
			t.Errorf("checkpoint %q partial %+v at the stop inside a transaction of exactly max_records rows; want %q, none partial", cp.GTIDSet, cp.Partial, s.set(1))
		}
		h.verifyPublished(s.want[:1])
		for i, c := range h.history() {
			if c.Partial != nil {
				t.Errorf("checkpoint %d has a partial %+v: a transaction of exactly max_records rows was split", i, c.Partial)
			}
		}

		// Without a stop: a transaction of exactly the bound commits with no
		// partial in any checkpoint; one of a row over it is split at the
		// bound.
		s2 := newScript(flavor)
		s2.tx(s2.insert("order", "1", bound))
		s2.tx(s2.insert("order", "1", bound+1))
		h2 := newHarness(t, s2, maxRecords(bound))
		b := h2.start()
		b.feed(s2.through(1))
		h2.waitCheckpoint("tx 1", func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == s2.set(1) })
		for i, c := range h2.history() {
			if c.Partial != nil {
				t.Errorf("checkpoint %d has a partial %+v after a transaction of exactly max_records rows", i, c.Partial)
			}
		}
		b.feed(s2.through(2) - 1)
		cp = h2.waitCheckpoint("a part of tx 2", func(cp *checkpoint.Checkpoint) bool { return cp.Partial != nil })
		if *cp.Partial != (checkpoint.Partial{GTID: s2.gtid(2), Rows: bound}) {
			t.Errorf("partial %+v, want %d rows of %s", cp.Partial, bound, s2.gtid(2))
		}
		b.finish()
		h2.verify()
	})
}

// Catching up (far behind the source), a batch waits for its bounds or for
// a quiet reader. A heartbeat says the reader is at the server's head:
// the batch commits then, not at max_wait (here an hour), whether the
// heartbeat comes in the hand-off after the transaction or in the same one.
func TestAttack23HeartbeatCommitsCatchUpBatch(t *testing.T) {
	for _, same := range []bool{true, false} {
		t.Run(map[bool]string{true: "same-hand-off", false: "next-hand-off"}[same], func(t *testing.T) {
			s := newScript("mariadb").behind()
			s.tx(s.insert("order", "1", 1))
			h := newHarness(t, s, func(c *config.Config) {
				c.Kafka.Batch.MaxWait = time.Hour
				c.Kafka.CheckpointInterval = time.Hour
			})
			a := h.start()
			hb := binlog.Event{Kind: binlog.KindHeartbeat, Time: time.Now()}
			if same {
				batch := append(append([]binlog.Event(nil), s.events...), hb)
				a.events <- batch
				a.next = len(a.todo) // the script is sent
			} else {
				a.feed(s.through(1))
				a.events <- []binlog.Event{hb}
			}
			h.waitCheckpoint("tx 1 after the heartbeat", func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == s.set(1) })
			a.finish()
			h.verify()
		})
	}
}
