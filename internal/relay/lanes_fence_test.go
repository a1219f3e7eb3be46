package relay

// Two transaction lanes (kafka.transaction_lanes 2) fenced from outside:
// producers that fence the pipeline's name alone, checkpoint set racing a
// restart or a running relay, and lane 1's commit held while the pipeline
// is disturbed, on the scripted harness (script_test.go). Store.Write
// initialises the name first and the second lane checks the name before
// committing (lanes.go).

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
	"github.com/outbox-relay/outbox-relay/internal/ha"
)

// untilEndedOrMoved waits until the attempt has ended or the committed
// checkpoint is no longer want (which the tests then report). A checkpoint
// held back by an open transaction (the second lane's, flushed and waiting
// for its commit) has not moved yet.
func untilEndedOrMoved(t *testing.T, h *harness, a *attempt, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	moved := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cp, err := h.relay.store.WithStableWait(10*time.Millisecond).Load(ctx, h.cfg.Name)
		if _, held := errors.AsType[*checkpoint.HeldBackError](err); held {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		return cp == nil || cp.GTIDSet != want
	}
	for a.running() && !moved() {
		if time.Now().After(deadline) {
			t.Fatal("the attempt neither ended nor committed within 20s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkpoint set fences both lanes even when a relay attempt starts between
// its fences, so the operator's checkpoint stays. The failure guarded
// against: checkpoint set (Store.Write) fenced the second lane first, then
// opened its own producer under the pipeline's name. A relay attempt that
// starts in between (it was restarting: a back-off, a rejoin) initialises
// both ids after the fence of `<name>#2` and before Write's `<name>`: Write
// then fences only its first lane. The relay commits a batch on lane 1
// before Write's init, Write commits the operator's checkpoint and returns
// success, and the relay's second lane (never fenced) commits the next
// batch after it: the operator's checkpoint is silently replaced by the
// relay's position, and an event is published after `checkpoint set` said
// the relay was fenced.
//
// Write's InitProducerID of `<name>` is held at the broker (a slow network,
// a coordinator lookup) to open the window deterministically.
func TestLanesCheckpointSetRacingRestartFencesBothLanes(t *testing.T) {
	s := newScript("mariadb")
	for range 6 {
		s.tx(s.insert("order", "1", 1))
	}
	h := newHarness(t, s, nil)
	a := h.start()
	a.feed(s.through(2))
	h.waitCheckpoint("at 2", func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == s.set(2) })
	if err := a.term(); err != nil {
		t.Fatal(err)
	}

	// The operator moves the checkpoint back to 1 (publish 2 again).
	set := &checkpoint.Checkpoint{Name: h.cfg.Name, GTIDSet: s.set(1), Flavor: "mariadb", Schema: outboxSchema, Time: time.Now().UTC()}
	held, release, wrote := writeHoldingInit(h, set)
	select {
	case <-held: // Write's init of `<name>` waits
	case <-time.After(10 * time.Second):
		t.Fatal("Write never initialised the pipeline's name")
	}

	// The relay (re)starts now: both ids initialised, checkpoint at 2.
	b := h.start()
	b.feed(s.through(3)) // committed at the head, on lane 1 (`<name>`)
	h.waitCheckpoint("at 3", func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == s.set(3) })

	close(release) // Write goes on: fences lane 1 only, commits the operator's checkpoint
	if err := <-wrote; err != nil {
		t.Fatalf("checkpoint set: %v", err)
	}
	if cp := h.load(); cp.GTIDSet != s.set(1) {
		t.Fatalf("right after checkpoint set: %q, want %q", cp.GTIDSet, s.set(1))
	}
	t.Logf("checkpoint set returned; the checkpoint is %q", s.set(1))

	// The relay reads on. Transaction 4 goes into lane 2 (`<name>#2`).
	b.feed(s.through(4))
	untilEndedOrMoved(t, h, b, set.GTIDSet)
	if b.running() {
		b.feed(s.through(5)) // lane 1: fenced
	}
	if err := b.wait(); !errors.Is(err, ErrFenced) {
		t.Errorf("relay attempt ended with %v, want ErrFenced", err)
	}
	cp := h.load()
	if cp.GTIDSet != set.GTIDSet {
		t.Errorf("after `checkpoint set` returned (which says it fenced the relay), the relay committed again: "+
			"the checkpoint is %q (the relay's position, written under %s), not the operator's %q",
			cp.GTIDSet, checkpoint.TransactionalIDs(h.cfg.Name)[1], set.GTIDSet)
	}
}

// A producer that fences only the pipeline's name also stops the running
// relay's second lane. The failure guarded against: a producer that
// initialises only the pipeline's name and then reads the checkpoint (how
// every instance and `checkpoint set|reset` before this change takes a
// pipeline over: a rolling upgrade or downgrade, an older CLI) fences only
// lane 1. The running relay's lane 2 still commits the next batch after
// that producer has read the checkpoint: the taker-over resumes from the
// older checkpoint and publishes that batch again (duplicates), or the
// older CLI's checkpoint is overwritten.
func TestLanesFenceByNameAloneStopsLane2(t *testing.T) {
	s := newScript("mariadb")
	for range 5 {
		s.tx(s.insert("order", "1", 1))
	}
	h := newHarness(t, s, nil)
	a := h.start()
	a.feed(s.through(2)) // initial checkpoint on lane 1, tx 1 on lane 2, tx 2 on lane 1
	h.waitCheckpoint("at 2", func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == s.set(2) })

	// The other instance: InitProducerID(name), then Load, as Relay.attempt
	// did before the change.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	other, err := kgo.NewClient(append(h.relay.kafka.Admin(), kgo.TransactionalID(h.cfg.Name))...)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, _, err := other.ProducerID(ctx); err != nil {
		t.Fatal(err)
	}
	loaded, err := h.relay.store.Load(ctx, h.cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the other instance fenced %q and loaded %q", h.cfg.Name, loaded.GTIDSet)

	a.feed(s.through(3)) // lane 2
	untilEndedOrMoved(t, h, a, loaded.GTIDSet)
	if a.running() {
		a.feed(s.through(4)) // lane 1: fenced
	}
	if err := a.wait(); !errors.Is(err, ErrFenced) {
		t.Errorf("the relay ended with %v, want ErrFenced", err)
	}
	if cp := h.load(); cp.GTIDSet != loaded.GTIDSet {
		t.Errorf("the fenced relay committed after another instance initialised %q and read the checkpoint %q: now %q "+
			"(the other instance publishes transaction 3 again)", h.cfg.Name, loaded.GTIDSet, cp.GTIDSet)
	}
}

func TestLanesDisturbedWhileLane1CommitHeld(t *testing.T) {
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
			var ls *ha.Lease
			if how == "lease-lost" {
				ls = ha.NewLease(context.Background())
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
				cl, cerr := kgo.NewClient(append(h.relay.kafka.Admin(), kgo.TransactionalID(id))...)
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
				ls.Lose("test")
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
			if how == "lease-lost" && !errors.Is(err, ha.ErrLeaseLost) {
				t.Errorf("lease lost: %v", err)
			}
		})
	}
}

// checkpoint set while a relay runs (not restarting): Write fences lane 2,
// its init of the name is held at the broker while the relay reads on; the
// relay stops (fenced) and commits nothing after Write: the operator's
// checkpoint stays.
func TestLanesCheckpointSetWhileRunningFencesBoth(t *testing.T) {
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
