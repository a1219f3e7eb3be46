package relay

import (
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	mrand "math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/spans"
)

// limitCluster starts kfake with topic holding max.message.bytes limit.
func limitCluster(t *testing.T, topic, limit string) *kfake.Cluster {
	t.Helper()
	c := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, 1, map[string]*string{"max.message.bytes": &limit}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sizedRecord returns a record of topic whose recordSize is exactly n,
// shaped like the relay's (key, JSON value, a few headers).
func sizedRecord(t *testing.T, topic string, n int) *kgo.Record {
	rec := &kgo.Record{Topic: topic, Key: []byte("order-1"), Headers: []kgo.RecordHeader{
		{Key: "id", Value: []byte("e-1")}, {Key: "type", Value: []byte("created")},
	}}
	for v := max(0, n-300); v < n; v++ {
		rec.Value = make([]byte, v)
		if s := recordSize(rec); s == n {
			for i := range rec.Value {
				rec.Value[i] = byte(mrand.IntN(256)) // incompressible
			}
			return rec
		} else if s > n {
			break
		}
	}
	t.Fatalf("no value length gives recordSize %d", n)
	return nil
}

// A record loop.record lets through is never failed locally by franz-go's
// batch overhead. The failure guarded against: loop.record lets a record
// through when recordSize(rec) <= max.message.bytes, and the producer's
// batch limit for the topic is that same max.message.bytes. But recordSize
// counts the batch as 61 bytes + 1 byte of length prefix, while franz-go
// counts 65 (4-byte array length) before it knows the broker's produce
// version, and 61 + a uvarint (2 bytes from 128, 3 from 16,384) after. A
// record within 1-3 bytes of the limit (as recordSize counts it: Kafka
// itself, which measures 61 + records, would take it) is failed locally by
// franz-go with MESSAGE_TOO_LARGE, which classify calls ErrRejected: a
// fatal stop, every restart again, instead of publishing the row (or, if it
// were too large, sending it to the dead-letter topic / ErrBadRow naming
// it).
func TestRecordSizeCountsFranzBatchOverhead(t *testing.T) {
	const topic = "t17c"
	for _, tc := range []struct {
		name   string
		limit  int
		warmup bool // a produce first: franz-go knows the produce version
	}{
		{"first record, version unknown, 100000", 100000, false},
		{"known flexible version, 100000", 100000, true},
		{"known flexible version, 1000", 1000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := limitCluster(t, topic, itoa(tc.limit))
			limits := &topicLimits{}
			limits.set(topic, tc.limit)
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchMaxBytesFn(limits.batchMaxBytes),
				kgo.ProducerLinger(0), kgo.RecordRetries(3))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if tc.warmup {
				if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("w")}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			rec := sizedRecord(t, topic, tc.limit)
			// loop.record's check: it fits.
			if n := recordSize(rec); n > tc.limit {
				t.Fatalf("setup: recordSize %d", n)
			}
			err = cl.ProduceSync(ctx, rec).FirstErr()
			if err != nil {
				t.Errorf("a record loop.record accepts (recordSize %d <= max.message.bytes %d) failed: %v; classify: %v (fatal: %v)",
					recordSize(rec), tc.limit, err, errclass.Kafka(err), errclass.Fatal(errclass.Kafka(err)))
			}
		})
	}
}

// Records that each fit a topic whose max.message.bytes is below 512 are
// never packed into a batch the broker refuses. The failure guarded
// against: topicLimits.set clamps franz-go's batch limit to at least 512
// (the lowest franz-go accepts) while loop.record checks each record
// against the topic's real max.message.bytes. On a topic with
// max.message.bytes 300, two records of ~200 bytes each pass loop.record,
// franz-go packs both into one batch of ~340 bytes (< 512), the broker
// refuses it with MESSAGE_TOO_LARGE, classify calls it ErrRejected: fatal
// stop, again on every restart, on rows that each fit. (Relay's linger is
// 0, but a backlog packs records behind an in-flight request the same way;
// linger makes it deterministic here.)
func TestRecordSizeTopicLimitBelow512NoRefusedBatch(t *testing.T) {
	const topic, limit = "t17c-small", 300
	c := limitCluster(t, topic, itoa(limit))
	limits := &topicLimits{}
	limits.set(topic, limit)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchMaxBytesFn(limits.batchMaxBytes),
		kgo.ProducerLinger(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r1, r2 := sizedRecord(t, topic, 200), sizedRecord(t, topic, 200)
	res := cl.ProduceSync(ctx, r1, r2)
	if err := res.FirstErr(); err != nil {
		c := errclass.Kafka(err)
		t.Errorf("two records each within max.message.bytes %d (recordSize %d) refused together: %v; classify: %v (fatal: %v)",
			limit, recordSize(r1), err, c, errclass.Fatal(c))
	}
}

func itoa(n int) string {
	s := ""
	if n == 0 {
		return "0"
	}
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}

// A row at exactly the topic's limit is published also as the first record
// of an attempt. The failure guarded against, end to end through the loop
// and sink: a row whose record recordSize counts at exactly the topic's
// max.message.bytes (Kafka measures it one byte smaller and takes it) is
// the first record of an attempt, so the attempt's fresh client does not
// know the produce version yet and counts the batch 3 bytes larger than
// recordSize: franz-go fails it locally with MESSAGE_TOO_LARGE, the loop
// stops with ErrRejected (fatal), and every restart is again an attempt
// whose first record is this row: the relay stops for good on a row that
// fits (on_error: dead_letter does not help: the row never reaches the
// dead-letter check).
func TestRecordSizeRowAtLimitFirstOfAttemptPublished(t *testing.T) {
	h, n := rowAtLimit(t)
	failed := 0
	for i := 0; i < 3; i++ { // the restarts
		a := h.start()
		a.feedAll()
		err := a.term()
		if err != nil {
			failed++
			t.Errorf("restart %d: a row of recordSize %d on a topic with max.message.bytes %d: %v (fatal: %v)", i, n, n, err, errclass.Fatal(err))
		}
	}
	if failed == 0 {
		if got := len(h.consume()); got != 2 {
			t.Errorf("%d records published, want 2", got)
		}
	}
}

// rowAtLimit is a pipeline of two transactions of one 2 KB row each (the
// same record size, above franz-go's 512-byte floor) whose first
// transaction is published, and whose topic's max.message.bytes is then
// set to that record's recordSize, n: the second row's record is at the
// topic's limit, as recordSize counts it.
func rowAtLimit(t *testing.T) (h *harness, n int) {
	t.Helper()
	s := newScript("mariadb")
	s.tx(s.insert("order", "1", 1)) // e1
	s.tx(s.insert("order", "1", 1)) // e2: the same record size as e1
	for i := range s.events {
		for _, row := range s.events[i].Rows {
			row[4] = []byte(`{"pad":"` + strings.Repeat("p", 2000) + `"}`)
		}
	}
	h = newHarness(t, s, nil)
	a := h.start()
	a.feed(s.through(1))
	if err := a.term(); err != nil {
		t.Fatal(err)
	}
	recs := h.consume()
	if len(recs) != 1 {
		t.Fatalf("%d records after the first transaction", len(recs))
	}
	n = recordSize(recs[0])
	setTopicConfig(t, h, recs[0].Topic, "max.message.bytes", itoa(n))
	return h, n
}

// setTopicConfig sets topic's config key to value on h's broker.
func setTopicConfig(t *testing.T, h *harness, topic, key, value string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.cfg.Kafka.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rs, err := kadm.NewClient(cl).AlterTopicConfigs(context.Background(),
		[]kadm.AlterConfig{{Op: kadm.SetConfig, Name: key, Value: &value}}, topic)
	if err == nil {
		_, err = rs.On(topic, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// A row without a trace context whose record is at its topic's limit is
// published also with the relay's spans on (as it came, without the span).
// The failure guarded against: loop.record checks the record's size, then
// spans.Start adds the span's traceparent header (68 bytes) to a row that
// had none: a record the check let through is over max.message.bytes,
// franz-go (or the broker) refuses it inside the Kafka transaction and the
// relay stops on every restart, for a row that is published with tracing
// off.
func TestRecordSizeRowAtLimitWithoutContextPublishedWithSpansOn(t *testing.T) {
	h, n := rowAtLimit(t)
	exp := tracetest.NewInMemoryExporter()
	tr, err := spans.New(context.Background(), config.Tracing{SampleRatio: 1}, spans.Options{Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	h.relay.spans = tr
	b := h.start()
	b.feedAll()
	if err := b.term(); err != nil {
		t.Fatalf("spans on, a row without a trace context of recordSize %d on a topic with max.message.bytes %d: %v (fatal: %v)", n, n, err, errclass.Fatal(err))
	}
	recs := h.consume()
	if len(recs) != 2 {
		t.Fatalf("%d records published, want 2", len(recs))
	}
	if tp := header(recs[1], "traceparent"); tp != "" || recordSize(recs[1]) != n {
		t.Errorf("the row at the limit went out with traceparent %q, %d bytes; want it as it came (%d bytes)", tp, recordSize(recs[1]), n)
	}
}

// Rows on a topic whose max.message.bytes is below 512 are published. The
// failure guarded against, end to end: the event topic's max.message.bytes
// is 250, below the 512 that topicLimits.set clamps franz-go's batch limit
// to. Each row's record (~100 bytes) passes loop.record's check against
// 250, but franz-go packs the transaction's rows into batches of up to 512
// bytes, the broker refuses them with MESSAGE_TOO_LARGE, and the loop stops
// with ErrRejected (fatal) on every restart: nothing of the topic is ever
// published.
func TestRecordSizeTopicBelow512Publishes(t *testing.T) {
	s := newScript("mariadb")
	s.tx(s.insert("order", "1", 30))
	h := newHarness(t, s, func(c *config.Config) { c.Kafka.Compression = config.CompressNone })
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.cfg.Kafka.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	limit := "250"
	resp, err := kadm.NewClient(cl).CreateTopic(context.Background(), 3, 1, map[string]*string{"max.message.bytes": &limit}, "outbox.event.order")
	cl.Close()
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for i := 0; i < 3; i++ {
		a := h.start()
		a.feedAll()
		if err := a.term(); err != nil {
			failed++
			t.Errorf("attempt %d: rows of ~100 bytes on a topic with max.message.bytes 250: %v (fatal: %v)", i, err, errclass.Fatal(err))
		}
	}
	if failed == 0 {
		h.verify()
	}
}

// A row above a limit lowered while the relay runs is dead-lettered (the
// attempt re-learns the limit), never a fatal stop. The failure guarded
// against: the topic's max.message.bytes is lowered while the relay runs
// (an operator tightening it). The sink learned the old limit at the
// attempt's first record to the topic and never again: a row above the new
// limit passes loop.record, the broker refuses it with MESSAGE_TOO_LARGE,
// and with on_error: dead-letter configured the relay does not send it to
// the dead-letter topic: it stops with ErrRejected (fatal, exit 78 "do not
// restart before fixed"), although a plain restart (which re-reads the
// limit) would dead-letter it. The attempt should end retriably (re-learn
// the limit) instead of stopping.
func TestRecordSizeLimitLoweredWhileRunningDeadLetters(t *testing.T) {
	s := newScript("mariadb")
	s.tx(s.insert("order", "1", 1))
	s.tx(s.insert("order", "1", 1))
	for i := range s.events {
		for _, row := range s.events[i].Rows {
			b := make([]byte, 2000)
			for j := range b {
				b[j] = "0123456789abcdef"[mrand.IntN(16)]
			}
			row[4] = []byte(`{"pad":"` + string(b) + `"}`)
		}
	}
	h := newHarness(t, s, func(c *config.Config) {
		c.Router.OnError = "dead-letter"
		c.Router.DeadLetterTopic = c.Router.TopicPrefix + "dead"
		c.Kafka.Compression = config.CompressNone
	})
	a := h.start()
	a.feed(s.through(1))
	h.waitCheckpoint("first transaction", func(cp *checkpoint.Checkpoint) bool { return cp != nil && strings.Contains(cp.GTIDSet, s.gtid(1)) })
	setTopicConfig(t, h, "outbox.event.order", "max.message.bytes", "1000")
	a.feedAll()
	err := a.term()
	if err != nil && errclass.Fatal(err) {
		t.Fatalf("max.message.bytes lowered to 1000 while running, a 2 KB row with on_error dead-letter: %v (fatal: %v, exit %d)", err, errclass.Fatal(err), ExitCode(err))
	}
	if err != nil {
		// The refusal ends the attempt; the next one reads the limit anew
		// and dead-letters the row.
		t.Logf("first attempt: %v", err)
		b := h.start()
		b.feedAll()
		if err := b.term(); err != nil {
			t.Fatalf("second attempt: %v (fatal: %v)", err, errclass.Fatal(err))
		}
	}
	dead := 0
	for _, r := range h.consume() {
		if r.Topic == h.cfg.Router.DeadLetterTopic {
			dead++
		}
	}
	if dead == 0 {
		t.Errorf("no row on the dead-letter topic %s after the limit was lowered", h.cfg.Router.DeadLetterTopic)
	}
}

// A checkpoint too large for its topic stops the relay naming the pending
// XA transactions that make it large. The failure guarded against: the
// checkpoint topic's records are not bounded at all: store.EnsureTopic does
// not go through sink.ensureTopic, so neither loop.record's check nor
// topicLimits covers it, and the checkpoint grows with the pending XA
// transactions (and the captured schema). Past franz-go's 1,000,012 bytes
// (or the checkpoint topic's max.message.bytes) every checkpoint write
// fails with MESSAGE_TOO_LARGE = ErrRejected (fatal, exit 78), and every
// restart must write the same checkpoint: the relay stops for good. 6,000
// prepared-and-pending XA transactions with 128-byte gtrids do it.
func TestRecordSizeCheckpointTooLargeNamesPendingXA(t *testing.T) {
	s := newScript("mariadb")
	s.tx(s.insert("order", "1", 1))
	for i := 0; i < 6000; i++ {
		s.xaPrepare(fmt.Sprintf("%0128x,,1", i))
	}
	h := newHarness(t, s, nil)
	a := h.start()
	a.feedAll()
	// A stop, but a clear one: the checkpoint cannot list them all (held XA
	// transactions are documented as unbounded).
	err := a.term()
	if err == nil || !errclass.Fatal(err) || !strings.Contains(err.Error(), "6000 prepared XA transactions") {
		t.Errorf("6,000 pending XA transactions: %v (fatal: %v, exit %d); want a stop naming them", err, errclass.Fatal(err), ExitCode(err))
	}
}

// A row that fits a limit raised while the relay runs reaches its own
// topic. The failure guarded against: the converse: the operator raises the
// topic's max.message.bytes (to let a large row through) while the relay
// runs. The sink keeps the limit it learned at the attempt's first record
// to the topic, so the row that now fits is still sent to the dead-letter
// topic (on_error: dead-letter; with fail it stops with ErrBadRow, exit
// "data"), and never reaches its own topic: an event its consumers never
// see.
func TestRecordSizeLimitRaisedWhileRunningPublishes(t *testing.T) {
	s := newScript("mariadb")
	s.tx(s.insert("order", "1", 1))
	big := s.insert("order", "1", 1)
	s.tx(big)
	h := newHarness(t, s, func(c *config.Config) { c.Router.OnError = "dead-letter" })
	s.events[len(s.events)-2].Rows[0][4] = []byte(`{"pad":"` + strings.Repeat("p", 3000) + `"}`)
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.cfg.Kafka.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	limit := "1000"
	resp, err := adm.CreateTopic(context.Background(), 3, 1, map[string]*string{"max.message.bytes": &limit}, "outbox.event.order")
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	a := h.start()
	a.feed(s.through(1))
	h.waitCheckpoint("first transaction", func(cp *checkpoint.Checkpoint) bool { return cp != nil && strings.Contains(cp.GTIDSet, s.gtid(1)) })
	v := "1000000"
	rs, err := adm.AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &v}}, "outbox.event.order")
	if err == nil {
		_, err = rs.On("outbox.event.order", nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	a.feedAll()
	if err := a.term(); err != nil {
		// The raised limit ends the attempt; the next one's client
		// batches by it.
		t.Logf("first attempt: %v", err)
		if errclass.Fatal(err) {
			t.Fatal(err)
		}
		b := h.start()
		b.feedAll()
		if err := b.term(); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	for _, r := range h.consume() {
		got[header(r, "id")] = true
	}
	if !got[big[0].id] {
		t.Errorf("row %s (3 KB) not on its topic although max.message.bytes was raised to 1,000,000 before the relay read it (sent to the dead-letter topic)", big[0].id)
	}
}

// A topic configured for records above 1,000,012 bytes (max.message.bytes
// 2,000,000): the relay sets franz-go's batch limit per topic
// (ProducerBatchMaxBytesFn; franz-go takes up to 1 GiB), so a 1.5 MB row
// that the topic takes is published, never a bad row capped at franz-go's
// default batch size (the runbook's fix, "fix ... max.message.bytes of the
// topic, then replay", relies on it).
func TestRecordSizeTopicAboveDefaultLimitPublishes(t *testing.T) {
	s := newScript("mariadb")
	s.tx(s.insert("order", "1", 1))
	h := newHarness(t, s, func(c *config.Config) { c.Kafka.Compression = config.CompressNone })
	s.events[0].Rows[0][4] = []byte(`{"pad":"` + strings.Repeat("p", 1_500_000) + `"}`)
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.cfg.Kafka.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	limit := "2000000"
	resp, err := kadm.NewClient(cl).CreateTopic(context.Background(), 3, 1, map[string]*string{"max.message.bytes": &limit}, "outbox.event.order")
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	a := h.start()
	a.feedAll()
	if err := a.term(); err != nil {
		t.Errorf("a 1.5 MB row on a topic with max.message.bytes 2,000,000: %v", err)
	}
}

// The two record-size facts the relay's checks rely on, against Apache
// Kafka (RELAY_TEST_KAFKA):
// Kafka takes a record of recordSize == max.message.bytes (it measures 61 +
// records), the relay's producer refuses it as the first record of a
// client; and Kafka refuses two records of recordSize 200 packed into one
// batch on a topic with max.message.bytes 300.
func TestRecordSizeApacheKafkaLimits(t *testing.T) {
	brokers := os.Getenv("RELAY_TEST_KAFKA")
	if brokers == "" {
		t.Skip("RELAY_TEST_KAFKA not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	admCl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	mk := func(topic string, limit int) {
		v := itoa(limit)
		resp, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &v}, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	atLimit, small := "t17c-at-"+suffix, "t17c-small-"+suffix
	mk(atLimit, 100000)
	mk(small, 300)
	time.Sleep(time.Second)

	rec := sizedRecord(t, atLimit, 100000)
	plain, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.ProduceSync(ctx, &kgo.Record{Topic: atLimit, Value: []byte("w")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := plain.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatalf("Apache Kafka refuses recordSize == max.message.bytes: %v (then recordSize is not the problem)", err)
	}
	plain.Close()
	t.Logf("Apache Kafka took a record of recordSize %d on a topic with max.message.bytes 100000", recordSize(rec))
	limits := &topicLimits{}
	limits.set(atLimit, 100000)
	limits.set(small, 300)
	relayLike, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ProducerBatchMaxBytesFn(limits.batchMaxBytes),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer relayLike.Close()
	rec2 := sizedRecord(t, atLimit, 100000)
	if err := relayLike.ProduceSync(ctx, rec2).FirstErr(); err != nil {
		t.Errorf("the relay's producer, first record: %v (classify: %v)", err, errclass.Kafka(err))
	}
	r1, r2 := sizedRecord(t, small, 200), sizedRecord(t, small, 200)
	if err := relayLike.ProduceSync(ctx, r1, r2).FirstErr(); err != nil {
		t.Errorf("two records of recordSize 200 on a topic with max.message.bytes 300: %v (classify: %v)", err, errclass.Kafka(err))
	}
}

// A truncated dead-letter record still too large for its topic is a bad row
// (ErrBadRow naming it), never a Kafka rejection. The failure guarded
// against: The dead-letter topic with a small max.message.bytes (250): a
// bad row's dead-letter record is truncated (value dropped) when too large,
// but the truncated record (key, the error, table, GTID, id and truncated
// headers, ~300 bytes) is not checked again: it goes to Kafka, which
// refuses it, and the relay stops with ErrRejected (exit 78, "kafka
// refused the request for good") instead of ErrBadRow naming the row.
func TestRecordSizeDeadLetterTruncatedStillTooLargeIsBadRow(t *testing.T) {
	s := newScript("mariadb")
	s.tx(s.insert("order", "1", 1))
	h := newHarness(t, s, func(c *config.Config) {
		c.Router.OnError = "dead-letter"
		c.Router.DeadLetterTopic = c.Router.TopicPrefix + "dead"
		c.Kafka.Compression = config.CompressNone
	})
	s.events[0].Rows[0][4] = []byte(`{"pad":"` + strings.Repeat("p", 3000) + `"}`)
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.cfg.Kafka.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for topic, limit := range map[string]string{"outbox.event.order": "1000", "outbox-relay.dead-letter.pipeline": "250"} {
		resp, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, 1, map[string]*string{"max.message.bytes": &limit}, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	a := h.start()
	a.feedAll()
	if err := a.term(); err != nil && !errors.Is(err, ErrBadRow) {
		t.Errorf("dead-letter topic with max.message.bytes 250: %v (ErrBadRow: %v, exit %d)", err, errors.Is(err, ErrBadRow), ExitCode(err))
	}
}
