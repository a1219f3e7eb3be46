//go:build integration

package itest

import (
	"context"
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
