//go:build integration

package itest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/otlpreceiver"
)

// With the relay's spans on (tracing.otlp_endpoint) and the partition taken
// from a column (router.additional_fields placement partition), every row
// lands in the partition its column names, under both deliveries; rows of a
// table without that column land in their key's partition as the Java
// client places them. The failure guarded against: the explicit-partition
// mark was the record's Context, and starting the span replaced it: on a
// topic of 6 partitions most of 60 rows landed in their key's partition.
func TestTracedRowsLandInThePartitionTheirShardColumnNames(t *testing.T) {
	BrokerOnlyAsSink(t)
	rcv, err := otlpreceiver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rcv.Close)
	for _, delivery := range []config.Delivery{config.ExactlyOnce, config.AtLeastOnce} {
		t.Run(string(delivery), func(t *testing.T) {
			k := StartKafka(t)
			s := env.NewSchema(t)
			if err := env.DB.Exec(fmt.Sprintf(`CREATE TABLE %s.events (
				id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, event_id VARCHAR(64) NOT NULL, aggregate_type VARCHAR(64) NOT NULL,
				aggregate_id VARCHAR(64) NOT NULL, event_type VARCHAR(64), payload TEXT, shard INT NOT NULL)`, s.Name)); err != nil {
				t.Fatal(err)
			}
			cfg := env.RelayConfig(k, s.Table(), s.Name+".events")
			cfg.Kafka.Delivery = delivery
			cfg.Tracing.OTLPEndpoint = rcv.HTTPURL
			cfg.Tracing.SampleRatio = 1
			sharded := config.RouterConfig{TopicPrefix: cfg.Router.TopicPrefix + "sharded.",
				AdditionalFields: []config.AdditionalField{{Column: "shard", Placement: "partition"}}}
			cfg.Router.Tables = map[string]config.RouterConfig{s.Name + ".events": sharded}
			cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
			if err != nil {
				t.Fatal(err)
			}
			for _, topic := range []string{sharded.TopicPrefix + "alarm", cfg.Router.TopicPrefix + "alarm"} {
				if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 6, 1, nil, topic); err != nil {
					t.Fatal(err)
				}
			}
			cl.Close()
			r := RunRelay(t, cfg)
			r.WaitReady(t)
			for tx := range 6 { // 10 rows a transaction
				var sharded, plain []string
				for i := tx * 10; i < tx*10+10; i++ {
					sharded = append(sharded, fmt.Sprintf("('s-%d', 'alarm', 'dev-%d', 'X', '{}', %d)", i, i, i%6))
					plain = append(plain, fmt.Sprintf("('p-%d', 'alarm', 'dev-%d', 'X', '{}')", i, i))
				}
				if err := env.DB.Exec("BEGIN",
					fmt.Sprintf("INSERT INTO %s.events (event_id, aggregate_type, aggregate_id, event_type, payload, shard) VALUES %s", s.Name, strings.Join(sharded, ", ")),
					fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES %s", s.Table(), strings.Join(plain, ", ")),
					"COMMIT"); err != nil {
					t.Fatal(err)
				}
			}
			WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
			recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
			if len(recs) < 120 {
				t.Fatalf("%d records, want 120", len(recs))
			}
			wrong, spread := 0, map[int32]bool{}
			for _, rec := range recs {
				n, _ := strconv.Atoi(rec.ID[2:])
				want := int32(n % 6)
				if strings.HasPrefix(rec.ID, "p-") {
					want = clients.KeyPartition([]byte(rec.Key), 6)
					spread[rec.Partition] = true
				}
				if rec.Partition != want {
					wrong++
					t.Errorf("%s (key %s) in partition %d, want %d", rec.ID, rec.Key, rec.Partition, want)
				}
				if rec.Headers["traceparent"] == "" {
					t.Errorf("%s went out without the relay span's traceparent", rec.ID)
				}
			}
			if wrong > 0 {
				t.Fatalf("%d of %d traced records in the wrong partition", wrong, len(recs))
			}
			if len(spread) < 5 {
				t.Fatalf("60 keys over partitions %v", spread)
			}
			// The spans say where their records landed.
			Eventually(t, time.Minute, func() error {
				placed := 0
				for _, sp := range rcv.Spans() {
					id := sp.Attributes["messaging.message.id"]
					if sp.Attributes["messaging.destination.name"] != sharded.TopicPrefix+"alarm" || !strings.HasPrefix(id, "s-") {
						continue
					}
					n, _ := strconv.Atoi(id[2:])
					if got := sp.Attributes["messaging.destination.partition.id"]; got != strconv.Itoa(n%6) {
						return fmt.Errorf("span of %s says partition %s, want %d", id, got, n%6)
					}
					placed++
				}
				if placed < 60 {
					return fmt.Errorf("%d of 60 spans of sharded rows received", placed)
				}
				return nil
			})
			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
