package ha

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// Lose ends the lease once: Lost is closed, Err says the first reason, the
// term's context is canceled (the attempt ends with the loss as its
// cause; nothing is called into).
func TestLeaseLoseEndsItOnce(t *testing.T) {
	l := NewLease(context.Background())
	if l.Err() != nil {
		t.Fatal("a fresh lease is lost")
	}
	l.Lose("test")
	l.Lose("again")
	select {
	case <-l.Lost():
	default:
		t.Fatal("Lost is not closed")
	}
	if err := l.Err(); !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "test") || strings.Contains(err.Error(), "again") || l.Context().Err() == nil {
		t.Fatalf("err %v, ctx %v", err, l.Context().Err())
	}
	var none *Lease
	if none.Err() != nil || none.Lost() != nil {
		t.Fatal("no lease must mean never lost")
	}
}

// A group session lost after the coordinator stopped answering (a broker
// outage) reads kafka_unreachable at once, never standby, which says
// another instance covers; lost while the coordinator answers (it ended
// the session itself), it reads standby.
func TestGroupSessionLostToASilentCoordinatorReadsKafkaUnreachable(t *testing.T) {
	for _, tc := range []struct {
		silent time.Duration
		want   metrics.State
	}{{3 * time.Second, metrics.StateKafkaUnreachable}, {100 * time.Millisecond, metrics.StateStandby}} {
		m := metrics.New("test")
		e := &Elector{c: Config{Metrics: m}, id: memberID{topic: "lock"}, times: sessionTimes{heartbeat: time.Second}}
		now := time.Now()
		e.lastOK.Store(now.Add(-tc.silent).UnixNano())
		m.LeaseUntil(now.Add(-tc.silent + 4*time.Second)) // the guard has not passed
		l := NewLease(context.Background())
		l.metrics = m
		e.cur, e.own = l, true
		m.SetState(metrics.StateStreaming)
		e.onLost(context.Background(), nil, map[string][]int32{"lock": {0}})
		if !errors.Is(l.Err(), ErrLeaseLost) {
			t.Fatalf("silent %v: the lease is not lost: %v", tc.silent, l.Err())
		}
		if got := m.State(); got != tc.want {
			t.Errorf("coordinator silent for %v when the session was lost: state %s, want %s", tc.silent, got, tc.want)
		}
	}
}
