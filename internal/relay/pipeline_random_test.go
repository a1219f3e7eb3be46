package relay

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

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
func TestPipelineRandomisedChains(t *testing.T) {
	realTime(t)
	randomChains(t, 16, false)
}

// As TestPipelineRandomisedChains, with time-driven commits too:
// kafka.batch.max_wait 30 ms, a heartbeat every 80 ms, a one-second
// transaction timeout (a source transaction read for half of it is
// committed in part by the tick), and pauses of up to 700 ms between
// hand-offs, often in the middle of a source transaction.
func TestPipelineRandomisedChainsTimed(t *testing.T) {
	realTime(t)
	randomChains(t, 6, true)
}

func randomChains(t *testing.T, seeds int, timed bool) {
	if testing.Short() {
		seeds = min(seeds, 3)
	}
	first := 0
	if n, err := strconv.Atoi(os.Getenv("RELAY_TEST_PIPELINE_CHAIN_SEEDS")); err == nil && n > 0 {
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

// Randomised chains over plain transactions (some split by small batch
// bounds), some of which hold a bad row (router.on_error fail): attempts
// stopped by SIGTERM or a crash at random points, EndTxn slowed at random
// (commits in flight while records are held and the stop comes), reader
// hand-offs of random sizes. Each time the loop stops on a bad row, the
// checkpoint must be just before that transaction, its partial counting
// exactly the rows of it that read_committed consumers see; the operator
// then skips it (`checkpoint skip --gtid`, dropping the partial). At the
// end every row of the transactions not skipped is published once, in
// order per aggregate, and nothing of a skipped one beyond its partial.
func TestPipelineRandomStopsAndSkips(t *testing.T) {
	realTime(t)
	seeds := 10
	if testing.Short() {
		seeds = 3
	}
	for seed := range seeds {
		t.Run("seed="+strconv.Itoa(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(20, uint64(seed)))
			flavor := []string{"mariadb", "mysql"}[rng.IntN(2)]
			s := newScript(flavor)
			txOf := map[string]int{} // event id -> transaction
			posOf := map[string]int{}
			bad := map[int]bool{}
			for s.n < 14+rng.IntN(10) {
				var evs [][]outboxRow
				for range rng.IntN(4) {
					evs = append(evs, s.insert([]string{"order", "customer"}[rng.IntN(2)], strconv.Itoa(rng.IntN(3)), 1+rng.IntN(4)))
				}
				s.tx(evs...)
				pos := 0
				for _, rs := range evs {
					for _, r := range rs {
						txOf[r.id], posOf[r.id] = s.n, pos
						pos++
					}
				}
				if len(evs) > 0 && rng.IntN(5) == 0 {
					k := rng.IntN(len(evs))
					spoil(s, s.eventIndex(s.n, k), rng.IntN(len(evs[k])))
					bad[s.n] = true
				}
			}
			maxRec := 1 + rng.IntN(5)
			h := newHarness(t, s, maxRecords(maxRec))
			h.batch = rng.IntN(4)
			endTxn := time.Duration(rng.IntN(30)) * time.Millisecond
			var mu sync.Mutex
			jrng := rand.New(rand.NewPCG(uint64(seed), 20))
			h.kafka.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
				h.kafka.KeepControl()
				mu.Lock()
				d := time.Duration(jrng.Int64N(int64(endTxn) + 1))
				mu.Unlock()
				h.kafka.SleepControl(func() { time.Sleep(d) })
				return nil, nil, false
			})
			t.Logf("%s: %d transactions, bad rows in %v, max_records %d, hand-off %d, EndTxn up to %s",
				flavor, s.n, slices.Sorted(maps.Keys(bad)), maxRec, h.batch, endTxn)
			dropped := map[string]bool{} // rows of skipped transactions never published
			expect := func(upTo int, partial int64) []outboxRow {
				var out []outboxRow
				for _, w := range s.want {
					n := txOf[w.id]
					if dropped[w.id] || n > upTo || n == upTo && int64(posOf[w.id]) >= partial {
						continue
					}
					out = append(out, w)
				}
				return out
			}
			skips := 0
			for attempt := 0; attempt < 60; attempt++ {
				a := h.start()
				cut := a.next
				finished := false
				for a.running() && !finished {
					if a.next >= len(a.todo) {
						finished = true
						break
					}
					cut = a.todo[a.next] + 1 + rng.IntN(max(1, len(s.events)/3))
					a.feed(cut)
					if rng.IntN(3) == 0 {
						time.Sleep(time.Duration(rng.IntN(25)) * time.Millisecond)
					}
					if rng.IntN(3) == 0 {
						break // stop this attempt here
					}
				}
				var err error
				if finished {
					if err = a.term(); err == nil {
						break
					}
				} else if a.running() {
					if rng.IntN(2) == 0 {
						err = a.term()
					} else if err = a.crash(); errors.Is(err, errCrash) {
						err = nil
					}
					if err != nil && !errors.Is(err, ErrBadRow) {
						t.Fatalf("attempt %d stopped: %v", attempt, err)
					}
				} else {
					err = a.wait()
				}
				if !errors.Is(err, ErrBadRow) {
					if err != nil {
						t.Fatalf("attempt %d: %v", attempt, err)
					}
					continue
				}
				// A stop on a bad row of transaction n.
				cp := h.load()
				set, _ := binlog.ParseSet(flavor, cp.GTIDSet)
				n := 1
				for n <= s.n && set.Contain(mustSet(flavor, s.gtid(n))) {
					n++
				}
				if !bad[n] {
					t.Fatalf("attempt %d: %v with the checkpoint at %q: transaction %d (the next) has no bad row", attempt, err, cp.GTIDSet, n)
				}
				if cp.GTIDSet != s.set(n-1) {
					t.Fatalf("attempt %d: checkpoint %q, want %q", attempt, cp.GTIDSet, s.set(n-1))
				}
				var partial int64
				if cp.Partial != nil {
					if cp.Partial.GTID != s.gtid(n) {
						t.Fatalf("attempt %d: partial %+v of another transaction than %s", attempt, cp.Partial, s.gtid(n))
					}
					partial = cp.Partial.Rows
				}
				h.verifyPublished(expect(n, partial))
				if t.Failed() {
					t.Fatalf("attempt %d: stop at %s, checkpoint %q partial %+v", attempt, s.gtid(n), cp.GTIDSet, cp.Partial)
				}
				for _, w := range s.want {
					if txOf[w.id] == n && int64(posOf[w.id]) >= partial {
						dropped[w.id] = true
					}
				}
				next := *cp
				next.GTIDSet, next.Partial, next.Time = s.set(n), nil, time.Now().UTC()
				h.writeCheckpoint(&next)
				skips++
			}
			t.Logf("%d skips", skips)
			h.verifyPublished(expect(s.n+1, 0))
			h.verifyNoOpenTransaction()
			if cp := h.load(); cp.GTIDSet != s.end() {
				t.Errorf("final checkpoint %q, want %q", cp.GTIDSet, s.end())
			}
		})
	}
}

func mustSet(flavor, v string) mysql.GTIDSet {
	set, err := binlog.ParseSet(flavor, v)
	if err != nil {
		panic(err)
	}
	return set
}
