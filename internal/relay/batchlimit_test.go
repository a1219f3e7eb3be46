package relay

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/outbox-relay/outbox-relay/internal/config"
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
	l := &loop{r: r, sink: &sink{sinkOptions: sinkOptions{timeout: 30 * time.Second}}}
	l.setLimit(r.batchLimit(), t0)
	if l.sink.maxUnacked != 10000 {
		t.Fatalf("at-least-once bound %d, want twice the batch bound", l.sink.maxUnacked)
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
		if st.slowAt > 0 {
			l.tookCommit(10 * time.Second) // a quarter of the timeout or more
			l.lastSlow = t0.Add(st.slowAt)
		}
		if st.aloSlowAt > 0 {
			l.sink.lastSlow = t0.Add(st.aloSlowAt)
		}
		l.recoverLimit(t0.Add(st.at))
		if l.maxRecords != st.want {
			t.Fatalf("at %s: bound %d, want %d", st.at, l.maxRecords, st.want)
		}
	}
	if r.batchLimit() != 20000 || l.sink.maxUnacked != 40000 {
		t.Fatalf("after recovery: relay bound %d, at-least-once bound %d", r.batchLimit(), l.sink.maxUnacked)
	}
}

func TestTookCommitMarksSlowCommits(t *testing.T) {
	l := &loop{sink: &sink{sinkOptions: sinkOptions{timeout: 40 * time.Second}}}
	l.tookCommit(9 * time.Second)
	if !l.lastSlow.IsZero() {
		t.Fatal("a commit under a quarter of the timeout counted as slow")
	}
	l.tookCommit(10 * time.Second)
	if l.lastSlow.IsZero() {
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
