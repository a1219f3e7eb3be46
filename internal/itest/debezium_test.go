//go:build integration

package itest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

// checkpoint set --from-debezium against crafted offsets and records (the
// real connector's switch is internal/dbzitest's): an offset of the
// MariaDB connector's shape (its gtids, inside a transaction), one whose
// binlog file holds no published row (the walk steps back a file), and
// records that no position can take over without a loss or a duplicate.

// dbzRows are the outbox rows of one transaction: event ids, aggregate ids.
type dbzRow struct{ id, agg string }

func dbzInsert(t *testing.T, s *Schema, rows ...dbzRow) {
	t.Helper()
	var vals []string
	for _, r := range rows {
		vals = append(vals, fmt.Sprintf("('%s', 'alarm', '%s', 'AlarmCreated', '{}')", r.id, r.agg))
	}
	if err := s.DB.Exec(fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES %s",
		s.Table(), strings.Join(vals, ", "))); err != nil {
		t.Fatal(err)
	}
}

// dbzPublish produces the records the connector would have for rows, into
// cfg's topic, placed as the Java client places keys (partition adds to
// that, for a wrongly placed record).
func dbzPublish(t *testing.T, cfg config.Config, partitions int32, shift int32, rows ...dbzRow) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Kafka.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range rows {
		rec := &kgo.Record{Topic: cfg.Router.TopicPrefix + "alarm", Key: []byte(r.agg), Value: []byte("{}"),
			Partition: (clients.KeyPartition([]byte(r.agg), partitions) + shift) % partitions,
			Headers:   []kgo.RecordHeader{{Key: "id", Value: []byte(r.id)}, {Key: "type", Value: []byte("AlarmCreated")}}}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// dbzOffset stores offset as Connect's offsets topic holds it.
func dbzOffset(t *testing.T, brokers []string, topic, connector string, offset map[string]any) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	v, _ := json.Marshal(offset)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := fmt.Sprintf(`["%s",{"server":"dbz"}]`, connector)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// dbzDelete stores a null record for connector's offset: Connect's reset.
func dbzDelete(t *testing.T, brokers []string, topic, connector string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := fmt.Sprintf(`["%s",{"server":"dbz"}]`, connector)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func binlogFile(t *testing.T) string {
	t.Helper()
	rows, err := env.DB.Query("SHOW MASTER STATUS")
	if err != nil || len(rows) == 0 {
		t.Fatalf("SHOW MASTER STATUS: %v", err)
	}
	return rows[0][0]
}

func TestCheckpointFromDebeziumProvesCraftedOffsets(t *testing.T) {
	BrokerOnlyAsSink(t)
	k := StartKafka(t)
	s := env.NewSchema(t)
	a := []dbzRow{{"a1", "dev-1"}, {"a2", "dev-2"}}
	b := []dbzRow{{"b1", "dev-1"}, {"b2", "dev-3"}, {"b3", "dev-2"}}
	c := []dbzRow{{"c1", "dev-1"}, {"c2", "dev-2"}, {"c3", "dev-3"}, {"c4", "dev-4"}}
	d := []dbzRow{{"d1", "dev-1"}}
	// The walk steps back a file: the one before holds this test's rows
	// only (earlier tests of the shard logged statements the walk stops at).
	if err := env.DB.Exec("FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	dbzInsert(t, s, a...)
	dbzInsert(t, s, b...)
	afterB := Head(t, env.DB)
	if err := env.DB.Exec("FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	newest := binlogFile(t)
	dbzInsert(t, s, c...)
	afterC := Head(t, env.DB)
	dbzInsert(t, s, d...)
	offsets := env.Unique("connect-offsets-")
	CreateTopics(t, k.Brokers, 5, offsets)
	cat := func(l ...[]dbzRow) (out []dbzRow) {
		for _, x := range l {
			out = append(out, x...)
		}
		return out
	}

	for _, sc := range []struct {
		name      string
		offset    map[string]any
		published []dbzRow
		shift     int32 // partitions the last published record is off by
		code      int
		want      []string // in stdout (JSON) on success, stderr on a refusal
		write     bool     // without --dry-run (--yes): a refusal writes no checkpoint
	}{
		{name: "the MariaDB connector inside a transaction", offset: map[string]any{"file": newest, "pos": 4, "gtids": afterB, "event": 3, "row": 1},
			published: cat(a, b, c[:2]), want: []string{`"gtid_set":"` + afterB + `","partial":{"gtid":"` + afterC + `","rows":2}`,
				`"first_event":{"event_id":"c3"`, `"last_published":{"event_id":"c2"`, "Debezium stopped inside transaction"}},
		{name: "no published row in the offset's file: one file back", offset: map[string]any{"file": newest, "pos": 4},
			published: cat(a, b), want: []string{`"gtid_set":"` + afterB + `","partial":null`, `"first_event":{"event_id":"c1"`,
				"walked again from the start of", "Kafka's records end where Debezium's offset is"}},
		{name: "a row missing before published ones", offset: map[string]any{"file": newest, "pos": 4, "gtids": afterB},
			published: cat(a, b[:1], b[2:]), code: 1, want: []string{"records are not a prefix of the binlog: event \"b2\"", `event "b3"`,
				`Debezium's offset (file ` + newest + ` pos 4, gtids ` + afterB + `) covers event "b2"`}},
		{name: "a record where the relay does not place it", offset: map[string]any{"file": newest, "pos": 4, "gtids": afterB},
			published: cat(a, b), shift: 1, code: 1, want: []string{"records are not where the relay places them", `event "b3"`}},
		// GTIDs the source has not executed: the walk started from them (the
		// file is not the source's) and the position was theirs, written:
		// 0-99-100000 made the relay take every transaction of the domain up
		// to seq 100000 as published.
		{name: "gtids of another server in the source's domain", offset: map[string]any{"file": "mysql-bin.999999", "pos": 4, "gtids": "0-99-100000"},
			published: a, code: 1, write: true, want: []string{"its gtids (0-99-100000) name 0-99-100000, which the source", "has not executed",
				"nothing written"}},
		{name: "gtids with a domain the source never had", offset: map[string]any{"file": "mysql-bin.999999", "pos": 4, "gtids": afterB + ",7-99-1000"},
			published: cat(a, b), code: 1, write: true, want: []string{"name 7-99-1000, which the source", "has not executed"}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			cfg := env.RelayConfig(k, s.Table())
			CreateTopics(t, k.Brokers, 3, cfg.Router.TopicPrefix+"alarm")
			n := len(sc.published)
			dbzPublish(t, cfg, 3, 0, sc.published[:n-1]...)
			dbzPublish(t, cfg, 3, sc.shift, sc.published[n-1])
			connector := env.Unique("dbz")
			dbzOffset(t, k.Brokers, offsets, connector, sc.offset)
			path := WriteConfig(t, cfg)
			mode := "--dry-run"
			if sc.write {
				mode = "--yes"
			}
			out, errOut, code := env.CLI(t, "checkpoint", "set", "--config", path, "--from-debezium", "--offsets-topic", offsets,
				"--connector", connector, mode, "--json")
			if sc.write {
				if cp, err := Store(t, cfg).Load(t.Context(), cfg.Name); err != nil || cp != nil {
					t.Errorf("checkpoint after the refusal: %+v (%v), want none", cp, err)
				}
			}
			got := out
			if sc.code != 0 {
				got = errOut
			}
			if code != sc.code {
				t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", code, sc.code, out, errOut)
			}
			for _, w := range sc.want {
				if !strings.Contains(got, w) {
					t.Errorf("lacks %q:\n%s", w, got)
				}
			}
		})
	}
	// The newest record of a key wins: null is a deleted offset.
	t.Run("a deleted offset", func(t *testing.T) {
		connector := env.Unique("dbz")
		dbzOffset(t, k.Brokers, offsets, connector, map[string]any{"file": newest, "pos": 4})
		dbzDelete(t, k.Brokers, offsets, connector)
		path := WriteConfig(t, env.RelayConfig(k, s.Table()))
		out, errOut, code := env.CLI(t, "checkpoint", "set", "--config", path, "--from-debezium", "--offsets-topic", offsets, "--connector", connector, "--dry-run")
		if code != 1 || out != "" || !strings.Contains(errOut, "the offset of connector "+connector+" (server dbz) in topic "+offsets+" on ") ||
			!strings.Contains(errOut, "was deleted (its newest record is null)") {
			t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errOut)
		}
	})
}
