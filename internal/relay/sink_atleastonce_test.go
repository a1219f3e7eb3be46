package relay

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// At-least-once: a checkpoint is written only once every record before it
// is acknowledged, and then the newest such checkpoint.
func TestAtLeastOnceCheckpointFollowsAcknowledgements(t *testing.T) {
	ctx := context.Background()
	a := newTestSink(t, aloOptions)
	a.pin(t, "0-1-1")

	release := a.hold()
	for i := range 3 {
		if err := a.produce(ctx, outRecord{Record: &kgo.Record{Topic: "data", Key: []byte{byte(i)}, Value: []byte("v")}}); err != nil {
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
	if err := a.produce(ctx, outRecord{Record: &kgo.Record{Topic: "data", Value: big}}); err != nil {
		t.Fatal(err)
	}
	if err := a.produce(ctx, outRecord{Record: &kgo.Record{Topic: "data", Value: []byte("ok")}}); err != nil {
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
		if err := a.produce(ctx, outRecord{Record: &kgo.Record{Topic: "data", Value: []byte{byte(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- a.produce(ctx, outRecord{Record: &kgo.Record{Topic: "data", Value: []byte("third")}}) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "wait for acknowledgements") {
			t.Fatalf("third record with two unacknowledged (bound 2): %v, want a timeout waiting for acknowledgements", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("produce blocked beyond its timeout")
	}
}

// finish writes the checkpoint of every ended batch while the delivery's
// goroutine drains beside it: that goroutine's drain may take the batches
// acknowledged when it began and produce their checkpoint record after
// finish's Flush has returned, so that finish's own drain finds a record
// in flight and leaves the batches acknowledged since. finish waits for
// that record and drains them; it never reports acknowledged batches as
// not acknowledged (which failed a clean stop, and turned a bad row's stop
// into an error to be reached again). Rounds of three one-record batches,
// each round ended by finish.
func TestAtLeastOnceFinishBesideDrain(t *testing.T) {
	ctx := context.Background()
	a := newTestSink(t, aloOptions)
	a.pin(t, "0-1-1")
	stop := make(chan struct{})
	defer close(stop)
	go func() { // the pipeline reads the committed stream throughout
		for {
			select {
			case <-a.d.committed():
			case <-stop:
				return
			}
		}
	}()
	n := 1
	for round := range 300 {
		for b := range 3 {
			if err := a.produce(ctx, outRecord{Record: &kgo.Record{Topic: "data", Key: []byte{byte(b)}, Value: []byte("v")}}); err != nil {
				t.Fatal(err)
			}
			n++
			if _, err := a.commit(ctx, cpAt("0-1-"+itoa(n))); err != nil {
				t.Fatal(err)
			}
		}
		cp, err := a.finish(ctx)
		if err != nil {
			t.Fatalf("round %d: finish: %v", round+1, err)
		}
		if want := "0-1-" + itoa(n); cp == nil || cp.GTIDSet != want {
			t.Fatalf("round %d: finish wrote %v, want %s", round+1, cp, want)
		}
	}
	if got := a.stored(t); got != "0-1-"+itoa(n) {
		t.Fatalf("stored %q, want 0-1-%d", got, n)
	}
}
