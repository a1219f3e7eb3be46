package relay

import (
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
)

// listedWithGap answers the first n metadata requests that name topic with
// partitions 0 and 2 of 3 (partition 1 missing), led by the cluster's only
// broker, and leaves the others to the cluster: a broker whose metadata of a
// topic created a moment ago is not complete yet, or a hostile one.
func listedWithGap(t *testing.T, c *kfake.Cluster, topic string, n int32) {
	t.Helper()
	host, port, err := net.SplitHostPort(c.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	var answered atomic.Int32
	c.ControlKey(int16(kmsg.Metadata), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.MetadataRequest)
		if len(req.Topics) != 1 || req.Topics[0].Topic == nil || *req.Topics[0].Topic != topic || answered.Add(1) > n {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		resp.Version = req.Version
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = 0, host, int32(p)
		resp.Brokers = append(resp.Brokers, b)
		rt := kmsg.NewMetadataResponseTopic()
		rt.Topic = kmsg.StringPtr(topic)
		for _, part := range []int32{0, 2} {
			rp := kmsg.NewMetadataResponseTopicPartition()
			rp.Partition, rp.Leader, rp.Replicas, rp.ISR = part, 0, []int32{0}, []int32{0}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
}

// A topic listed with a gap in its partitions (0 and 2 of 3) is not taken
// as a topic of two partitions: the sink asks again until every partition
// shows, and the count the placement learns (recorded in the checkpoint
// for good, and what an explicit partition is checked against) is the
// topic's, 3. One never listed whole ends ensureTopic with an error that
// names the topic and is retried, the placement learning nothing.
func TestEnsureTopicCountsPartitionsOnceEveryOneIsListed(t *testing.T) {
	t.Run("listed whole on the third ask", func(t *testing.T) {
		c := kafkatest.Cluster(t, kfake.NumBrokers(1))
		s, ctx := testCatalog(t, c)
		s.place = newPlacements(config.PartitionsKeep, zerolog.Nop())
		listedWithGap(t, c, "orders", 2)
		info, err := s.ensure(ctx, "orders")
		if err != nil {
			t.Fatalf("ensure a topic listed with a gap twice, then whole: %v", err)
		}
		if info.partitions != 3 {
			t.Fatalf("partitions %d, want 3 (listed 0 and 2, then 0, 1 and 2)", info.partitions)
		}
		if got := s.place.snapshot()["orders"]; got != 3 {
			t.Fatalf("the placement learned %d partitions, want 3", got)
		}
	})
	t.Run("never listed whole", func(t *testing.T) {
		c := kafkatest.Cluster(t, kfake.NumBrokers(1))
		s, ctx := testCatalog(t, c)
		s.timeout = 500 * time.Millisecond
		s.place = newPlacements(config.PartitionsKeep, zerolog.Nop())
		listedWithGap(t, c, "orders", 1<<30)
		start := time.Now()
		_, err := s.ensure(ctx, "orders")
		if err == nil || errclass.Fatal(err) {
			t.Fatalf("ensure a topic never listed whole: %v (fatal %v), want a retried error", err, errclass.Fatal(err))
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("gave up after %v, want about the request timeout (500 ms)", took)
		}
		if msg := err.Error(); !strings.Contains(msg, "orders") || !strings.Contains(msg, "partition 1") {
			t.Errorf("error %q: want the topic and the partition missing", msg)
		}
		if got, ok := s.place.snapshot()["orders"]; ok {
			t.Fatalf("the placement learned %d partitions of a topic never listed whole", got)
		}
	})
}
