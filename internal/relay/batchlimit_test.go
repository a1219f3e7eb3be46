package relay

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
)

func TestBatchLimitHalvesOnAckTimeoutAndRecovers(t *testing.T) {
	cfg := config.Default()
	cfg.Kafka.Batch.MaxRecords = 20000
	r := &Relay{cfg: cfg, log: zerolog.Nop()}
	if got := r.batchLimit(); got != 20000 {
		t.Fatalf("initial bound %d, want max_records", got)
	}
	r.ackTimedOut(errors.New("source stream ended"), 20000)
	if got := r.batchLimit(); got != 20000 {
		t.Fatalf("bound %d after an unrelated error", got)
	}
	timedOut := fmt.Errorf("flush batch: %w", ackTimeout(context.DeadlineExceeded))
	r.ackTimedOut(timedOut, 20000)
	r.ackTimedOut(timedOut, r.batchLimit())
	if got := r.batchLimit(); got != 5000 {
		t.Fatalf("bound %d after two time-outs, want 5000", got)
	}

	t0 := time.Now()
	r.cfg.Kafka.RequestTimeout = 30 * time.Second
	d := &boundDelivery{fakeDelivery: &fakeDelivery{}}
	l := &loop{r: r, d: d, topics: fakeTopics(), srv: &binlog.Server{}, asm: &assembler{}, pos: position{str: "0-1-1"},
		batch: newBatchPolicy(r.cfg.Kafka, r.batchLimit(), func() time.Time { return t0 })}
	if err := l.startCommit(context.Background()); err != nil || d.bound != 10000 {
		t.Fatalf("at-least-once bound %d (%v), want twice the batch bound", d.bound, err)
	}
	steps := []struct {
		at        time.Duration
		slowAt    time.Duration // a commit this slow at this time (0: none)
		aloSlowAt time.Duration
		want      int
	}{
		{at: 30 * time.Second, want: 5000},                                 // not a minute yet
		{at: 50 * time.Second, slowAt: 40 * time.Second, want: 5000},       // a slow commit restarts the minute
		{at: 99 * time.Second, want: 5000},                                 // 59 s after it
		{at: 101 * time.Second, want: 10000},                               // a fast minute: doubled
		{at: 150 * time.Second, aloSlowAt: 140 * time.Second, want: 10000}, // a slow wait for acknowledgements counts too
		{at: 201 * time.Second, want: 20000},
		{at: 400 * time.Second, want: 20000}, // never above max_records
	}
	for _, st := range steps {
		// The committed stream says when a wait on Kafka was slow: a
		// commit (exactly-once), a wait for acknowledgements (at least once).
		if st.slowAt > 0 {
			_ = l.committed(committed{slow: slowSince(10*time.Second, 30*time.Second, t0.Add(st.slowAt))})
		}
		if st.aloSlowAt > 0 {
			_ = l.committed(committed{slow: t0.Add(st.aloSlowAt)})
		}
		if err := l.onTick(context.Background(), t0.Add(st.at)); err != nil {
			t.Fatal(err)
		}
		if l.batch.limit.max != st.want {
			t.Fatalf("at %s: bound %d, want %d", st.at, l.batch.limit.max, st.want)
		}
	}
	if err := l.startCommit(context.Background()); r.batchLimit() != 20000 || err != nil || d.bound != 40000 {
		t.Fatalf("after recovery: relay bound %d, at-least-once bound %d (%v)", r.batchLimit(), d.bound, err)
	}
}

// boundDelivery notes the bound the loop hands it.
type boundDelivery struct {
	*fakeDelivery
	bound int
}

func (d *boundDelivery) send(ctx context.Context, b part) (bool, error) {
	d.bound = b.bound
	return d.fakeDelivery.send(ctx, b)
}

func TestSlowSinceMarksSlowCommits(t *testing.T) {
	now := time.Now()
	if !slowSince(9*time.Second, 40*time.Second, now).IsZero() {
		t.Fatal("a commit under a quarter of the timeout counted as slow")
	}
	if slowSince(10*time.Second, 40*time.Second, now).IsZero() {
		t.Fatal("a commit of a quarter of the timeout not counted as slow")
	}
}

func TestSettleVerdict(t *testing.T) {
	live := context.Background()
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want settleAnswer
	}{
		{"not allowed", live, kerr.TransactionalIDAuthorizationFailed, settleNever},
		{"cluster not allowed", live, fmt.Errorf("describe: %w", kerr.ClusterAuthorizationFailed), settleNever},
		{"unsupported", live, kerr.UnsupportedVersion, settleNever},
		{"server error", live, kerr.UnknownServerError, settleFailed},
		{"coordinator moved", live, kerr.NotCoordinator, settleFailed},
		{"connection refused", live, errors.New("dial tcp 127.0.0.1:9092: connect: connection refused"), settleFailed},
		{"out of time", expired, context.DeadlineExceeded, settleFailed},
	} {
		if got := settleVerdict(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// Batches bound by kafka.batch.max_bytes (large payloads: 20,000 rows of
// 50 KB never make a 20,000-record batch, 8 MB holds 160 of them) on a
// broker too slow for one such batch per request_timeout. ackTimedOut
// halves the batch that timed out (its record count), not the records
// bound (l.maxRecords, 20,000): halving the bound above the bytes-bound
// count would change nothing and need log2(20,000/160) = 7 failed
// attempts, each a request_timeout and a resent full batch, before one
// commit goes through (here: ~170 records per 3,000-byte batch). The
// relay must get through within 5 attempts.
func TestBatchLimitHalvesBytesBoundBatches(t *testing.T) {
	realTime(t)
	s := newScript("mariadb")
	for i := 0; i < 40; i++ {
		s.tx(s.insert("order", strconv.Itoa(i%6), 50))
	}
	h := newHarness(t, s, func(c *config.Config) {
		c.Kafka.RequestTimeout = time.Second
		c.Kafka.Batch.MaxBytes = 3000 // key+value ~17 bytes a record: ~170 records a batch
	})
	h.batch = 0
	throttleProduce(h, 2500)
	var last error
	for i := 0; i < 5; i++ {
		a := h.start()
		a.feedAll()
		if last = a.term(); last == nil {
			break
		}
		cp := h.load()
		t.Logf("attempt %d: bound then %d, checkpoint events %d: %v", i+1, h.relay.batchLimit(), cp.Events, last)
	}
	if last != nil {
		t.Fatalf("five attempts failed on the same bytes-bound batch; the records bound was halved to %d, which no batch reaches", h.relay.batchLimit())
	}
	h.verify()
}
