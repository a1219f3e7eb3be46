//go:build integration

package itest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// SIGTERM while rows stream, in both deliveries, several times in a row: each
// stop exits 0 after writing its final checkpoint, leaves no Kafka
// transaction open (every partition's last stable offset equals its high
// watermark right after the exit, so read_committed consumers are never held
// up), and the restarts together publish every row exactly once (at least
// once for at-least-once).
func TestSIGTERMWhileStreaming(t *testing.T) {
	for _, delivery := range []string{"exactly-once", "at-least-once"} {
		t.Run(delivery, func(t *testing.T) {
			k, s, cfg := env.Pipeline(t)
			cfg.Kafka.Delivery = config.Delivery(delivery)
			cfg.Kafka.Batch.MaxRecords = 50
			cfg.Log.Level = "info"
			path := WriteConfig(t, cfg)
			// The first start pins "now": writers begin after it.
			first := env.StartProc(t, path)
			waitStarted(t, first, cfg)
			wrote := make(chan error, 1)
			go func() {
				_, err := s.Write(context.Background(), WriteOptions{Writers: 3, Transactions: 700, Devices: 10,
					Pace: 300 * time.Microsecond})
				wrote <- err
			}()
			var writeErr error
			writing := true
			for stop := 0; stop < 4; stop++ {
				p := first
				if stop > 0 {
					p = env.StartProc(t, path)
					waitStarted(t, p, cfg)
				}
				base := relayEvents(t, cfg)
				// Let it stream a little: its checkpoint must move at least once.
				Eventually(t, time.Minute, func() error {
					if n := relayEvents(t, cfg); writing && n <= base {
						return fmt.Errorf("no progress yet (%d events)", n)
					}
					return nil
				})
				code, err := p.Terminate(time.Minute)
				if err != nil || code != 0 {
					t.Fatalf("stop %d: exit %d (%v):\n%s", stop, code, err, p.Output())
				}
				if !strings.Contains(p.Output(), "final checkpoint written") {
					t.Fatalf("stop %d: no final checkpoint:\n%s", stop, p.Output())
				}
				requireNoOpenTransaction(t, k.Brokers, cfg.Kafka.CheckpointTopic, cfg.Router.TopicPrefix)
				select {
				case writeErr = <-wrote:
					writing = false
				default:
				}
			}
			if writing {
				writeErr = <-wrote
			}
			if writeErr != nil {
				t.Fatal(writeErr)
			}
			env.StartProc(t, path)
			WaitCheckpoint(t, cfg, Head(t, env.DB), 2*time.Minute)
			if delivery == "exactly-once" {
				requireExact(t, k, s, cfg.Router.TopicPrefix)
			} else {
				requireAtLeastOnce(t, k, s, cfg.Router.TopicPrefix)
			}
		})
	}
}

// relayEvents is the visible checkpoint's event count (0 without one).
func relayEvents(t *testing.T, cfg config.Config) int64 {
	t.Helper()
	if cp := loadCheckpoint(t, cfg); cp != nil {
		return cp.Events
	}
	return 0
}

// requireNoOpenTransaction fails unless, on the checkpoint topic and every
// topic with prefix, the last stable offset equals the high watermark: no
// transaction is open. A broker answers a commit before it writes the
// markers: they get a moment to land, far less than a transaction timeout.
func requireNoOpenTransaction(t *testing.T, brokers []string, checkpointTopic, prefix string) {
	t.Helper()
	Eventually(t, 5*time.Second, func() error {
		if open := OpenTransactions(t, brokers, prefix, checkpointTopic); len(open) > 0 {
			return fmt.Errorf("transactions left open: %v", open)
		}
		return nil
	})
}

// sigtermStops is how many times TestSIGTERMLogsNothingAboveInfo stops the
// relay: go-mysql logged its read error at one stop in four.
const sigtermStops = 12

// A clean stop logs nothing above info: SIGTERM to a relay streaming rows,
// many times over, and no line logged from the signal on is a warning or an
// error (go-mysql
// logged the read error of the replication connection the relay closed
// itself, "io.ReadFull(header) failed ... context canceled", at error, and a
// warning after it, at one stop in four: log-based alerts fired on a clean
// stop). The last line of each stop is `relay stopped` with exit_code 0, as
// README "Exit codes" says.
func TestSIGTERMLogsNothingAboveInfo(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	cfg.Log.Level = "debug" // the libraries' demoted lines are seen too
	path := WriteConfig(t, cfg)
	ctx, stopWriting := context.WithCancel(context.Background())
	defer stopWriting()
	wrote := make(chan error, 1)
	started := false
	for stop := 0; stop < sigtermStops; stop++ {
		p := env.StartProc(t, path)
		waitStarted(t, p, cfg)
		if !started {
			started = true
			go func() {
				_, err := s.Write(ctx, WriteOptions{Writers: 2, Transactions: 1000000, Pace: time.Millisecond})
				wrote <- err
			}()
		}
		base := relayEvents(t, cfg)
		Eventually(t, time.Minute, func() error {
			if n := relayEvents(t, cfg); n <= base {
				return fmt.Errorf("no progress yet (%d events)", n)
			}
			return nil
		})
		before := p.Output()
		before = before[:strings.LastIndexByte(before, '\n')+1] // the lines logged before the signal
		code, err := p.Terminate(time.Minute)
		if err != nil || code != 0 {
			t.Fatalf("stop %d: exit %d (%v):\n%s", stop, code, err, lastLines(p.Output(), 30))
		}
		var last map[string]any
		for _, line := range strings.Split(strings.TrimSpace(strings.TrimPrefix(p.Output(), before)), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("stop %d: a line that is not JSON: %q", stop, line)
			}
			if lvl := rec["level"]; lvl != "debug" && lvl != "info" && lvl != "trace" {
				t.Fatalf("stop %d: a %s line at a clean stop: %s", stop, lvl, line)
			}
			last = rec
		}
		if last["message"] != "relay stopped" || last["exit_code"] != float64(0) {
			t.Fatalf("stop %d: the last line is %v, want relay stopped with exit_code 0", stop, last)
		}
	}
	stopWriting()
	if err := <-wrote; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
}
