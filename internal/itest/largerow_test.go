//go:build integration

package itest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/relay"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// One outbox row of LARGE_ROW_MB (60) MB, larger than any topic takes (the
// server's max_allowed_packet allows it): a bad row, which
// router.on_error: dead-letter sends on by its event id and error, without
// its body, and the relay goes on. The relay's peak RSS is logged and held
// under the shipped Kubernetes limit (256 MiB) with a quarter to spare.
func TestLargeRowIsABadRowWithinTheMemoryLimit(t *testing.T) {
	BrokerOnlyAsSink(t)
	mb := 60
	if v, err := strconv.Atoi(os.Getenv("LARGE_ROW_MB")); err == nil {
		mb = v
	}
	db := startServer(t, map[string]string{"max-allowed-packet": "128M"})
	k := StartKafka(t)
	cfg := env.RelayConfig(k, "app.outbox")
	cfg.Source.Hosts = []string{db.Addr}
	cfg.Router.OnError = config.OnErrorDeadLetter
	cfg.Router.DeadLetterTopic = cfg.Router.TopicPrefix + "dead-letter"
	cfg.Log.Level = "info"
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	if err := db.Exec(fmt.Sprintf("INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) "+
		"VALUES ('big', 'alarm', 'd', 'X', CONCAT(_latin1'\"', REPEAT(_latin1'x', %d), _latin1'\"'))", mb<<20),
		"INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('after', 'alarm', 'd', 'X', '{}')"); err != nil {
		t.Fatal(err)
	}
	head := Head(t, db)
	var peak int64
	for deadline := time.Now().Add(3 * time.Minute); ; {
		if p.Exited() {
			t.Fatalf("relay exited: %s", tailLines(p.Output(), 20))
		}
		if v := p.PeakRSS(); v > peak {
			peak = v
		}
		if cp := loadCheckpoint(t, cfg); cp != nil && Covers(cp, head) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint never covered %s: %s", head, tailLines(p.Output(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v := p.PeakRSS(); v > peak {
		peak = v
	}
	var dead, after int
	for _, r := range Consume(t, k.Brokers, cfg.Router.TopicPrefix) {
		switch {
		case r.Topic == cfg.Router.DeadLetterTopic && r.Key == "big":
			dead++
			if len(r.Value) > 1<<20 || r.Headers["error"] == "" {
				t.Fatalf("dead-letter record of %d bytes, error %q: want the id and the error, not the body", len(r.Value), r.Headers["error"])
			}
		case r.ID == "after":
			after++
		}
	}
	if dead != 1 || after != 1 {
		t.Fatalf("%d dead-letter records of the large row, %d of the row after it; want 1 and 1", dead, after)
	}
	t.Logf("a %d MB row: peak RSS %d MB", mb, peak>>20)
	if limit := int64(256 << 20); peak > limit*3/4 {
		t.Errorf("peak RSS %d MB for a %d MB row, over three quarters of the Kubernetes limit of %d MB", peak>>20, mb, limit>>20)
	}
}

// A record just over franz-go's batch limit is published or dead-lettered,
// never a fatal stop. The failure guarded against: a row whose record the
// relay's own size check (loop.record, recordSize: key+value+64+8 per
// header) lets through, but whose one-record batch is a few bytes over
// franz-go's ProducerBatchMaxBytes (1,000,012): the batch header is 61
// bytes plus the 4-byte array length franz-go counts, and the record's
// varints take 13 more. franz-go fails the record with MESSAGE_TOO_LARGE,
// classify calls it ErrRejected (fatal), and the relay stops for good with
// an error that names no event_id, although router.on_error is dead-letter:
// the row should have gone to the dead-letter topic as a record "Kafka
// would refuse", and the next row published.
func TestRecordJustOverBatchLimitDoesNotStopRelay(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	cfg.Router.OnError = "dead-letter"
	cfg.Router.DeadLetterTopic = cfg.Router.TopicPrefix + "dead-letter"
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	// One header (id; event_type '' adds none), key "d" (K=1), event_id
	// "e-big" (E=5), value V: recordSize = K+V+64 + (2+E+8) = V+80;
	// franz-go's one-record batch = 65 + 3 + (1+1+1+1+K+3+V+1+1+2+1+E) = V+86.
	const limit = 1_000_012
	v := limit - 80 // recordSize == limit: passes the check; franz-go needs V+86 <= limit
	payload := `"` + strings.Repeat("x", v-2) + `"`
	if err := env.DB.Exec(fmt.Sprintf(`INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('e-big', 'alarm', 'd', '', '%s')`, s.Table(), payload),
		fmt.Sprintf(`INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('e-after', 'alarm', 'd', 'X', '{}')`, s.Table())); err != nil {
		t.Fatal(err)
	}
	awaitCoveredRunning(t, r, cfg, Head(t, env.DB), "relay stopped for good on a row it should have dead-lettered")
	recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
	var got []string
	for _, rec := range recs {
		got = append(got, rec.Topic+"/"+rec.ID)
	}
	if len(recs) != 2 {
		t.Fatalf("records %v, want e-big (published or dead-lettered) and e-after\n%s", got, tailLines(r.Logs(), 20))
	}
}

// Rows that each fit a topic whose max.message.bytes is below the producer
// batch size are published. The failure guarded against: a topic whose
// max.message.bytes (100,000 here) is below franz-go's
// ProducerBatchMaxBytes (1,000,012, the relay never sets it): the relay
// reads the topic's limit and checks each record against it (20 KB rows
// pass), but franz-go packs a catch-up's records into batches of up to 1
// MB, the broker refuses each with MESSAGE_TOO_LARGE (franz-go does not
// split a batch), classify calls it ErrRejected, and the relay stops for
// good on rows that are each valid. Larger batches (the 20,000 default, the
// pipelined backlog) make full producer batches the norm.
func TestTopicMaxMessageBytesBelowProducerBatchPublishes(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	topic := cfg.Router.TopicPrefix + "alarm"
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	limit := "100000"
	resp, err := kadm.NewClient(cl).CreateTopic(context.Background(), 3, 1, map[string]*string{"max.message.bytes": &limit}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	// 200 rows of 20 KB of random hex (snappy gains little on it), one key,
	// in one source transaction.
	stmts := []string{"BEGIN"}
	for b := 0; b < 4; b++ {
		var vals []string
		for i := 0; i < 50; i++ {
			buf := make([]byte, 10000)
			for j := range buf {
				buf[j] = byte(rand.IntN(256))
			}
			vals = append(vals, fmt.Sprintf(`('m-%d', 'alarm', 'dev-1', 'X', '"%x"')`, b*50+i, buf))
		}
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES %s`, s.Table(), strings.Join(vals, ",")))
	}
	stmts = append(stmts, "COMMIT")
	if err := env.DB.Exec(stmts...); err != nil {
		t.Fatal(err)
	}
	awaitCoveredRunning(t, r, cfg, Head(t, env.DB), "relay stopped for good on rows each within the topic's max.message.bytes")
	requireExact(t, k, s, cfg.Router.TopicPrefix)
}

// The packet bound derived from the server's max_allowed_packet (no
// source.max_packet_bytes) follows the server when a DBA raises
// max_allowed_packet while the relay runs (SET GLOBAL, the everyday fix
// for an application's "packet too big"): a larger event the server then
// logs, here in a table the relay does not capture, is read again with the
// new bound, not a configuration stop (exit 78, which a restart policy
// leaves down although a restart alone would read it).
func TestPacketBoundFollowsMaxAllowedPacketRaisedWhileRunning(t *testing.T) {
	BrokerOnlyAsSink(t)
	db := startServer(t, map[string]string{"max-allowed-packet": "1M"})
	k := StartKafka(t)
	cfg := env.RelayConfig(k, "app.outbox")
	cfg.Source.Hosts = []string{db.Addr}
	p := RunRelay(t, cfg)
	p.WaitReady(t)
	if err := db.Exec("SET GLOBAL max_allowed_packet = 16777216", "CREATE TABLE app.files (b LONGBLOB)"); err != nil {
		t.Fatal(err)
	}
	// A new session has the new max_allowed_packet: a 4 MiB row, over the
	// bound of the relay's connection (twice 1 MiB plus 1 MiB).
	if err := db.Exec("INSERT INTO app.files VALUES (REPEAT('x', 4194304))",
		"INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('after', 'alarm', 'd', 'X', '{}')"); err != nil {
		t.Fatal(err)
	}
	head := Head(t, db)
	Eventually(t, 2*time.Minute, func() error {
		select {
		case <-p.Done():
			t.Fatalf("relay stopped: %v (exit %d)", p.Err(), relay.ExitCode(p.Err()))
		default:
		}
		if cp := loadCheckpoint(t, cfg); cp == nil || !Covers(cp, head) {
			return fmt.Errorf("checkpoint does not cover %s yet", head)
		}
		return nil
	})
	after := 0
	for _, r := range Consume(t, k.Brokers, cfg.Router.TopicPrefix) {
		if r.ID == "after" {
			after++
		}
	}
	if after != 1 {
		t.Fatalf("%d records of the row after the large one; want 1", after)
	}
}
