package metrics

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
)

// The relay opens a new producer per attempt: each client's kprom metrics
// show under the outbox_relay_kafka_ prefix, and the next client registers
// its own without a duplicate-registration panic.
func TestKafkaClientMetrics(t *testing.T) {
	c := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	m := New("test")
	has := func() bool {
		fams, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if strings.HasPrefix(f.GetName(), "outbox_relay_kafka_") {
				return true
			}
		}
		return false
	}
	for attempt := range 2 {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), m.KafkaClient())
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "t", Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if !has() {
			t.Fatalf("attempt %d: no outbox_relay_kafka_ metrics", attempt)
		}
		cl.Close()
	}
}
