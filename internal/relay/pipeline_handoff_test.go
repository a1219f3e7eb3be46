package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/mysqlsource"
)

// The reader's memory is used again across events, hand-offs and
// goroutines: a hand-off the loop gave back is filled with later events, a
// captured table's rows event is decoded into one RowsEvent, small rows'
// records come from one slab, the router remembers the last aggregate
// type's topic. Through the real reader, on the MySQL double, in one
// attempt: several megabytes of binlog (many hand-offs), one-row
// transactions of three aggregate types in turn, transactions larger than a
// batch (committed in parts), an XA transaction prepared before others and
// committed after them, payloads on both sides of the slab's bound; every
// record carries its own row's topic, key, id and payload, once (run it
// with -race too: the reader converts on its goroutine while go-mysql's
// reads on).
func TestRecordsCarryTheirOwnRowsAcrossTheReadersHandOffs(t *testing.T) {
	p, tbl := startDoubleOutbox(t)
	type want struct{ topic, key, fill string }
	wants := map[string]want{}
	id := 0
	row := func(size int) []any {
		id++
		types := []string{"alarm", "order", "user"}
		agg, key := types[id%len(types)], fmt.Sprintf("agg-%d", id%17)
		fill := strings.Repeat(string(rune('a'+id%26)), size) + fmt.Sprint(id)
		ev := fmt.Sprintf("ev-%d", id)
		wants[ev] = want{"outbox.event." + agg, key, fill}
		return []any{int64(id), ev, agg, key, "Happened", fmt.Sprintf(`{"fill":%q}`, fill), time.Now()}
	}
	commit := func(tx mysqlsource.Tx) {
		t.Helper()
		if _, err := p.Commit(tx); err != nil {
			t.Fatal(err)
		}
	}
	rows := func(n, size int) []mysqlsource.Insert {
		var ins []mysqlsource.Insert
		for range n {
			ins = append(ins, mysqlsource.Insert{Table: tbl, Rows: [][]any{row(size)}})
		}
		return ins
	}
	xa := &mysqlsource.XID{GTRID: "held", FormatID: 1}
	commit(mysqlsource.Tx{XA: xa, Phase: mysqlsource.XAPrepare, Inserts: rows(3, 300)})
	for i := range 1500 {
		commit(mysqlsource.Tx{Inserts: rows(1, 100+i%3*3000)}) // 100 B to 6 KB: both sides of the slab's bound
		if i%500 == 250 {
			commit(mysqlsource.Tx{Inserts: rows(120, 700)}) // over the batch bound: committed in parts
		}
	}
	commit(mysqlsource.Tx{Statement: "XA COMMIT X'68656c64',X'',1", DB: "app"})
	commit(mysqlsource.Tx{Inserts: rows(1, 10)})

	k := kafkatest.Cluster(t, kfake.NumBrokers(1))
	cfg := kfakeDoubleConfig(t, k, "handoffs", 2003, p.Addr())
	cfg.Kafka.Batch.MaxRecords = 50
	r, err := New(cfg, zerolog.Nop(), metrics.New("test"))
	if err != nil {
		t.Fatal(err)
	}
	runAttemptToCheckpoint(t, r, p.Executed().Flat())

	cl, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeTopics("outbox.event.alarm", "outbox.event.order", "outbox.event.user"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(seen) < len(wants) && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(rec *kgo.Record) {
			var ev string
			for _, h := range rec.Headers {
				if h.Key == "id" {
					ev = string(h.Value)
				}
			}
			w, ok := wants[ev]
			var payload struct{ Fill string }
			err := json.Unmarshal(rec.Value, &payload)
			switch {
			case !ok:
				t.Fatalf("a record of no row: id %q, topic %s, key %q", ev, rec.Topic, rec.Key)
			case seen[ev]:
				t.Fatalf("row %s published twice", ev)
			case rec.Topic != w.topic || string(rec.Key) != w.key || err != nil || payload.Fill != w.fill:
				t.Fatalf("row %s: topic %s, key %q, payload %.40q (%v); want %s, %q, %.40q", ev, rec.Topic, rec.Key,
					payload.Fill, err, w.topic, w.key, w.fill)
			}
			seen[ev] = true
		})
	}
	if len(seen) != len(wants) {
		t.Fatalf("%d of %d rows published", len(seen), len(wants))
	}
}
