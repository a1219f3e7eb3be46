//go:build integration

package itest

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// readyzBody is /readyz's status and body; -1 when the instance does not
// answer.
func readyzBody(addr string) (int, string) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return -1, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// A broker outage under a single instance: /readyz and outbox_relay_up say
// Kafka is unreachable and name the brokers, never "standby" (which tells
// on-call another instance is covering); the role is standby (no lease).
// Once the broker is back the instance streams again.
func TestBrokerOutageReadsKafkaUnreachable(t *testing.T) {
	k, _, cfg := env.Pipeline(t)
	if k.Cluster == nil && os.Getenv("RELAY_TEST_KAFKA_CTL") == "" {
		t.Skip("stopping an external broker needs RELAY_TEST_KAFKA_CTL")
	}
	cfg.HTTP.Listen = freeAddr(t)
	p := env.StartProc(t, WriteConfig(t, cfg))
	Eventually(t, time.Minute, func() error {
		if p.Exited() {
			t.Fatalf("relay exited:\n%s", p.Output())
		}
		if code, body := readyzBody(cfg.HTTP.Listen); code != 200 {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		return nil
	})
	k.Stop(t)
	down := time.Now()
	var standby []string
	var unreachable time.Duration
	var body string
	for time.Since(down) < 15*time.Second {
		code, b := readyzBody(cfg.HTTP.Listen)
		st := series(cfg.HTTP.Listen, `outbox_relay_up{state="standby"}`)
		if st == 1 || strings.Contains(b, "standby") {
			standby = append(standby, fmt.Sprintf("%s: %d %q", time.Since(down).Round(time.Millisecond), code, b))
		}
		if unreachable == 0 && code == 503 && series(cfg.HTTP.Listen, `outbox_relay_up{state="kafka_unreachable"}`) == 1 &&
			strings.Contains(b, "kafka unreachable: "+strings.Join(k.Brokers, ",")) {
			unreachable, body = time.Since(down), b
		}
		if p.Exited() {
			t.Fatalf("the relay exited during the outage:\n%s", p.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(standby) > 0 {
		t.Fatalf("during the outage the instance said standby %d times, first %v", len(standby), standby[0])
	}
	if unreachable == 0 {
		code, b := readyzBody(cfg.HTTP.Listen)
		t.Fatalf("no kafka_unreachable state in 15s of outage; /readyz %d %q", code, b)
	}
	if r := series(cfg.HTTP.Listen, `outbox_relay_role{role="standby"}`); r != 1 {
		t.Fatalf("role standby %v during the outage, want 1 (no lease)", r)
	}
	t.Logf("kafka_unreachable %s after the broker stopped: /readyz %q", unreachable.Round(time.Millisecond), body)
	k.Start(t)
	Eventually(t, 2*time.Minute, func() error {
		if code, b := readyzBody(cfg.HTTP.Listen); code != 200 {
			return fmt.Errorf("/readyz %d %q", code, b)
		}
		return nil
	})
}
