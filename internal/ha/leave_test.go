package ha

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
)

// Leaving the lock group while its coordinator takes requests and never
// answers them (a frozen broker: SIGSTOP, a stalled VM): the group client's
// management loop waits in a JoinGroup for the rebalance timeout plus
// kafka.request_timeout (over 90 s by default), and closing the client
// waited for it, so SIGTERM took minutes to end the relay. Leave returns
// within its bound.
func TestLeaveReturnsWhileTheCoordinatorDoesNotAnswer(t *testing.T) {
	realTime(t)
	c := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.BrokerConfigs(map[string]string{"group.min.session.timeout.ms": "1000"}))
	wake := make(chan struct{})
	t.Cleanup(func() { close(wake) }) // runs before Close
	var frozen, joinsHeld atomic.Bool
	// Frozen: heartbeats are told to rejoin, and the JoinGroup is never
	// answered.
	c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !frozen.Load() {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.RebalanceInProgress.Code
		return resp, nil, true
	})
	c.ControlKey(int16(kmsg.JoinGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if frozen.Load() {
			joinsHeld.Store(true)
			c.SleepControl(func() { <-wake })
		}
		return nil, nil, false
	})
	cfg := testConfig(kafkatest.PipelineConfig(c, "instance-1"))
	cfg.Relay.Kafka.RequestTimeout = 2 * time.Second
	e := New(cfg)
	if err := e.Join(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.Acquire(ctx); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	frozen.Store(true)
	for !joinsHeld.Load() {
		if ctx.Err() != nil {
			t.Fatal("the group client never rejoined")
		}
		time.Sleep(50 * time.Millisecond)
	}
	began := time.Now()
	e.Leave()
	took := time.Since(began)
	t.Logf("left in %s", took.Round(time.Millisecond))
	if limit := 2*cfg.Relay.Kafka.RequestTimeout + time.Second; took > limit {
		t.Fatalf("Leave took %s with the coordinator not answering, want at most %s", took.Round(time.Millisecond), limit)
	}
}
