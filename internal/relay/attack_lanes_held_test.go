package relay

// Adversarial review of two transaction lanes (kafka.transaction_lanes 2):
// scenarios that held. Each holds lane 1's (`<name>`) EndTxn at the broker while the
// loop has already produced the next batch into lane 2 (`<name>#2`), then
// disturbs the pipeline.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// eventually polls cond every 5 ms for at most 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// countInits counts the InitProducerID requests for id the broker receives.
func countInits(h *harness, id string) *atomic.Int32 {
	var n atomic.Int32
	h.kafka.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.kafka.KeepControl()
		if r := req.(*kmsg.InitProducerIDRequest); r.TransactionalID != nil && *r.TransactionalID == id {
			n.Add(1)
		}
		return nil, nil, false
	})
	return &n
}

func TestAttackLanesHeld(t *testing.T) {
	for _, how := range []string{"endtxn-fails", "sigterm", "zombie", "fence-lane2-only", "fence-lane1-only", "lease-lost"} {
		t.Run(how, func(t *testing.T) {
			s := newScript("mariadb")
			for i := range 8 {
				s.tx(s.insert("order", []string{"1", "2"}[i%2], 1+i%2))
			}
			h := newHarness(t, s, nil)
			var armed, holding atomic.Bool
			var lane2Produces atomic.Int32
			reached := make(chan struct{}, 1)
			release := make(chan struct{})
			h.kafka.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
				h.kafka.KeepControl()
				r := req.(*kmsg.EndTxnRequest)
				if r.Commit && r.TransactionalID == h.cfg.Name && armed.CompareAndSwap(true, false) {
					holding.Store(true)
					reached <- struct{}{}
					h.kafka.SleepControl(func() { <-release })
					holding.Store(false)
					if how == "endtxn-fails" {
						resp := r.ResponseKind().(*kmsg.EndTxnResponse)
						resp.ErrorCode = kerr.UnknownServerError.Code
						return resp, nil, true
					}
				}
				return nil, nil, false
			})
			h.kafka.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				h.kafka.KeepControl()
				if id := req.(*kmsg.ProduceRequest).TransactionID; id != nil && *id == checkpoint.TransactionalIDs(h.cfg.Name)[1] && holding.Load() {
					lane2Produces.Add(1)
				}
				return nil, nil, false
			})
			var a *attempt
			var ls *lease
			if how == "lease-lost" {
				ls = newLease(context.Background())
				a = h.startLeased(ls)
			} else {
				a = h.start()
			}
			// The initial checkpoint went to lane 1, transaction 1 to lane 2.
			a.feed(s.through(1))
			h.waitCheckpoint("at 1", func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == s.set(1) })
			armed.Store(true)
			a.feed(s.through(2)) // lane 1 commits: its EndTxn held
			<-reached
			a.feed(s.through(4)) // lane 2: produced while lane 1's EndTxn is held
			eventually(t, "records produced into lane 2 while lane 1's commit is held", func() bool { return lane2Produces.Load() > 0 })
			var err error
			switch how {
			case "endtxn-fails":
				close(release)
				err = a.wait()
			case "sigterm":
				a.cancel() // SIGTERM while lane 1's commit is held
				close(release)
				err = a.wait()
				if err != nil {
					t.Fatalf("SIGTERM: %v", err)
				}
				if cp := h.load(); cp.GTIDSet != s.set(4) {
					t.Fatalf("after SIGTERM: checkpoint %q, want %q", cp.GTIDSet, s.set(4))
				}
			case "zombie":
				inits := countInits(h, h.cfg.Name)
				done := make(chan *attempt)
				go func() { done <- h.start() }()
				eventually(t, "the new attempt initialises the name", func() bool { return inits.Load() > 0 })
				close(release)
				b := <-done
				a.feed(s.through(6))
				err = a.wait()
				b.finish()
			case "fence-lane2-only", "fence-lane1-only":
				id := checkpoint.TransactionalIDs(h.cfg.Name)[map[string]int{"fence-lane2-only": 1, "fence-lane1-only": 0}[how]]
				cl, cerr := kgo.NewClient(append(h.relay.kopts, kgo.TransactionalID(id))...)
				if cerr != nil {
					t.Fatal(cerr)
				}
				inits := countInits(h, id)
				done := make(chan error)
				go func() { _, _, e := cl.ProducerID(context.Background()); done <- e }()
				eventually(t, "the other producer initialises "+id, func() bool { return inits.Load() > 0 })
				close(release)
				if e := <-done; e != nil {
					t.Fatal(e)
				}
				cl.Close()
				a.feed(s.through(6))
				err = a.wait()
			case "lease-lost":
				ls.lose("test")
				close(release)
				err = a.wait()
				cp := h.load()
				h.verifyPublished(s.want[:cp.Events])
			}
			t.Logf("first attempt: %v", err)
			h.kafka.DropControl()
			if how != "zombie" {
				h.start().finish()
			}
			h.verify()
			if how == "endtxn-fails" || how == "fence-lane1-only" {
				if err == nil {
					t.Error("no error")
				}
			}
			if how == "lease-lost" && !errors.Is(err, ErrLeaseLost) {
				t.Errorf("lease lost: %v", err)
			}
		})
	}
}

// checkpoint set while a relay runs (not restarting): Write fences lane 2,
// its init of the name is held at the broker while the relay reads on; the
// relay stops (fenced) and commits nothing after Write: the operator's
// checkpoint stays.
func TestAttackLanesCheckpointSetWhileRunningHeld(t *testing.T) {
	for _, first := range []int{1, 2} { // which transaction count before the set (lane of the next batch)
		s := newScript("mariadb")
		for range 6 {
			s.tx(s.insert("order", "1", 1))
		}
		h := newHarness(t, s, nil)
		a := h.start()
		a.feed(s.through(first))
		h.waitCheckpoint("first", func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == s.set(first) })
		set := &checkpoint.Checkpoint{Name: h.cfg.Name, GTIDSet: s.set(1), Flavor: "mariadb", Schema: outboxSchema, Time: time.Now().UTC()}
		held, release, wrote := writeHoldingInit(h, set)
		<-held
		// The relay reads on while Write's init of the name is held: each
		// batch commits (or the attempt ends) before the next is fed.
		for n := first + 1; n <= first+2 && a.running(); n++ {
			a.feed(s.through(n))
			eventually(t, "the relay commits or ends", func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				cp, err := h.relay.store.WithStableWait(10*time.Millisecond).Load(ctx, h.cfg.Name)
				return !a.running() || err == nil && cp.GTIDSet == s.set(n)
			})
		}
		close(release)
		if err := <-wrote; err != nil {
			t.Fatal(err)
		}
		a.feed(s.through(first + 3))
		err := a.wait()
		t.Logf("first=%d: relay: %v", first, err)
		if cp := h.load(); cp.GTIDSet != set.GTIDSet {
			t.Errorf("first=%d: checkpoint %q after checkpoint set to %q", first, cp.GTIDSet, set.GTIDSet)
		}
	}
}
