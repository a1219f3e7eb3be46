package relay

// Adversarial review of issue 17's pipelining (commit in flight, held
// records, settle wait, linger, batch bounds), fourth round: cases on the
// scripted relay-loop harness (script_test.go).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

// A fatal stop on a transaction whose rows the loop has already read
// (statement-logged DML after a row-logged outbox INSERT in the same
// transaction: a session with binlog_format=MIXED; an event the relay
// cannot open after outbox rows), or a fatal stop the loop itself decides
// at a source transaction boundary (XA COMMIT of an XA transaction
// prepared before the relay's start, whose documented recovery is also
// `checkpoint skip --gtid`), leaves the transactions that ENDED before it
// uncommitted: the commit-before-the-stop in consume only runs for reader
// stops, and only when curGTID == "". The checkpoint then stays two (or more) transactions
// behind the GTID the error names, and for good: a restart reads tx 2
// and the stopped transaction in one hand-off (not caught up at tx 2's
// commit), so tx 2 is again in the open batch when the stop comes.
// `checkpoint skip --gtid G3` refuses (G3 is not the next after the
// checkpoint); with --force on MariaDB the domain's position jumps to G3
// and tx 2, committed on the source, is never published (lost).
//
// The pipelined shape is new with issue 17: tx 2 ended where the reader
// had caught up, which before pipelining committed it at once; with tx 1's
// commit in flight it is only held (wantCommit), and the stop that follows
// drops it.
func TestAttack19FatalStopInsideTransactionDropsEndedOnes(t *testing.T) {
	type shape struct {
		name string
		// stop builds the third transaction and returns how many of the
		// script's events to feed and the reader's error to send after
		// them (nil: the loop stops by itself).
		stop func(s *script) (feed int, readErr error)
	}
	shapes := []shape{
		{"statement-logged-after-rows", func(s *script) (int, error) {
			s.tx(s.insert("order", "3", 2))
			// The reader hands the rows event on, then meets the statement.
			return s.through(3) - 1, fmt.Errorf("%w: transaction %s changed app.outbox with a statement", binlog.ErrStatementLogged, s.gtid(3))
		}},
		{"unreadable-event-after-rows", func(s *script) (int, error) {
			s.tx(s.insert("order", "3", 1))
			// An event the relay cannot open, after the outbox rows of a
			// transaction that touched a captured table.
			return s.through(3) - 1, fmt.Errorf("%w: transaction %s: cannot read event", binlog.ErrUnframed, s.gtid(3))
		}},
		{"xa-commit-prepared-before-start", func(s *script) (int, error) {
			s.xaCommit("u,,1") // its prepare is not in the binlog read: ErrUnknownXA
			return s.through(3), nil
		}},
	}
	for _, sh := range shapes {
		for _, pipelined := range []bool{true, false} {
			name := sh.name + map[bool]string{true: "/tx1-commit-in-flight", false: "/one-hand-off"}[pipelined]
			t.Run(name, func(t *testing.T) {
				s := newScript("mariadb")
				s.tx(s.insert("order", "1", 1))
				s.tx(s.insert("order", "2", 1))
				feed, stopErr := sh.stop(s)
				h := newHarness(t, s, nil)
				if pipelined {
					slowEndTxn(h, time.Second)
				} else {
					h.batch = 0
				}
				a := h.start()
				if pipelined {
					a.feed(s.through(1)) // caught up: tx 1's commit in flight for 1 s
					a.feed(s.through(2)) // caught up: tx 2 held, due when tx 1's commit ends
				}
				a.feed(feed)
				if stopErr != nil {
					a.readErr <- stopErr
				}
				err := a.wait()
				cp := h.load()
				t.Logf("loop returned (fatal %v): %v; checkpoint %q", fatal(err), err, cp.GTIDSet)
				if !fatal(err) {
					t.Fatalf("not a fatal stop: %v", err)
				}
				if cp.GTIDSet != s.set(2) {
					t.Errorf("fatal stop naming %s with the checkpoint at %q, not %q: tx %s ended before the stop and is not committed; "+
						"`checkpoint skip --gtid %s` refuses (not the next after the checkpoint), and with --force (MariaDB) "+
						"moves the domain to %s: %s is never published",
						s.gtid(3), cp.GTIDSet, s.set(2), s.gtid(2), s.gtid(3), s.gtid(3), s.gtid(2))
				}
				// A restart (the operator's first move) reads tx 2 and the
				// stop in one hand-off: the checkpoint never reaches tx 2.
				h.batch = 0
				b := h.start()
				b.feed(feed)
				if stopErr != nil {
					b.readErr <- stopErr
				}
				err = b.wait()
				if cp := h.load(); cp.GTIDSet != s.set(2) {
					t.Errorf("after a restart: %v (fatal %v), checkpoint still %q (want %q): the stop is permanent, with tx %s behind the checkpoint",
						err, fatal(err), cp.GTIDSet, s.set(2), s.gtid(2))
				}
			})
		}
	}
}

// randomScript builds a script of n source transactions from rng: plain
// ones of 0-3 rows events (1-4 rows each) over a few aggregates of two
// types (the second type's topic is created when first met, often while a
// commit is in flight), XA transactions prepared and later committed or
// rolled back (some still prepared at the end), one-phase XA.
func randomScript(rng *rand.Rand, flavor string, n int) *script {
	s := newScript(flavor)
	if rng.IntN(2) == 0 {
		s.behind() // catching up: batches due at their bounds or a quiet reader
	}
	types := []string{"order", "customer"}
	rows := func() []outboxRow {
		return s.insert(types[rng.IntN(len(types))], strconv.Itoa(rng.IntN(3)), 1+rng.IntN(4))
	}
	var prepared []string
	xa := 0
	for s.n < n {
		switch r := rng.IntN(10); {
		case r < 6:
			var evs [][]outboxRow
			for range rng.IntN(4) {
				evs = append(evs, rows())
			}
			s.tx(evs...)
		case r < 7:
			xa++
			id := fmt.Sprintf("x%d,,1", xa)
			s.xaPrepare(id, rows())
			prepared = append(prepared, id)
		case r < 8 && len(prepared) > 0:
			i := rng.IntN(len(prepared))
			id := prepared[i]
			prepared = slices.Delete(prepared, i, i+1)
			if rng.IntN(3) == 0 {
				s.xaRollback(id)
			} else {
				s.xaCommit(id)
			}
		case r < 9:
			xa++
			s.xaOnePhase(fmt.Sprintf("o%d,,1", xa), rows())
		default:
			s.tx()
		}
	}
	return s
}

// Randomised chains of attempts on the pipelined loop: small batch bounds
// (partial commits of one source transaction), slow and jittered EndTxn
// (commits in flight while records are held), DescribeTransactions slow,
// failing or answering a stale CompleteCommit at once, a producer linger
// longer than the commits, new topics met while a commit is in flight,
// and every attempt stopped by SIGTERM, a crash, or a new instance that
// fences it while it holds records. What a read_committed consumer sees
// must be every committed row once, per aggregate in commit order.
func TestAttack19RandomisedPipelineChains(t *testing.T) {
	randomChains(t, 16, false)
}

// As TestAttack19RandomisedPipelineChains, with time-driven commits too:
// kafka.batch.max_wait 30 ms, a heartbeat every 80 ms, a one-second
// transaction timeout (a source transaction read for half of it is
// committed in part by the tick), and pauses of up to 700 ms between
// hand-offs, often in the middle of a source transaction.
func TestAttack19RandomisedPipelineChainsTimed(t *testing.T) {
	randomChains(t, 6, true)
}

func randomChains(t *testing.T, seeds int, timed bool) {
	if testing.Short() {
		seeds = min(seeds, 3)
	}
	first := 0
	if n, err := strconv.Atoi(os.Getenv("RELAY_ATTACK19_SEEDS")); err == nil && n > 0 {
		first, seeds = seeds, seeds+n // more seeds, after the usual ones
	}
	for seed := first; seed < seeds; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(19, uint64(seed)))
			flavor := []string{"mariadb", "mysql"}[rng.IntN(2)]
			s := randomScript(rng, flavor, 12+rng.IntN(14))
			maxRec := 1 + rng.IntN(6)
			linger := []time.Duration{0, 20 * time.Millisecond, 150 * time.Millisecond}[rng.IntN(3)]
			h := newHarness(t, s, func(c *config.Config) {
				c.Kafka.Batch.MaxRecords = maxRec
				c.Kafka.Linger = linger
				if timed {
					c.Kafka.Batch.MaxWait = 30 * time.Millisecond
					c.Kafka.CheckpointInterval = 80 * time.Millisecond
					c.Kafka.TransactionTimeout = time.Second
				}
			})
			h.batch = rng.IntN(4)
			endTxn := time.Duration(rng.IntN(40)) * time.Millisecond
			var jitter sync.Mutex
			jrng := rand.New(rand.NewPCG(uint64(seed), 7))
			h.kafka.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
				h.kafka.KeepControl()
				jitter.Lock()
				d := time.Duration(jrng.Int64N(int64(endTxn) + 1))
				jitter.Unlock()
				h.kafka.SleepControl(func() { time.Sleep(d) })
				return nil, nil, false
			})
			// DescribeTransactions: 0 as is, 1 slow, 2 failing, 3 a stale
			// CompleteCommit at once, 4 Ongoing until the wait runs out.
			// States fabricated keep the real producer id and epoch (asked
			// in the background): the second lane checks them (lanes.go).
			describe := rng.IntN(5)
			states := watchTxnStates(t, h)
			h.kafka.ControlKey(int16(kmsg.DescribeTransactions), func(req kmsg.Request) (kmsg.Response, error, bool) {
				h.kafka.KeepControl()
				if states.bypass.Load() {
					return nil, nil, false
				}
				switch describe {
				case 1:
					h.kafka.SleepControl(func() { time.Sleep(30 * time.Millisecond) })
				case 2:
					return describeTxnAnswer(req, func(st *kmsg.DescribeTransactionsResponseTransactionState) {
						st.ErrorCode = kerr.CoordinatorLoadInProgress.Code
					}), nil, true
				case 3:
					return states.answer(req, func(st *kmsg.DescribeTransactionsResponseTransactionState) {
						st.State = "CompleteCommit"
					}), nil, true
				case 4:
					return states.answer(req, func(st *kmsg.DescribeTransactionsResponseTransactionState) {
						st.State = "Ongoing"
					}), nil, true
				}
				return nil, nil, false
			})
			t.Logf("%s: %d transactions, %d events, %d rows; max_records %d, reader batch %d, linger %s, EndTxn up to %s, DescribeTransactions mode %d",
				flavor, s.n, len(s.events), len(s.want), maxRec, h.batch, linger, endTxn, describe)
			a := h.start()
			cut := 0
			for stops := 0; stops < 6 && cut < len(s.events); stops++ {
				cut += 1 + rng.IntN(max(1, len(s.events)/3))
				a.feed(cut)
				if rng.IntN(3) == 0 {
					time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond) // let a commit land, or not
				}
				if timed {
					// Often inside a source transaction: the tick commits
					// by max_wait, heartbeat or half the transaction timeout.
					time.Sleep(time.Duration(rng.IntN(700)) * time.Millisecond)
					cut += rng.IntN(3)
					a.feed(cut)
					time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
				}
				switch how := rng.IntN(3); how {
				case 0:
					if err := a.term(); err != nil {
						t.Logf("stop %d (SIGTERM after event %d): %v", stops, cut, err)
					}
					a = h.start()
				case 1:
					if err := a.crash(); !errors.Is(err, errCrash) {
						t.Logf("stop %d (crash after event %d): %v", stops, cut, err)
					}
					a = h.start()
				case 2:
					// A second instance initialises the same transactional
					// id while a runs (and may hold records, or have a
					// commit in flight): a must publish nothing more.
					b := h.start()
					err := a.term()
					t.Logf("stop %d (fenced after event %d): the old attempt returned %v", stops, cut, err)
					a = b
				}
			}
			a.finish()
			h.verify()
		})
	}
}

// The XA COMMIT of an XA transaction prepared before the relay's first
// start (another application's, in flight at `start: now`; it wrote no
// captured table: the benign case, only logged) makes the loop look its
// prepare up in the server's binlogs (SHOW BINLOG EVENTS, paged, newest
// binlog first, up to 5 minutes) in the middle of a batch, with the Kafka
// transaction open: nothing commits it meanwhile (the tick cannot run, the
// loop is blocked; no commit is in flight to hold the records instead).
// A lookup longer than what is left of kafka.transaction_timeout lets the
// broker abort the transaction; the commit after it fails (ErrTxnTimedOut,
// not fatal), and every restart reads the same batch, looks the same XA
// transaction up again (no verdict is kept), and fails the same way: the
// relay never gets past it. Here the transaction timeout is 2 s and the
// lookup takes 2.5 s (the defaults are 60 s and up to 5 minutes; the
// lookup reads the newest binlogs from their start up to the commit, in
// pages of 10,000 events, each page re-read from the file's start by the
// server).
func TestAttack19XALookupOutlivesKafkaTransaction(t *testing.T) {
	s := newScript("mariadb")
	s.tx(s.insert("order", "1", 2))
	s.xaCommit("other-app,,1") // prepared before the relay's start, by another application
	s.tx(s.insert("order", "1", 1))
	h := newHarness(t, s, func(c *config.Config) { c.Kafka.TransactionTimeout = 2 * time.Second })
	h.batch = 0 // catch-up: tx 1's rows and the XA COMMIT in one hand-off
	var lookups atomic.Int32
	h.relay.findXAPrepare = func(ctx context.Context, _ *binlog.Server, xid, _ string) (*binlog.XAPrepare, error) {
		lookups.Add(1)
		select {
		case <-time.After(2500 * time.Millisecond): // SHOW BINLOG EVENTS through large binlogs
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &binlog.XAPrepare{GTID: "0-1-0", Tables: []string{"billing.ledger"}}, nil // no captured table
	}
	var last error
	for i := range 3 {
		a := h.start()
		a.feedAll() // the loop commits where it caught up, after the lookup
		for deadline := time.Now().Add(10 * time.Second); a.running() && h.load().GTIDSet != s.end() && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		if last = a.term(); last == nil {
			break
		}
		t.Logf("attempt %d: %v", i+1, last)
	}
	cp := h.load()
	t.Logf("%d lookups; checkpoint %q", lookups.Load(), cp.GTIDSet)
	if last != nil {
		t.Fatalf("three attempts failed the same way (the broker aborted the transaction left open across the XA lookup), checkpoint still %q: %v", cp.GTIDSet, last)
	}
	h.verify()
}

// A new instance initialises the transactional id while the old one's
// commit is in flight (EndTxn held 600 ms at the broker) and the old loop
// holds the next transaction's records: the old commit is fenced (the
// coordinator aborted its transaction), the old loop returns ErrFenced
// without producing what it held, and the new instance, which read the
// checkpoint after fencing, publishes everything once.
func TestAttack19FenceDuringInFlightCommitWithHeldRecords(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 2))
		s.tx(s.insert("order", "1", 1), s.insert("customer", "1", 1)) // a new topic, created while held
		s.tx(s.insert("order", "1", 1))
		h := newHarness(t, s, nil)
		var endTxns atomic.Int32
		h.kafka.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
			h.kafka.KeepControl()
			if endTxns.Add(1) == 2 { // the first batch's (after the initial checkpoint's)
				h.kafka.SleepControl(func() { time.Sleep(600 * time.Millisecond) })
			}
			return nil, nil, false
		})
		a := h.start()
		a.feed(s.through(1)) // caught up: in flight for 600 ms
		a.feed(s.through(2)) // held, due when the commit ends
		b := h.start()       // fences a while its commit is in flight
		err := a.wait()
		t.Logf("old attempt: %v", err)
		if !errors.Is(err, ErrFenced) {
			t.Errorf("old attempt returned %v, want ErrFenced", err)
		}
		b.finish()
		h.verify()
	})
}

// An acknowledgement time-out of the commit in flight (a throttled broker:
// 8 records take 2 s, kafka.request_timeout 1.5 s) while the loop holds the
// next batch: the attempt fails with errAckTimeout, the bound is halved
// from the failed batch's size (not the held one's), and the restart
// publishes everything once in smaller batches.
func TestAttack19AckTimeoutHalvesWhileHolding(t *testing.T) {
	s := newScript("mariadb")
	s.tx(s.insert("order", "1", 8)) // one full batch: committed at once
	s.tx(s.insert("order", "1", 3)) // held while its flush times out
	s.tx(s.insert("order", "2", 3))
	h := newHarness(t, s, func(c *config.Config) {
		c.Kafka.Batch.MaxRecords = 8
		c.Kafka.RequestTimeout = 1500 * time.Millisecond
	})
	h.batch = 0
	a := h.start()
	// After the initial checkpoint: the broker takes 250 ms per record.
	var throttled atomic.Bool
	throttled.Store(true)
	var mu sync.Mutex
	h.kafka.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.kafka.KeepControl()
		if !throttled.Load() {
			return nil, nil, false
		}
		n := 0
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			for _, p := range tp.Partitions {
				n += len(p.Records)
			}
		}
		h.kafka.SleepControl(func() { mu.Lock(); time.Sleep(time.Duration(n) * 250 * time.Millisecond); mu.Unlock() })
		return nil, nil, false
	})
	a.feed(s.through(1))
	a.feedAll()
	err := a.wait()
	t.Logf("first attempt: %v; batch bound now %d", err, h.relay.batchLimit())
	if !errors.Is(err, errAckTimeout) {
		t.Fatalf("first attempt: %v, want an acknowledgement time-out", err)
	}
	if got := h.relay.batchLimit(); got != 4 {
		t.Errorf("bound %d after the 8-record batch timed out, want 4", got)
	}
	throttled.Store(false)
	h.start().finish()
	h.verify()
}

// The exactly-once producer's linger (here kafka.linger 2 s, far above the
// 5 ms minimum) never delays a commit: a partial commit of a source
// transaction cut by max_records, a batch committed where the reader caught
// up, a checkpoint-only heartbeat and the final commit on SIGTERM all
// flush before EndTxn, so each lands well within the linger. A crash with
// records lingering publishes none of them.
func TestAttack19LingerNeverDelaysCommits(t *testing.T) {
	s := newScript("mariadb")
	s.tx(s.insert("order", "1", 3), s.insert("order", "2", 3)) // 6 rows, max_records 4: a partial commit
	s.tx()                                                     // checkpoint only: the heartbeat commits it
	s.tx(s.insert("order", "1", 1))                            // its rows lingering at a crash
	s.tx(s.insert("order", "2", 1))                            // rows lingering at SIGTERM
	h := newHarness(t, s, func(c *config.Config) {
		c.Kafka.Batch.MaxRecords = 4
		c.Kafka.Linger = 2 * time.Second
		c.Kafka.CheckpointInterval = 300 * time.Millisecond
	})
	a := h.start()
	began := time.Now()
	a.feed(s.through(1) - 1) // the rows: 4 make a batch (partial), 2 lingering
	cp := h.waitCheckpoint("partial", func(cp *checkpoint.Checkpoint) bool { return cp.Partial != nil && cp.Partial.Rows == 4 })
	t.Logf("partial commit after %s: %+v", time.Since(began), cp.Partial)
	a.feed(s.through(1)) // its commit, caught up
	h.waitCheckpoint("tx 1", func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == s.set(1) })
	a.feed(s.through(2))
	h.waitCheckpoint("heartbeat past tx 2", func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == s.set(2) })
	if d := time.Since(began); d >= 2*time.Second {
		t.Errorf("three commits took %s: the producer's linger (2 s) delayed them", d)
	}
	a.feed(s.through(3) - 1) // tx 3's row lingering in the client, then kill -9
	if err := a.crash(); !errors.Is(err, errCrash) {
		t.Fatal(err)
	}
	b := h.start()
	b.feed(s.through(4) - 1) // tx 3, and tx 4's row lingering at SIGTERM
	began = time.Now()
	if err := b.term(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d >= 2*time.Second {
		t.Errorf("SIGTERM took %s with records lingering", d)
	}
	h.start().finish()
	h.verify()
}

// startLeased is h.start with the attempt run under ls, a term's lease, as
// Relay.attempt runs it inside an election: the sinks (both lanes) refuse
// to produce or commit once it is lost and abort what their clients buffer.
func (h *harness) startLeased(ls *lease) *attempt {
	t, r, cfg := h.t, h.relay, h.cfg
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	limits := &topicLimits{}
	cl, err := kgo.NewClient(producerOpts(cfg, limits, nil, r.kopts)...)
	if err != nil {
		t.Fatal(err)
	}
	a := &attempt{h: h, cl: cl, events: make(chan []binlog.Event), readErr: make(chan error, 1), done: make(chan struct{})}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			cl.Close()
			t.Fatalf("start attempt: %s: %v", what, err)
		}
	}
	must("checkpoint topic", r.store.EnsureTopic(ctx, kadm.NewClient(cl), cfg.Kafka.ReplicationFactor))
	_, _, err = cl.ProducerID(ctx)
	must("init producer", err)
	a.laneCl, a.checkCl, err = r.secondLane(ctx, limits, nil)
	must("second lane", err)
	a.cp, err = r.store.Load(ctx, cfg.Name)
	must("load checkpoint", err)
	a.from, err = r.startPosition(h.srv, a.cp)
	must("start position", err)
	tracker, err := r.tracker(ctx, h.srv, a.cp)
	must("schema tracker", err)
	// As Relay.attempt: the sink's context carries the lease, and is not
	// canceled with the term (runCtx).
	opts := sinkOptions{txn: true, timeout: cfg.Kafka.RequestTimeout,
		txnTimeout: cfg.Kafka.TransactionTimeout, parts: cfg.Kafka.TopicPartitions, repl: cfg.Kafka.ReplicationFactor,
		maxUnacked: int64(2 * cfg.Kafka.Batch.MaxRecords), limits: limits}
	a.snk = newSink(context.WithoutCancel(ls.ctx), cl, r.store, opts)
	l, err := newLoop(r, h.srv, a.cp, a.from, a.snk)
	must("new loop", err)
	if a.laneCl != nil {
		a.lane = newSink(context.WithoutCancel(ls.ctx), a.laneCl, r.store, opts)
		l.addLane(a.lane, a.checkCl)
	}
	l.schema = tracker.Tables()
	if a.cp == nil {
		must("initial checkpoint", l.commit(ls.ctx))
	}
	from, err := binlog.ParseSet(h.s.flavor, a.from)
	must("start position", err)
	for i, ev := range h.s.events {
		if one, _ := binlog.ParseSet(h.s.flavor, ev.GTID); !from.Contain(one) {
			a.todo = append(a.todo, i)
		}
	}
	a.cancel = ls.cancel
	go func() {
		defer close(a.done)
		a.err = l.run(ls.ctx, a.events, a.readErr)
	}()
	return a
}

// The lease is lost (i) while the commit in flight waits for its EndTxn
// and the loop holds the next batch, (ii) while the commit in flight
// flushes (its produce held at the broker; records lingering), (iii) with
// an open batch lingering in the client and no commit in flight. Each
// time the loop returns ErrLeaseLost at once, nothing it held is
// produced, and what reaches read_committed readers is exactly what the
// committed checkpoints cover: the next active instance publishes the
// rest once.
func TestAttack19LeaseLostAroundInFlightCommit(t *testing.T) {
	for _, when := range []string{"in-endtxn", "in-flush", "open-batch-lingering"} {
		t.Run(when, func(t *testing.T) {
			s := newScript("mariadb")
			s.tx(s.insert("order", "1", 2))
			s.tx(s.insert("order", "1", 2))
			s.tx(s.insert("order", "1", 1))
			h := newHarness(t, s, func(c *config.Config) { c.Kafka.Linger = time.Second })
			reached := make(chan struct{}, 8)
			switch when {
			case "in-endtxn":
				var n atomic.Int32
				h.kafka.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
					h.kafka.KeepControl()
					if n.Add(1) == 2 {
						reached <- struct{}{}
						h.kafka.SleepControl(func() { time.Sleep(400 * time.Millisecond) })
					}
					return nil, nil, false
				})
			case "in-flush":
				var n atomic.Int32
				h.kafka.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
					h.kafka.KeepControl()
					for _, tp := range req.(*kmsg.ProduceRequest).Topics {
						if tp.Topic != h.cfg.Kafka.CheckpointTopic && n.Add(1) == 1 {
							reached <- struct{}{}
							h.kafka.SleepControl(func() { time.Sleep(400 * time.Millisecond) })
						}
					}
					return nil, nil, false
				})
			}
			ls := newLease(context.Background())
			a := h.startLeased(ls)
			switch when {
			case "open-batch-lingering":
				a.feed(s.through(1) - 1) // rows produced, lingering (1 s), no commit
				time.Sleep(50 * time.Millisecond)
			default:
				a.feed(s.through(1)) // caught up: the commit starts
				<-reached
				a.feed(s.through(2)) // held
			}
			ls.lose("test")
			err := a.wait()
			t.Logf("loop returned %v", err)
			if !errors.Is(err, ErrLeaseLost) {
				t.Errorf("loop returned %v, want ErrLeaseLost", err)
			}
			cp := h.load()
			t.Logf("checkpoint after the loss: %q", cp.GTIDSet)
			h.verifyPublished(s.want[:cp.Events])
			h.kafka.DropControl()
			h.start().finish()
			h.verify()
		})
	}
}
