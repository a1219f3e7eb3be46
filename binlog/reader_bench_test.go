package binlog

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/schema"
)

// outboxBinlog was written by MariaDB 10.11.19 with internal/devdb's
// settings for bench's tables (b.outbox: id BIGINT AUTO_INCREMENT, event_id,
// aggregate_type, aggregate_id, event_type VARCHAR(64), payload JSON,
// created_at DATETIME(3); b.alarm_record: id BIGINT AUTO_INCREMENT,
// device_id VARCHAR(64), temp INT), after their CREATE TABLEs:
//
//	4 x BEGIN; INSERT INTO b.alarm_record ...; INSERT INTO b.outbox ... (one row); COMMIT
//	INSERT INTO b.outbox ... (three rows)
//
// Its Annotate_rows events are in the file only: a server sends them to
// replicas that ask, which the relay does not.
const outboxBinlog = "testdata/mariadb-10.11-outbox.binlog"

// streamOf is the events of outboxBinlog the reader would receive, from
// its format description on: the transactions of the one-row shape (GTID,
// two table maps and rows events, XID), or with multi the last one (one
// INSERT of three rows).
func streamOf(tb testing.TB, multi bool) (fde []byte, txs [][][]byte) {
	tb.Helper()
	var all [][][]byte
	for _, ev := range rawEvents(tb, outboxBinlog) {
		switch ev.Header.EventType {
		case replication.FORMAT_DESCRIPTION_EVENT:
			fde = ev.RawData
		case replication.MARIADB_GTID_EVENT:
			all = append(all, [][]byte{ev.RawData})
		case replication.MARIADB_ANNOTATE_ROWS_EVENT, replication.ROTATE_EVENT, replication.STOP_EVENT:
		default:
			if len(all) > 0 {
				all[len(all)-1] = append(all[len(all)-1], ev.RawData)
			}
		}
	}
	for _, t := range all {
		if len(t) == 6 && !multi || len(t) == 4 && multi {
			txs = append(txs, t)
		}
	}
	if len(txs) == 0 {
		tb.Fatalf("%s holds no such transaction", outboxBinlog)
	}
	return fde, txs
}

// BenchmarkReaderOneRowTransaction is the reader's work for one
// transaction of the one-row shape (a business row and an outbox row; the
// four recorded ones in turn, their values differing as an application's
// do) as Run does it: go-mysql's raw-mode parse of each packet (the syncer's), then
// the reader's decoding, framing and conversion into Events, with a new
// batch per burst of 600 events (about 64 KB of binlog, go-mysql's
// buffer). Each transaction has a GTID of its own. allocs/op is per
// transaction.
func BenchmarkReaderOneRowTransaction(b *testing.B) { benchmarkReader(b, false) }

// BenchmarkReaderBulkTransaction is the same for one INSERT of three rows
// (allocs/op per transaction of three rows).
func BenchmarkReaderBulkTransaction(b *testing.B) { benchmarkReader(b, true) }

func benchmarkReader(b *testing.B, multi bool) {
	fde, txs := streamOf(b, multi)
	tables := []string{"b.outbox"}
	r := NewReader(Config{Tables: tables}, &Server{Flavor: mysql.MariaDBFlavor, ColumnNames: true}, schema.New(tables, nil, nil), nil)
	start, err := ParseSet(mysql.MariaDBFlavor, "0-1-16")
	if err != nil {
		b.Fatal(err)
	}
	bound := func() (int64, string) { return 64 << 20, "the benchmark" }
	st := &streamState{tableCache: map[uint64]*cachedTable{}, frame: r.newFramer()}
	parser := newEventParser(mysql.MariaDBFlavor, start, bound, r.captured)
	syncer := replication.NewBinlogParser() // as go-mysql's syncer in raw mode
	syncer.SetRawMode(true)
	syncer.SetFlavor(mysql.MariaDBFlavor)
	ev, err := syncer.Parse(bytes.Clone(fde))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := r.take(st, parser, ev, nil); err != nil {
		b.Fatal(err)
	}
	var batch []Event
	seq, events, commits := uint64(16), 0, 0
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		seq++
		for i, raw := range txs[seq%uint64(len(txs))] {
			if events%600 == 0 {
				batch = make([]Event, 0, len(batch))
			}
			events++
			data := bytes.Clone(raw) // go-mysql reads each packet into a buffer of its own
			if i == 0 {
				binary.LittleEndian.PutUint64(data[replication.EventHeaderSize:], seq)
			}
			ev, err := syncer.Parse(data)
			if err != nil {
				b.Fatal(err)
			}
			n := len(batch)
			if batch, err = r.take(st, parser, ev, batch); err != nil {
				b.Fatal(err)
			}
			for _, e := range batch[n:] {
				if e.Kind == KindCommit {
					commits++
				}
			}
		}
	}
	b.StopTimer()
	if commits != b.N {
		b.Fatalf("%d commits for %d transactions", commits, b.N)
	}
}
