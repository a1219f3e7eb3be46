package relay

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

// A transaction is split at the
// row after kafka.batch.max_records (one of exactly max_records rows stays
// whole); a heartbeat (the reader at the server's head) commits an open
// batch.

// splitHeartbeatScript: transactions around the bound (3): one of the bound plus
// one row (one row per rows event, so that a stop falls between any two
// rows), exactly the bound, an XA transaction of the bound plus one and a
// one-phase one of the bound, each between one-row transactions of the
// same aggregates, far behind the source (catch-up: heartbeats are what
// makes a batch due).
func splitHeartbeatScript(flavor string) *script {
	const bound = 3
	s := newScript(flavor).behind()
	s.tx(s.insert("order", "1", 1))
	var rows [][]outboxRow
	for i := range bound + 1 {
		rows = append(rows, s.insert("order", fmt.Sprint(1+i%2), 1))
	}
	s.tx(rows...)
	s.tx(s.insert("order", "2", 1))
	s.tx(s.insert("order", "1", 2), s.insert("order", "2", 1)) // exactly the bound
	s.xaPrepare("x,,1", s.insert("order", "1", 2), s.insert("order", "2", 2))
	s.tx(s.insert("order", "1", 1))
	s.xaCommit("x,,1")
	s.xaOnePhase("z,,1", s.insert("order", "2", bound))
	s.tx(s.insert("order", "1", 1))
	return withHeartbeats(s)
}

// The split at the row after the bound across SIGTERM and crash after
// every event (a heartbeat after each, mid-transaction too), with every
// commit in flight for 30 ms (a heartbeat then finds the commit running):
// every row exactly once, each aggregate in order, no checkpoint backwards.
func TestPartialSplitAtBoundWithHeartbeatsStopEvery(t *testing.T) {
	realTime(t)
	for _, flavor := range []string{"mariadb", "mysql"} {
		for _, stop := range []string{"term", "crash"} {
			for _, v := range []string{"plain", "slow", "dead-letter"} {
				t.Run(fmt.Sprintf("%s/%s/%s", flavor, stop, v), func(t *testing.T) {
					t.Parallel()
					s := splitHeartbeatScript(flavor)
					var bad []string
					if v == "dead-letter" {
						// The row after the bound of tx 2 (its 4th rows
						// event; a heartbeat precedes each) and the XA's
						// row at the bound.
						bad = append(bad, spoil(s, s.eventIndex(2, 1+2*3), 0), spoil(s, s.eventIndex(5, 1+2*1), 0))
					}
					h := newHarness(t, s, func(c *config.Config) {
						c.Kafka.Batch.MaxRecords = 3
						c.Kafka.Batch.MaxWait = time.Hour
						c.Kafka.CheckpointInterval = time.Hour
						if v == "dead-letter" {
							c.Router.OnError = "dead-letter"
							c.Router.DeadLetterTopic = c.Router.TopicPrefix + "dead"
						}
					})
					slow := v == "slow"
					if slow {
						slowEndTxn(h, 30*time.Millisecond)
					}
					want := error(nil)
					f := (*attempt).term
					if stop == "crash" {
						want, f = errCrash, (*attempt).crash
					}
					h.stopEvery(f, want)
					if v == "dead-letter" {
						if dead := h.topicIDs(h.cfg.Router.DeadLetterTopic); !slices.Equal(dead, bad) {
							t.Errorf("dead-letter topic holds %v, want %v once each", dead, bad)
						}
						if got, want := h.load().Events, int64(len(h.s.want)+len(bad)); got != want {
							t.Errorf("checkpoint counts %d events, %d committed", got, want)
						}
						seen, order := map[string]int{}, map[string][]string{}
						for _, r := range h.consume() {
							if r.Topic != h.cfg.Router.DeadLetterTopic {
								seen[header(r, "id")]++
								order[string(r.Key)] = append(order[string(r.Key)], header(r, "id"))
							}
						}
						wantOrder := map[string][]string{}
						for _, w := range h.s.want {
							wantOrder[w.aggID] = append(wantOrder[w.aggID], w.id)
							if seen[w.id] != 1 {
								t.Errorf("row %s published %d times", w.id, seen[w.id])
							}
						}
						if len(seen) != len(h.s.want) {
							t.Errorf("%d event ids published, %d rows committed", len(seen), len(h.s.want))
						}
						for k, ids := range wantOrder {
							if !slices.Equal(order[k], ids) {
								t.Errorf("aggregate %s published in the order %v, committed %v", k, order[k], ids)
							}
						}
						h.verifyHistory()
						h.verifyNoOpenTransaction()
						return
					}
					h.verify()
					parts := 0
					for _, c := range h.history() {
						if c.Partial != nil {
							parts++
						}
					}
					if parts == 0 {
						t.Errorf("no checkpoint with a partial: the transactions of the bound plus one were not split")
					}
				})
			}
		}
	}
}

// After a restart inside a split transaction (the checkpoint's partial
// loaded), heartbeats (checkpoint_interval 40 ms) are written while the
// rest of it is read (pending, no Kafka transaction open): each must keep
// the loaded partial, or a crash after one would publish the first part
// again.
func TestPartialKeptByHeartbeatInsideRestartedSplit(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 3), s.insert("order", "1", 1), s.insert("order", "1", 1), s.insert("order", "1", 1))
		s.tx(s.insert("order", "1", 1))
		h := newHarness(t, s, func(c *config.Config) {
			c.Kafka.Batch.MaxRecords = 3
			c.Kafka.CheckpointInterval = 40 * time.Millisecond
			c.Kafka.Batch.MaxWait = 40 * time.Millisecond
		})
		a := h.start()
		a.feed(2) // 4 rows: a part of 3 committed at the 4th
		h.waitCheckpoint("partial", func(cp *checkpoint.Checkpoint) bool { return cp.Partial != nil && cp.Partial.Rows == 3 })
		if err := a.crash(); !errors.Is(err, errCrash) {
			t.Fatal(err)
		}
		b := h.start()
		b.feed(3) // rows 4 and 5: pending
		before := h.load()
		time.Sleep(300 * time.Millisecond)
		cp := h.waitCheckpoint("a heartbeat", func(cp *checkpoint.Checkpoint) bool { return cp.Time.After(before.Time) })
		if cp.Partial == nil || *cp.Partial != (checkpoint.Partial{GTID: s.gtid(1), Rows: 3}) {
			t.Fatalf("heartbeat inside the restarted transaction: partial %+v, want 3 rows of %s", cp.Partial, s.gtid(1))
		}
		if err := b.crash(); !errors.Is(err, errCrash) {
			t.Fatal(err)
		}
		h.start().finish()
		h.verify()
	})
}
