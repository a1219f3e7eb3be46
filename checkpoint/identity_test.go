package checkpoint

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

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

// EnsureTopic of a checkpoint topic that exists (TOPIC_ALREADY_EXISTS) asks
// again while the broker answers UNKNOWN_TOPIC_OR_PARTITION: on Apache Kafka
// a topic created a moment ago (by the test that recreated it, or another
// instance) is not yet in the metadata of the broker asked, and the relay
// stopped at its first attempt with "describe checkpoint topic: unknown".
// One that stays unknown ends the wait with that error, within the bound.
func TestEnsureTopicWaitsForAnExistingTopicToShowInMetadata(t *testing.T) {
	s, opts, c := newStoreCluster(t) // creates the topic
	ctx := context.Background()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	brokers, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var unknown, limit atomic.Int32
	limit.Store(3)
	c.ControlKey(int16(kmsg.Metadata), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.MetadataRequest)
		if len(req.Topics) == 0 || req.Topics[0].Topic == nil || *req.Topics[0].Topic != s.Topic() || unknown.Load() >= limit.Load() {
			return nil, nil, false
		}
		c.KeepControl()
		unknown.Add(1)
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		resp.ControllerID = brokers.Controller
		for _, b := range brokers.Brokers {
			rb := kmsg.NewMetadataResponseBroker()
			rb.NodeID, rb.Host, rb.Port = b.NodeID, b.Host, b.Port
			resp.Brokers = append(resp.Brokers, rb)
		}
		rt := kmsg.NewMetadataResponseTopic()
		rt.Topic, rt.ErrorCode = kmsg.StringPtr(s.Topic()), kerr.UnknownTopicOrPartition.Code
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	fresh := func() *kadm.Client { // no cached metadata
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return kadm.NewClient(cl)
	}
	if err := s.EnsureTopic(ctx, fresh(), 1); err != nil {
		t.Fatalf("ensure a topic the broker answered unknown %d times: %v", unknown.Load(), err)
	}
	if unknown.Load() != 3 {
		t.Fatalf("the broker answered unknown %d times, want 3", unknown.Load())
	}

	unknown.Store(0)
	limit.Store(1 << 30)
	s.describeWait = 300 * time.Millisecond
	start := time.Now()
	if err := s.EnsureTopic(ctx, fresh(), 1); !errors.Is(err, kerr.UnknownTopicOrPartition) || time.Since(start) > 3*time.Second {
		t.Fatalf("ensure a topic that stays unknown: %v after %s; want UNKNOWN_TOPIC_OR_PARTITION within the wait", err, time.Since(start))
	}
}
