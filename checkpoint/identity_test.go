package checkpoint

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
)

// A checkpoint topic the broker does not know yet (Apache Kafka answers a
// creation before every broker has its metadata) is asked about again
// until it is known, within DescribeWait; one that never comes is an
// error naming the topic and Kafka's answer.
func TestDescribeWaitsForATopicJustCreated(t *testing.T) {
	c := kafkatest.Cluster(t, kfake.NumBrokers(1))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	ctx := context.Background()

	s := NewStore("checkpoints")
	s.describeWait = 300 * time.Millisecond
	if _, err := s.Describe(ctx, adm); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("describe of a topic that never comes: %v; want UNKNOWN_TOPIC_OR_PARTITION", err)
	}

	s.describeWait = 20 * time.Second
	created := make(chan error, 1)
	go func() {
		time.Sleep(500 * time.Millisecond) // the topic appears while Describe asks
		_, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, "checkpoints")
		created <- err
	}()
	start := time.Now()
	st, err := s.Describe(ctx, adm)
	took := time.Since(start)
	if cerr := <-created; cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil {
		t.Fatalf("describe of a topic created meanwhile: %v", err)
	}
	// Soon after the topic is created (500 ms), not once franz-go's
	// metadata cache (5 s) lets the first "unknown" answer go.
	if took > 3*time.Second {
		t.Fatalf("describe took %v for a topic created 500 ms in, want well under the client's 5 s metadata cache", took)
	}
	if st.ID == (kadm.TopicID{}) {
		t.Fatalf("describe returned no topic id: %+v", st)
	}
}
