package audit

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// A run that fails (here: the source refuses connections) is counted and
// the audit goes on to the next run; canceling its context ends it.
func TestBackgroundAuditCountsAFailedRunAndGoesOn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: every connection is refused
	cfg := config.Default()
	cfg.Name = "bg"
	cfg.Source.Hosts, cfg.Source.User, cfg.Source.ServerID = []string{addr}, "relay", 7
	cfg.Source.Tables = []string{"app.outbox"}
	cfg.Kafka.Brokers = []string{addr}
	cfg.Audit.Interval = time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m := metrics.New("test")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); Background(ctx, cfg, zerolog.Nop(), m) }()
	failed := func() float64 {
		fams, _ := m.Registry.Gather()
		for _, f := range fams {
			if f.GetName() == "outbox_relay_audit_errors_total" {
				return f.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return -1
	}
	for deadline := time.Now().Add(30 * time.Second); failed() < 2; time.Sleep(50 * time.Millisecond) {
		select {
		case <-done:
			t.Fatal("the background audit returned after a failed run")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("outbox_relay_audit_errors_total %v after 30s, want 2 failed runs", failed())
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the background audit did not return within 10s of its context's end")
	}
}
