package ha_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/ha"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// A session timeout the broker refuses is a configuration error, not an
// endless standby.
func TestElectionRefusedSessionTimeout(t *testing.T) {
	c := kafkatest.Cluster(t, kfake.NumBrokers(1)) // group.min.session.timeout.ms 6s
	cfg := config.Default()
	cfg.Name = "pipe"
	cfg.Kafka.Brokers = c.ListenAddrs()
	cfg.Kafka.ReplicationFactor = 1
	cfg.HA.SessionTimeout = 3 * time.Second
	cfg.HA.HeartbeatInterval = time.Second
	e := ha.New(ha.Config{Relay: cfg, Log: zerolog.Nop(), Metrics: metrics.New("test"), Kafka: kafkaOf(t, cfg)})
	if err := e.Join(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Leave)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := e.Acquire(ctx)
	if l != nil || !errors.Is(err, config.ErrInvalid) || relay.ExitCode(err) != relay.ExitConfig {
		t.Fatalf("acquire: lease %v, err %v; want a configuration error", l, err)
	}
}
