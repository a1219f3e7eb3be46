package relay

// Adversarial review of two transaction lanes (kafka.transaction_lanes 2):
// producers that fence the pipeline's name alone, on the scripted harness
// (script_test.go). Both failed before Store.Write initialised the name
// first and before the second lane checked the name before committing
// (lanes.go).

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/checkpoint"
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

// checkpoint set (Store.Write) fenced the second lane first, then opened its
// own producer under the pipeline's name. A relay attempt that starts in
// between (it was restarting: a back-off, a rejoin) initialises both ids
// after the fence of `<name>#2` and before Write's `<name>`: Write then fences
// only its first lane. The relay commits a batch on lane 1 before Write's
// init, Write commits the operator's checkpoint and returns success, and the
// relay's second lane (never fenced) commits the next batch after it: the
// operator's checkpoint is silently replaced by the relay's position, and an
// event is published after `checkpoint set` said the relay was fenced.
//
// Write's InitProducerID of `<name>` is held at the broker (a slow network,
// a coordinator lookup) to open the window deterministically.
func TestAttackLanesCheckpointSetRacesRestart(t *testing.T) {
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

// A producer that initialises only the pipeline's name and then reads the
// checkpoint (how every instance and `checkpoint set|reset` before this
// change takes a pipeline over: a rolling upgrade or downgrade, an older
// CLI) fences only lane 1. The running relay's lane 2 still commits the
// next batch after that producer has read the checkpoint: the taker-over
// resumes from the older checkpoint and publishes that batch again
// (duplicates), or the older CLI's checkpoint is overwritten.
func TestAttackLanesFenceByNameAloneLetsLane2Commit(t *testing.T) {
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
	other, err := kgo.NewClient(append(h.relay.kopts, kgo.TransactionalID(h.cfg.Name))...)
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

// writeHoldingInit starts a checkpoint write of set (Store.Write, two
// lanes) with its InitProducerID of the pipeline's name held at the broker:
// held receives once that request arrives, closing release lets it go on,
// and wrote receives Write's result.
func writeHoldingInit(h *harness, set *checkpoint.Checkpoint) (held <-chan struct{}, release chan struct{}, wrote <-chan error) {
	var armed atomic.Bool
	arrived := make(chan struct{}, 1)
	release = make(chan struct{})
	h.kafka.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.kafka.KeepControl()
		r := req.(*kmsg.InitProducerIDRequest)
		if r.TransactionalID != nil && *r.TransactionalID == h.cfg.Name && armed.CompareAndSwap(true, false) {
			arrived <- struct{}{}
			h.kafka.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	armed.Store(true)
	result := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		result <- h.relay.store.Write(ctx, h.cfg.Name, 2, set)
	}()
	return arrived, release, result
}
