//go:build integration

package dbzitest

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/itest"
)

// translation is what `checkpoint set --from-debezium --json` prints.
type translation struct {
	Store    string `json:"store"`
	Offset   map[string]any
	Position struct {
		GTIDSet string `json:"gtid_set"`
		Partial *struct {
			GTID string `json:"gtid"`
			Rows int64  `json:"rows"`
		} `json:"partial"`
	} `json:"position"`
	FirstEvent *struct {
		EventID string `json:"event_id"`
		GTID    string `json:"gtid"`
		Table   string `json:"table"`
	} `json:"first_event"`
	LastPublished *struct {
		EventID string `json:"event_id"`
	} `json:"last_published"`
	Published int      `json:"published"`
	Notes     []string `json:"notes"`
	Anomalies []string `json:"anomalies"`
	Written   bool     `json:"written"`
}

// fromDebezium runs checkpoint set --from-debezium with args and returns
// its translation.
func fromDebezium(t *testing.T, cfg config.Config, args ...string) translation {
	t.Helper()
	path := itest.WriteConfig(t, cfg)
	out, stderr, code := env.CLI(t, append([]string{"checkpoint", "set", "--config", path, "--from-debezium", "--yes", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("checkpoint set --from-debezium: exit %d\nstdout %s\nstderr %s", code, out, stderr)
	}
	var tr translation
	if err := json.Unmarshal([]byte(out), &tr); err != nil || strings.Count(out, "\n") != 1 {
		t.Fatalf("--json: want one JSON document, got %q: %v", out, err)
	}
	t.Logf("translation: %s\nstderr: %s", out, stderr)
	if len(tr.Anomalies) > 0 || !tr.Written {
		t.Fatalf("not written, or written unproven: %+v", tr)
	}
	return tr
}

// finish starts the relay from the translated checkpoint, writes rows after
// the switch, and checks that every row of the schema (before: Debezium's,
// during and after: the relay's) is in Kafka exactly once, in order per
// aggregate, with its key.
func finish(t *testing.T, s *itest.Schema, cfg config.Config, brokers []string) {
	t.Helper()
	relay := itest.RunRelay(t, cfg)
	relay.WaitReady(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := s.Write(ctx, itest.WriteOptions{Writers: 2, Transactions: 20, Devices: 6, Tag: "after"}); err != nil {
		t.Fatal(err)
	}
	itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), 2*time.Minute)
	if err := relay.Stop(); err != nil {
		t.Fatalf("relay: %v\n%s", err, relay.Logs())
	}
	recs := itest.Consume(t, brokers, cfg.Router.TopicPrefix)
	if rep := itest.Compare(t, s, recs); !rep.OK() {
		t.Fatalf("after the switch: %s", rep)
	}
}

// bulk commits one transaction of n outbox rows with event ids prefix-1 ..
// prefix-n, over 10 aggregates of their own (prefix-agg-0 ...), each
// aggregate's payload seq increasing in row order.
func bulk(t *testing.T, s *itest.Schema, n int, prefix string) {
	t.Helper()
	if err := s.DB.Exec(fmt.Sprintf(`INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload)
		SELECT CONCAT('%s-', seq), 'alarm', CONCAT('%s-agg-', seq %% 10), 'Bulk', JSON_OBJECT('seq', seq)
		FROM %s.seq_1_to_%d`, s.Table(), prefix, prefix, s.Name, n)); err != nil {
		t.Fatal(err)
	}
}

// ids are the event ids of prefix-1 .. prefix-n (bulk's).
func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i+1)
	}
	return out
}

func written(t *testing.T, s *itest.Schema, tag string, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outs, err := s.Write(ctx, itest.WriteOptions{Writers: 2, Transactions: n, Devices: 6, Tag: tag})
	if err != nil {
		t.Fatal(err)
	}
	var l []string
	for _, o := range outs {
		l = append(l, o.EventID)
	}
	return l
}

// publishedBefore starts the connector (a Connect worker in mode) on a new
// schema from the binlog's head, writes 25 one-row transactions per
// writer and one of pre rows (ids <db>-pre-1...), and waits until Debezium
// has published them all.
func publishedBefore(t *testing.T, mode string, pre int) (*itest.Schema, config.Config, []string, *connect) {
	t.Helper()
	needDebezium(t)
	brokers := itest.ExternalKafka()
	s := env.NewSchema(t)
	cfg := env.RelayConfig(&itest.Kafka{Brokers: brokers}, s.Table())
	itest.CreateTopics(t, brokers, cfg.Kafka.TopicPartitions, cfg.Router.TopicPrefix+"alarm")
	file, pos := binlogPosition(t)
	c := startConnect(t, mode, s, brokers, cfg.Router.TopicPrefix, file, pos)
	before := written(t, s, "before", 25)
	bulk(t, s, pre, s.Name+"-pre")
	waitPublished(t, c, brokers, cfg.Router.TopicPrefix, append(before, ids(s.Name+"-pre", pre)...))
	return s, cfg, brokers, c
}

// Distributed Connect (offsets in the connect-offsets topic), stopped over
// REST while a 1,500-row transaction streams: the relay publishes the rest
// of that transaction (checkpoint.Partial) and nothing Debezium published.
func TestSwitchFromDebeziumDistributedStoppedInsideATransaction(t *testing.T) {
	s, cfg, brokers, c := publishedBefore(t, "distributed", 20)

	// One large transaction, Debezium's producer slowed to some 20
	// records a second: stopped once part of it is out. The broker lets a
	// new quota's first window through faster and the stop over REST takes
	// seconds (about 170 rows are out at this rate; at 10,000 B/s 500-1,400
	// were, and once all of 1,500): the transaction is many times that.
	const big = 6000
	mid := s.Name + "-mid"
	c.throttle(brokers, 2000)
	bulk(t, s, big, mid)
	countMid := func() int {
		n := 0
		for id := range itest.ProducedIDs(t, brokers, cfg.Router.TopicPrefix) {
			if strings.HasPrefix(id, mid+"-") {
				n++
			}
		}
		return n
	}
	itest.Eventually(t, 2*time.Minute, func() error {
		if n := countMid(); n < 20 {
			return fmt.Errorf("%d rows of the large transaction published", n)
		}
		return nil
	})
	c.stop()
	c.throttle(brokers, 0)
	published := countMid()
	if published == 0 || published >= big {
		t.Fatalf("Debezium published %d of the %d rows of the large transaction before it stopped: the test needs a part", published, big)
	}
	t.Logf("Debezium stopped after %d of %d rows of the large transaction", published, big)

	written(t, s, "during", 15) // while neither runs

	tr := fromDebezium(t, cfg, "--connector", c.name)
	if tr.Position.Partial == nil || tr.Position.Partial.Rows != int64(published) {
		t.Fatalf("want a partial of %d rows, got %+v", published, tr.Position.Partial)
	}
	if tr.FirstEvent == nil || tr.FirstEvent.EventID != fmt.Sprintf("%s-%d", mid, published+1) || tr.FirstEvent.GTID != tr.Position.Partial.GTID ||
		tr.FirstEvent.Table != s.Table() {
		t.Fatalf("first event %+v, want %s-%d in %s", tr.FirstEvent, mid, published+1, tr.Position.Partial.GTID)
	}
	if tr.LastPublished == nil || tr.LastPublished.EventID != fmt.Sprintf("%s-%d", mid, published) || !strings.HasPrefix(tr.Store, "topic connect-offsets on ") {
		t.Fatalf("last published %+v, store %q", tr.LastPublished, tr.Store)
	}
	finish(t, s, cfg, brokers)
}

// A standalone worker (the offsets file, Java-serialized), stopped with
// SIGTERM at a transaction boundary: the relay starts with the first row
// written while neither ran.
func TestSwitchFromDebeziumStandaloneOffsetsFile(t *testing.T) {
	const mode = "standalone"
	s, cfg, brokers, c := publishedBefore(t, mode, 30)
	c.stop()

	during := written(t, s, "during", 15)

	// --dry-run, in text: what it would write, and nothing written.
	path := itest.WriteConfig(t, cfg)
	offsets := filepath.Join(c.dir, "offsets.dat")
	out, stderr, code := env.CLI(t, "checkpoint", "set", "--config", path, "--from-debezium", "--offsets-file", offsets, "--dry-run")
	if code != 0 || !strings.Contains(out, "first event:     event_id "+s.Name+"-during") || !strings.Contains(out, "last published:  event_id "+s.Name+"-pre-30") {
		t.Fatalf("--dry-run: exit %d\n%s\n%s", code, out, stderr)
	}
	if cp, err := itest.Store(t, cfg).Load(context.Background(), cfg.Name); err != nil || cp != nil {
		t.Fatalf("--dry-run wrote a checkpoint: %+v %v", cp, err)
	}

	tr := fromDebezium(t, cfg, "--offsets-file", offsets)
	if tr.Position.Partial != nil || tr.FirstEvent == nil || !slices.Contains(during, tr.FirstEvent.EventID) {
		t.Fatalf("want the first row written during the switch next, no partial; got %+v", tr)
	}
	if tr.LastPublished == nil || tr.LastPublished.EventID != s.Name+"-pre-30" {
		t.Fatalf("last published %+v, want %s-pre-30", tr.LastPublished, s.Name)
	}
	finish(t, s, cfg, brokers)
}
