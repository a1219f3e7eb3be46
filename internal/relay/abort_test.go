package relay

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

// deadlineDelivery is a delivery with an open batch whose abort notes how
// long it was given.
type deadlineDelivery struct {
	*fakeDelivery
	gave time.Duration
}

func (d *deadlineDelivery) stop(ctx context.Context, clean bool) (*checkpoint.Checkpoint, error) {
	if dl, ok := ctx.Deadline(); ok && !clean {
		d.gave = time.Until(dl)
	}
	return nil, nil
}

// A failed attempt's abort of its open transaction gets
// kafka.request_timeout; a stopping relay's gets stopAbortTimeout at most,
// so that a broker that does not answer cannot hold a SIGTERM past the
// service manager's stop timeout (the last flush has waited
// kafka.request_timeout already).
func TestAbortOfOpenTransactionIsBoundedWhenStopping(t *testing.T) {
	cfg := config.Default()
	cfg.Kafka.RequestTimeout = 30 * time.Second
	r := &Relay{cfg: cfg, log: zerolog.Nop()}

	failed := &deadlineDelivery{fakeDelivery: &fakeDelivery{}}
	r.abortOpen(context.Background(), failed)
	if failed.gave < 29*time.Second || failed.gave > 30*time.Second {
		t.Fatalf("a failed attempt's abort was given %v, want kafka.request_timeout (30s)", failed.gave)
	}

	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	stopping := &deadlineDelivery{fakeDelivery: &fakeDelivery{}}
	r.abortOpen(stopped, stopping)
	if stopping.gave <= 0 || stopping.gave > stopAbortTimeout {
		t.Fatalf("a stopping relay's abort was given %v, want at most %v", stopping.gave, stopAbortTimeout)
	}
}
