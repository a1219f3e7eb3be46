package relay

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// testSink is a sink on an embedded broker whose produce responses can be
// held back: hold() stops acknowledgements until the returned function
// releases them. Exactly-once (opts.txn) its transactional id is "t".
type testSink struct {
	*sink
	store *checkpoint.Store
	hold  func() (release func())
}

func newTestSink(t *testing.T, opts sinkOptions) testSink {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "data"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var mu sync.Mutex
	var gate chan struct{} // nil: acknowledge at once
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		mu.Lock()
		g := gate
		mu.Unlock()
		if g != nil {
			c.SleepControl(func() { <-g })
		}
		return nil, nil, false // the broker handles it as usual
	})
	copts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0)}
	if opts.txn {
		copts = append(copts, kgo.TransactionalID("t"))
	}
	cl, err := kgo.NewClient(copts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	store := checkpoint.NewStore("cp", kgo.SeedBrokers(c.ListenAddrs()...))
	if err := store.EnsureTopic(context.Background(), kadm.NewClient(cl), 1); err != nil {
		t.Fatal(err)
	}
	s := newSink(context.Background(), cl, store, opts)
	return testSink{sink: s, store: store, hold: func() func() {
		g := make(chan struct{})
		mu.Lock()
		gate = g
		mu.Unlock()
		return func() {
			mu.Lock()
			gate = nil
			mu.Unlock()
			close(g)
		}
	}}
}

var aloOptions = sinkOptions{timeout: 10 * time.Second, parts: 3, repl: 1, maxUnacked: 1000}

func cpAt(gtids string) *checkpoint.Checkpoint {
	return &checkpoint.Checkpoint{Name: "t", GTIDSet: gtids, Flavor: "mariadb", Time: time.Now().UTC()}
}

func (a testSink) stored(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cp, err := a.store.Load(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if cp == nil {
		return ""
	}
	return cp.GTIDSet
}

// pin writes a first checkpoint at gtids and waits until it is stored.
func (a testSink) pin(t *testing.T, gtids string) {
	t.Helper()
	ctx := context.Background()
	if _, err := a.commit(ctx, cpAt(gtids)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.finish(ctx); err != nil {
		t.Fatal(err)
	}
	if got := a.stored(t); got != gtids {
		t.Fatalf("first checkpoint: stored %q, want %q", got, gtids)
	}
}

// waitDrain waits for the sink's wake-ups until drain writes a checkpoint.
func (a testSink) waitDrain(t *testing.T) (*checkpoint.Checkpoint, error) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-a.acked:
			if cp, err := a.drain(); cp != nil || err != nil {
				return cp, err
			}
		case <-deadline:
			t.Fatal("no checkpoint written after the acknowledgements")
		}
	}
}

// At-least-once: a checkpoint is written only once every record before it
// is acknowledged, and then the newest such checkpoint.
func TestAtLeastOnceCheckpointFollowsAcknowledgements(t *testing.T) {
	ctx := context.Background()
	a := newTestSink(t, aloOptions)
	a.pin(t, "0-1-1")

	release := a.hold()
	for i := range 3 {
		if err := a.produce(ctx, &kgo.Record{Topic: "data", Key: []byte{byte(i)}, Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	if cp, err := a.commit(ctx, cpAt("0-1-2")); cp != nil || err != nil {
		t.Fatalf("checkpoint of an unacknowledged batch written: %v, %v", cp, err)
	}
	// A heartbeat after it waits for it too.
	if cp, err := a.commit(ctx, cpAt("0-1-3")); cp != nil || err != nil {
		t.Fatalf("heartbeat checkpoint written before the batch before it: %v, %v", cp, err)
	}
	if cp, err := a.drain(); cp != nil || err != nil {
		t.Fatalf("drain wrote %v, %v while records are unacknowledged", cp, err)
	}
	release()
	cp, err := a.waitDrain(t)
	if err != nil {
		t.Fatal(err)
	}
	if cp.GTIDSet != "0-1-3" {
		t.Fatalf("drain wrote %s, want the newest complete batch 0-1-3", cp.GTIDSet)
	}
	if _, err := a.finish(ctx); err != nil {
		t.Fatal(err)
	}
	if got := a.stored(t); got != "0-1-3" {
		t.Fatalf("stored %q, want 0-1-3", got)
	}
}

// A record that fails keeps its batch's checkpoint, and every later one,
// out of the topic: the relay resumes before it.
func TestAtLeastOnceFailedRecordWritesNoCheckpoint(t *testing.T) {
	ctx := context.Background()
	a := newTestSink(t, aloOptions)
	a.pin(t, "0-1-1")
	// Larger than any record batch the client sends: refused before it leaves.
	big := bytes.Repeat([]byte("x"), 2<<20)
	if err := a.produce(ctx, &kgo.Record{Topic: "data", Value: big}); err != nil {
		t.Fatal(err)
	}
	if err := a.produce(ctx, &kgo.Record{Topic: "data", Value: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	_, err := a.commit(ctx, cpAt("0-1-2"))
	if err == nil {
		_, err = a.finish(ctx)
	}
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("a refused record ended the batch with %v, want ErrRejected", err)
	}
	if got := a.stored(t); got != "0-1-1" {
		t.Fatalf("stored %q after a failed batch, want 0-1-1", got)
	}
}

// Far ahead of the acknowledgements, produce waits for them for a bounded
// time and then fails, instead of blocking on a full client buffer.
func TestAtLeastOnceBoundsUnacknowledgedRecords(t *testing.T) {
	ctx := context.Background()
	opts := aloOptions
	opts.maxUnacked, opts.timeout = 2, 300*time.Millisecond
	a := newTestSink(t, opts)
	release := a.hold()
	defer release()
	for i := range 2 {
		if err := a.produce(ctx, &kgo.Record{Topic: "data", Value: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- a.produce(ctx, &kgo.Record{Topic: "data", Value: []byte("third")}) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "wait for acknowledgements") {
			t.Fatalf("third record with two unacknowledged (bound 2): %v, want a timeout waiting for acknowledgements", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("produce blocked beyond its timeout")
	}
}

// Exactly-once, the sink knows where its last checkpoint record is and waits
// until read_committed readers see it: behind another producer's open
// transaction it reports ErrNotVisible, and returns once that one ends.
func TestExactlyOnceAwaitsVisibleCheckpoint(t *testing.T) {
	ctx := context.Background()
	opts := aloOptions
	opts.txn = true
	a := newTestSink(t, opts)
	other, err := kgo.NewClient(kgo.SeedBrokers(a.cl.OptValue(kgo.SeedBrokers).([]string)...), kgo.TransactionalID("other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := other.ProduceSync(ctx, a.store.Record(&checkpoint.Checkpoint{Name: "other", GTIDSet: "0-1-1", Flavor: "mariadb"})).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := a.produce(ctx, &kgo.Record{Topic: "data", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.commit(ctx, cpAt("0-1-2")); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := a.awaitVisible(short); !errors.Is(err, checkpoint.ErrNotVisible) {
		t.Fatalf("checkpoint behind an open transaction: %v, want ErrNotVisible", err)
	}
	if err := other.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	wait, cancel2 := context.WithTimeout(ctx, 10*time.Second)
	defer cancel2()
	if err := a.awaitVisible(wait); err != nil {
		t.Fatal(err)
	}
	if got := a.stored(t); got != "0-1-2" {
		t.Fatalf("stored %q, want 0-1-2", got)
	}
}
