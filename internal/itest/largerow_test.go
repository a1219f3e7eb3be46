//go:build integration

package itest

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// One outbox row of LARGE_ROW_MB (60) MB, larger than any topic takes (the
// server's max_allowed_packet allows it): a bad row, which
// router.on_error: dead-letter sends on by its event id and error, without
// its body, and the relay goes on. The relay's peak RSS is logged and held
// under the shipped Kubernetes limit (256 MiB) with a quarter to spare.
func TestLargeRowIsABadRowWithinTheMemoryLimit(t *testing.T) {
	mb := 60
	if v, err := strconv.Atoi(os.Getenv("LARGE_ROW_MB")); err == nil {
		mb = v
	}
	db := startServer(t, map[string]string{"max-allowed-packet": "128M"})
	k := StartKafka(t)
	cfg := env.RelayConfig(k, "app.outbox")
	cfg.Source.Hosts = []string{db.Addr}
	cfg.Router.OnError = config.OnErrorDeadLetter
	cfg.Router.DeadLetterTopic = cfg.Router.TopicPrefix + "dead-letter"
	cfg.Log.Level = "info"
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	if err := db.Exec(fmt.Sprintf("INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) "+
		"VALUES ('big', 'alarm', 'd', 'X', CONCAT(_latin1'\"', REPEAT(_latin1'x', %d), _latin1'\"'))", mb<<20),
		"INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('after', 'alarm', 'd', 'X', '{}')"); err != nil {
		t.Fatal(err)
	}
	head := Head(t, db)
	var peak int64
	for deadline := time.Now().Add(3 * time.Minute); ; {
		if p.Exited() {
			t.Fatalf("relay exited: %s", tailLines(p.Output(), 20))
		}
		if v := vmHWM(p.cmd.Process.Pid); v > peak {
			peak = v
		}
		if cp := loadCheckpoint(t, cfg); cp != nil && Covers(cp, head) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint never covered %s: %s", head, tailLines(p.Output(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v := vmHWM(p.cmd.Process.Pid); v > peak {
		peak = v
	}
	var dead, after int
	for _, r := range Consume(t, k.Brokers, cfg.Router.TopicPrefix) {
		switch {
		case r.Topic == cfg.Router.DeadLetterTopic && r.Key == "big":
			dead++
			if len(r.Value) > 1<<20 || r.Headers["error"] == "" {
				t.Fatalf("dead-letter record of %d bytes, error %q: want the id and the error, not the body", len(r.Value), r.Headers["error"])
			}
		case r.ID == "after":
			after++
		}
	}
	if dead != 1 || after != 1 {
		t.Fatalf("%d dead-letter records of the large row, %d of the row after it; want 1 and 1", dead, after)
	}
	t.Logf("a %d MB row: peak RSS %d MB", mb, peak>>20)
	if limit := int64(256 << 20); peak > limit*3/4 {
		t.Errorf("peak RSS %d MB for a %d MB row, over three quarters of the Kubernetes limit of %d MB", peak>>20, mb, limit>>20)
	}
}

// The packet bound derived from the server's max_allowed_packet (no
// source.max_packet_bytes) follows the server when a DBA raises
// max_allowed_packet while the relay runs (SET GLOBAL, the everyday fix
// for an application's "packet too big"): a larger event the server then
// logs, here in a table the relay does not capture, is read again with the
// new bound, not a configuration stop (exit 78, which a restart policy
// leaves down although a restart alone would read it).
func TestPacketBoundFollowsMaxAllowedPacketRaisedWhileRunning(t *testing.T) {
	db := startServer(t, map[string]string{"max-allowed-packet": "1M"})
	k := StartKafka(t)
	cfg := env.RelayConfig(k, "app.outbox")
	cfg.Source.Hosts = []string{db.Addr}
	p := RunRelay(t, cfg)
	p.WaitReady(t)
	if err := db.Exec("SET GLOBAL max_allowed_packet = 16777216", "CREATE TABLE app.files (b LONGBLOB)"); err != nil {
		t.Fatal(err)
	}
	// A new session has the new max_allowed_packet: a 4 MiB row, over the
	// bound of the relay's connection (twice 1 MiB plus 1 MiB).
	if err := db.Exec("INSERT INTO app.files VALUES (REPEAT('x', 4194304))",
		"INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('after', 'alarm', 'd', 'X', '{}')"); err != nil {
		t.Fatal(err)
	}
	head := Head(t, db)
	Eventually(t, 2*time.Minute, func() error {
		select {
		case <-p.Done():
			t.Fatalf("relay stopped: %v (exit %d)", p.Err(), relay.ExitCode(p.Err()))
		default:
		}
		if cp := loadCheckpoint(t, cfg); cp == nil || !Covers(cp, head) {
			return fmt.Errorf("checkpoint does not cover %s yet", head)
		}
		return nil
	})
	after := 0
	for _, r := range Consume(t, k.Brokers, cfg.Router.TopicPrefix) {
		if r.ID == "after" {
			after++
		}
	}
	if after != 1 {
		t.Fatalf("%d records of the row after the large one; want 1", after)
	}
}
