package relay

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

// Boundary cases of the relay loop, each run on the harness of
// script_test.go. matrix runs a script straight through, with SIGTERM after
// every event and with a crash after every event, for both flavors.

func flavors(t *testing.T, f func(t *testing.T, flavor string)) {
	for _, flavor := range []string{"mariadb", "mysql"} {
		t.Run(flavor, func(t *testing.T) {
			t.Parallel()
			f(t, flavor)
		})
	}
}

func maxRecords(n int) func(*config.Config) {
	return func(c *config.Config) { c.Kafka.Batch.MaxRecords = n }
}

// Plain transactions, some of several rows events (what the reader makes of
// savepoints), some writing other tables only, aggregates interleaved.
func TestLoopPlainTransactions(t *testing.T) {
	matrix(t, func(flavor string) *script {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.tx()
		s.tx(s.insert("order", "1", 2), s.insert("customer", "7", 1), s.insert("order", "2", 1))
		s.tx(s.insert("order", "2", 1))
		s.tx()
		s.tx(s.insert("customer", "7", 3))
		return s
	}, nil)
}

// Without a stop, the loop commits once it has handled what the reader
// had: everything is committed while it keeps running.
func TestLoopCommitsWhenCaughtUp(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		for _, batch := range []int{1, 0} {
			s := newScript(flavor)
			s.tx(s.insert("order", "1", 2))
			s.tx()
			s.tx(s.insert("order", "1", 1), s.insert("order", "2", 1))
			h := newHarness(t, s, nil)
			h.batch = batch
			a := h.start()
			a.feedAll()
			h.waitCheckpoint("at the end of the script", func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == s.end() })
			h.verifyPublished(s.want)
			if err := a.term(); err != nil {
				t.Fatal(err)
			}
			h.verify()
		}
	})
}

// A source transaction larger than kafka.batch.max_records is committed in
// parts (the checkpoint's partial counts the rows published); stopped at
// every boundary, inside it too, it is resumed without a loss or a
// duplicate.
func TestLoopBigTransactionSplitByMaxRecords(t *testing.T) {
	build := func(flavor string) *script {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.tx(s.insert("order", "1", 3), s.insert("order", "2", 3), s.insert("customer", "3", 2), s.insert("order", "1", 3))
		s.tx()
		s.tx(s.insert("order", "2", 2))
		return s
	}
	matrix(t, build, maxRecords(3))

	// Straight through, the big transaction is committed in parts.
	flavors(t, func(t *testing.T, flavor string) {
		s := build(flavor)
		h := newHarness(t, s, maxRecords(3))
		h.batch = 0
		h.start().finish()
		h.verify()
		parts := 0
		for _, cp := range h.history() {
			if cp.Partial != nil && cp.Partial.GTID == s.gtid(2) {
				parts++
			}
		}
		if parts < 3 {
			t.Errorf("%d partial checkpoints of the 11-row transaction with max_records 3, want at least 3", parts)
		}
	})
}

// A crash, or SIGTERM, while the loop reads again from before a prepared XA
// transaction (replaying what it published before) writes no checkpoint:
// none may move backwards, not even a heartbeat.
func TestLoopStopWhileReplaying(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.xaPrepare("7831,,1", s.insert("order", "1", 2))
		s.tx(s.insert("order", "1", 1))
		s.tx(s.insert("order", "2", 1), s.insert("order", "2", 1))
		s.tx()
		s.xaCommit("7831,,1")
		s.tx(s.insert("order", "1", 1))
		tick := 20 * time.Millisecond
		h := newHarness(t, s, func(c *config.Config) { c.Kafka.CheckpointInterval, c.Kafka.Batch.MaxWait = tick, tick })
		a := h.start()
		a.feed(s.through(5))
		if err := a.term(); err != nil {
			t.Fatal(err)
		}
		before := h.load()
		if before.GTIDSet != s.set(5) || !before.Replays() || before.From() != s.set(1) {
			t.Fatalf("checkpoint %+v, xa %+v: want gtid_set %s resuming at %s", before, before.XA, s.set(5), s.set(1))
		}

		a = h.start()
		a.feed(s.through(3)) // replaying
		// Long enough for several heartbeats, were they written while replaying.
		time.Sleep(10 * tick)
		if err := a.crash(); !errors.Is(err, errCrash) {
			t.Fatal(err)
		}
		a = h.start()
		a.feed(s.through(3) + 1) // replaying, inside the 4th transaction
		time.Sleep(10 * tick)
		if err := a.term(); err != nil {
			t.Fatal(err)
		}
		if cp := h.load(); cp.GTIDSet != before.GTIDSet || !cp.Time.Equal(before.Time) {
			t.Errorf("a checkpoint was written while replaying: %+v, before %+v", cp, before)
		}
		h.verifyHistory()
		h.start().finish()
		h.verify()
	})
}

// While idle, the loop writes heartbeat checkpoints at
// kafka.checkpoint_interval; transactions without outbox rows move the
// position with them.
func TestLoopHeartbeatWhileIdle(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.tx()
		s.tx()
		h := newHarness(t, s, func(c *config.Config) { c.Kafka.CheckpointInterval = 30 * time.Millisecond })
		a := h.start()
		a.feedAll()
		first := h.waitCheckpoint("at the end of the script", func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == s.end() })
		h.waitCheckpoint("three heartbeats later", func(*checkpoint.Checkpoint) bool {
			n := 0
			for _, cp := range h.history() {
				if cp.GTIDSet == s.end() && cp.Time.After(first.Time) {
					n++
				}
			}
			return n >= 3
		})
		if !a.running() {
			t.Fatal("the loop stopped")
		}
		if err := a.term(); err != nil {
			t.Fatal(err)
		}
		h.verify()
	})
}

// A transaction committed at the source but not yet in Kafka (its commit
// waits for the reader to catch up), then one outbox row of a transaction
// that stays open longer than kafka.transaction_timeout (other tables'
// rows): the loop commits the ended one before half the timeout, so the
// broker aborts nothing; the open transaction's row stays out of Kafka (no
// Kafka transaction is open through it) until that transaction ends, and
// everything is published exactly once.
func TestLoopCommitsPartOfLongTransaction(t *testing.T) {
	realTime(t)
	flavors(t, func(t *testing.T, flavor string) {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.tx(s.insert("order", "1", 1), s.insert("order", "1", 1))
		s.tx(s.insert("order", "1", 1))
		timeout := time.Second
		h := newHarness(t, s, func(c *config.Config) {
			c.Kafka.TransactionTimeout, c.Kafka.Batch.MaxWait = timeout, time.Minute
		})
		h.batch = 0 // one hand-off: the first transaction's end is not where the reader caught up
		a := h.start()
		a.feed(s.through(1) + 1) // the first transaction and the first row of the 2nd
		began := time.Now()
		h.waitCheckpoint("at the end of the first transaction", func(cp *checkpoint.Checkpoint) bool {
			return cp.GTIDSet == s.set(1) && cp.Partial == nil
		})
		if d := time.Since(began); d >= timeout {
			t.Errorf("the ended transaction was committed %s after its end, the transaction timeout is %s", d, timeout)
		}
		h.verifyNoOpenTransaction() // the open transaction's row is not in Kafka yet
		// The source transaction stays open past the timeout.
		time.Sleep(2*timeout - time.Since(began))
		if !a.running() {
			t.Fatalf("the loop stopped: %v", a.wait())
		}
		h.verifyPublished(s.want[:1])
		a.finish()
		h.verify()
	})
}

// SIGTERM in the middle of a batch, inside a source transaction: the loop
// commits the transactions that ended, drops what it read of the open one
// (the next start reads it again from the checkpoint) and returns nil,
// leaving no transaction open (the last stable offsets are the high
// watermarks as soon as it returns). A transaction larger than the batch
// keeps the parts that joined it: the checkpoint's partial says so.
func TestLoopSigtermMidBatch(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		for _, tc := range []struct {
			batch, maxRecords int
			partial           *checkpoint.Partial // of the 2nd transaction's gtid
			published         int                 // rows of s.want
		}{
			{batch: 1, published: 2},
			{batch: 0, published: 2},
			// max_records 3: the first transaction is committed where the
			// reader caught up; 3 rows of the 2nd fill the batch (a partial
			// commit), its 4th is dropped.
			{batch: 1, maxRecords: 3, partial: &checkpoint.Partial{Rows: 3}, published: 5},
		} {
			s := newScript(flavor)
			s.tx(s.insert("order", "1", 2))
			s.tx(s.insert("order", "1", 2), s.insert("order", "2", 2), s.insert("order", "1", 2))
			s.tx(s.insert("order", "1", 1))
			var tweak func(*config.Config)
			if tc.maxRecords > 0 {
				tweak = maxRecords(tc.maxRecords)
			}
			h := newHarness(t, s, tweak)
			h.batch = tc.batch
			a := h.start()
			a.feed(s.through(1) + 2) // two rows events of the 2nd transaction
			if err := a.term(); err != nil {
				t.Fatalf("SIGTERM: %v, want nil (a clean stop)", err)
			}
			h.verifyNoOpenTransaction()
			cp := h.load()
			want := tc.partial
			if want != nil {
				want.GTID = s.gtid(2)
			}
			if cp.GTIDSet != s.set(1) || (cp.Partial == nil) != (want == nil) || want != nil && *cp.Partial != *want {
				t.Fatalf("final checkpoint %+v partial %+v, want gtid_set %s, partial %+v", cp, cp.Partial, s.set(1), want)
			}
			h.verifyPublished(s.want[:tc.published])
			h.start().finish()
			h.verify()
		}
	})
}

// The final commit at SIGTERM fails (the broker refuses EndTxn): the loop
// returns that error, which Run reports (a non-zero exit), not a clean
// stop. The restart publishes everything exactly once.
func TestLoopFinalCommitFails(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 2))
		s.tx() // other tables only: SIGTERM commits the position it moved to
		h := newHarness(t, s, nil)
		var refuse atomic.Bool
		h.kafka.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
			if !refuse.Load() {
				return nil, nil, false
			}
			resp := req.(*kmsg.EndTxnRequest).ResponseKind().(*kmsg.EndTxnResponse)
			resp.ErrorCode = kerr.UnknownServerError.Code
			return resp, nil, true // handled: dropped, the next EndTxn passes
		})
		a := h.start()
		a.feed(s.through(1))
		// The first transaction's commit may still be in flight (pipelined):
		// only the final commit is refused.
		for deadline := time.Now().Add(10 * time.Second); h.load().GTIDSet != s.set(1); {
			if time.Now().After(deadline) {
				t.Fatalf("the first transaction was not committed within 10 s")
			}
			time.Sleep(5 * time.Millisecond)
		}
		refuse.Store(true)
		a.feedAll()
		err := a.term()
		if err == nil || errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "final checkpoint") {
			t.Fatalf("SIGTERM with the final commit refused: %v, want the commit's error", err)
		}
		if cp := h.load(); cp.GTIDSet != s.set(1) || cp.Partial != nil {
			t.Fatalf("checkpoint %+v after the refused commit, want %s", cp, s.set(1))
		}
		h.start().finish()
		h.verify()
	})
}

// The same with a coarse tick: kafka.batch.max_wait and checkpoint_interval
// of a minute make the loop look at the open batch once a second only. An
// ended transaction read 0.6 s after the start, with a transaction timeout
// of 1 s, is 0.4 s old at the first tick (under half the timeout) and 1.4 s
// at the second: the broker has aborted the transaction by then. The loop
// must look often enough to commit before half the timeout has become the
// whole.
func TestLoopCommitsPartOfLongTransactionCoarseTick(t *testing.T) {
	realTime(t)
	flavors(t, func(t *testing.T, flavor string) {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.tx(s.insert("order", "1", 1), s.insert("order", "1", 1))
		h := newHarness(t, s, func(c *config.Config) { c.Kafka.TransactionTimeout = time.Second })
		h.batch = 0
		a := h.start()
		time.Sleep(600 * time.Millisecond) // the phase of the loop's ticker, not a synchronisation
		a.feed(s.through(1) + 1)
		h.waitCheckpoint("at the end of the first transaction", func(cp *checkpoint.Checkpoint) bool {
			return cp.GTIDSet == s.set(1) || !a.running()
		})
		if !a.running() {
			t.Fatalf("the loop stopped: %v", a.wait())
		}
		a.finish()
		h.verify()
	})
}

// While a batch's Kafka commit is in flight (its EndTxn held at the broker),
// the loop goes on taking events; what it routes meanwhile goes into the
// next Kafka transaction, never into the one being committed, and everything
// is published exactly once.
func TestLoopReadsWhileCommitting(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 2))
		s.tx(s.insert("order", "2", 2))
		s.tx(s.insert("order", "3", 1), s.insert("order", "1", 1))
		h := newHarness(t, s, nil)
		release := make(chan struct{})
		var holding atomic.Bool
		var endTxns atomic.Int32
		h.kafka.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
			h.kafka.KeepControl()
			if endTxns.Add(1) == 2 { // after the initial checkpoint's: the first batch's
				holding.Store(true)
				h.kafka.SleepControl(func() { <-release })
			}
			return nil, nil, false
		})
		a := h.start()
		a.feed(s.through(1)) // the first transaction, committed when the loop caught up
		for deadline := time.Now().Add(10 * time.Second); !holding.Load(); {
			if time.Now().After(deadline) {
				t.Fatal("the first batch's EndTxn did not arrive within 10 s")
			}
			time.Sleep(time.Millisecond)
		}
		fed := make(chan struct{})
		go func() { a.feedAll(); close(fed) }()
		select {
		case <-fed: // the loop took every event while the commit was held
		case <-time.After(10 * time.Second):
			close(release)
			t.Fatal("the loop stopped reading while a commit was in flight")
		}
		close(release)
		if err := a.term(); err != nil {
			t.Fatalf("SIGTERM: %v, want nil", err)
		}
		h.verify()
	})
}
