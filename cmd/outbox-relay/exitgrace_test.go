package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// A run that ends with an error keeps /metrics up for http.exit_grace with
// the stopped state and its exit code, so that a scrape sees why it
// stopped; then it exits.
func TestExitGraceShowsTheStop(t *testing.T) {
	kc := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.BrokerConfigs(map[string]string{"group.min.session.timeout.ms": "1000"}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dead, err := net.Listen("tcp", "127.0.0.1:0") // a port nothing answers on once closed
	if err != nil {
		t.Fatal(err)
	}
	source := dead.Addr().String()
	dead.Close()
	cfg := fmt.Sprintf(`name: grace
source:
  hosts: [%q]
  user: relay
  password: x
  server_id: 7
  tables: [app.outbox]
  connect_timeout: 1s
kafka:
  brokers: [%q]
ha: {session_timeout: 3s, heartbeat_interval: 500ms}
http:
  listen: %s
  exit_grace: 3s
log: {level: error}
`, source, kc.ListenAddrs()[0], addr)
	path := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- runRelay(io.Discard, path, false, "", "") }()
	var seen, exited time.Time
	var stopErr error
	for end := time.Now().Add(time.Minute); time.Now().Before(end) && exited.IsZero(); time.Sleep(100 * time.Millisecond) {
		select {
		case stopErr = <-done:
			exited = time.Now()
			continue
		default:
		}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if seen.IsZero() && strings.Contains(string(body), "\noutbox_relay_exit_code 75\n") &&
			strings.Contains(string(body), "\noutbox_relay_up{state=\"stopped\"} 1\n") {
			seen = time.Now()
		}
	}
	if exited.IsZero() {
		t.Fatal("run did not exit within a minute")
	}
	if code := relay.ExitCode(stopErr); code != relay.ExitTransient || stopErr == nil || errors.Is(stopErr, os.ErrNotExist) {
		t.Fatalf("run ended with %v (exit %d), want an unreachable source at the first start (75)", stopErr, code)
	}
	if seen.IsZero() {
		t.Fatal("no scrape saw outbox_relay_exit_code 75 with state stopped before the exit")
	}
	if d := exited.Sub(seen); d < 2*time.Second {
		t.Fatalf("exited %s after the stop was first scraped, want about http.exit_grace (3s)", d)
	}
}
