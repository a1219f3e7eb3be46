package binlog

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/internal/mysqlsource"
	"github.com/outbox-relay/outbox-relay/schema"
)

// TestHotPathReadsTheMySQLDoublesBinlogAsGoMySQL: the MySQL 8 double's
// binlog (internal/mysqlsource: MySQL's GTID, BEGIN, table map, rows v2 and
// XID events, FULL and MINIMAL row metadata, with and without checksums,
// 8.0 and 8.4, compressed transactions), transactions of random rows of
// every column type the outbox uses (BIGINT, INT, VARCHAR, JSON,
// DATETIME(3), LONGTEXT) in a captured and an uncaptured table, single rows and
// several, with updates and XA: every event decodes through the hot path
// as through go-mysql's parser, and the reader makes the same Events
// (RELAY_TEST_ROWDECODE_SEED varies the rows).
func TestHotPathReadsTheMySQLDoublesBinlogAsGoMySQL(t *testing.T) {
	for name, opts := range map[string]mysqlsource.Options{
		"full":        {},
		"minimal":     {RowMetadata: "MINIMAL"},
		"no checksum": {BinlogChecksum: "NONE"},
		"8.4":         {Version: "8.4.3"},
		"compressed":  {Compression: true},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := mysqlsource.Start(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			outbox, err := p.CreateOutbox("app", "outbox")
			if err != nil {
				t.Fatal(err)
			}
			business, err := p.CreateTable("app", "business", []mysqlsource.Column{{Name: "id", Type: mysqlsource.Bigint},
				{Name: "n", Type: mysqlsource.Int}, {Name: "v", Type: mysqlsource.Varchar64}, {Name: "doc", Type: mysqlsource.JSON},
				{Name: "at", Type: mysqlsource.Datetime3}, {Name: "body", Type: mysqlsource.Longtext}}, "")
			if err != nil {
				t.Fatal(err)
			}
			// MariaDB's outbox: its JSON payload is a LONGTEXT.
			textOutbox, err := p.CreateTable("app", "outbox_text", []mysqlsource.Column{{Name: "id", Type: mysqlsource.Bigint},
				{Name: "event_id", Type: mysqlsource.Varchar64}, {Name: "payload", Type: mysqlsource.Longtext},
				{Name: "created_at", Type: mysqlsource.Datetime3}}, "")
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(differentialSeed(46), uint64(len(name))))
			const txs = 150
			for i := range txs {
				tx := mysqlsource.Tx{Inserts: []mysqlsource.Insert{{Table: outbox, Rows: randomDoubleRows(rng, outbox, 1+rng.IntN(3)*rng.IntN(2))}}}
				if rng.IntN(2) == 0 {
					tx.Inserts = append([]mysqlsource.Insert{{Table: business, Rows: randomDoubleRows(rng, business, 1)}}, tx.Inserts...)
				}
				if rng.IntN(3) == 0 {
					tx.Inserts = append(tx.Inserts, mysqlsource.Insert{Table: textOutbox, Rows: randomDoubleRows(rng, textOutbox, 1+rng.IntN(3))})
				}
				switch rng.IntN(10) {
				case 0:
					row := randomDoubleRows(rng, business, 1)[0]
					tx.Updates = []mysqlsource.Update{{Table: business, Rows: [][2][]any{{row, row}}}}
				case 1:
					tx.XA, tx.Phase = &mysqlsource.XID{GTRID: "x" + strconv.Itoa(i), FormatID: 1}, mysqlsource.XAOnePhase
				}
				if _, err := p.Commit(tx); err != nil {
					t.Fatal(err)
				}
			}
			tables := []string{"app.outbox", "app.outbox_text"}
			events := readDouble(t, p, txs+3)
			newReader := func() *Reader {
				return NewReader(Config{Tables: tables}, &Server{Flavor: mysql.MySQLFlavor, ColumnNames: opts.RowMetadata != "MINIMAL"},
					schema.New(tables, nil, nil), nil)
			}
			hotR, refR := newReader(), newReader()
			start, _ := ParseSet(mysql.MySQLFlavor, "")
			hot := newEventParser(mysql.MySQLFlavor, start, bound64M, hotR.captured)
			ref := referenceParser(mysql.MySQLFlavor, start.Clone(), refR.captured)
			hotSt := &streamState{tableCache: map[uint64]*cachedTable{}, frame: hotR.newFramer()}
			refSt := &streamState{tableCache: map[uint64]*cachedTable{}, frame: refR.newFramer()}
			hotSyncer, refSyncer := newRawSyncer(mysql.MySQLFlavor), newRawSyncer(mysql.MySQLFlavor)
			var hotBatch, refBatch []Event
			uncaptured := 0
			for i, raw := range events {
				h, herr := hot.parse(hotSyncer.event(t, raw.data))
				gotHot := parsed(h, herr)
				if herr == nil {
					if _, ok := h.Event.(*uncapturedRowsEvent); ok {
						uncaptured++
					}
				}
				if herr == nil {
					hotBatch, herr = hotR.step(hotSt, h, hotBatch)
				}
				r, rerr := ref.parse(refSyncer.event(t, raw.data))
				gotRef := parsed(r, rerr)
				if rerr == nil {
					refBatch, rerr = refR.step(refSt, r, refBatch)
				}
				if gotHot != gotRef {
					t.Fatalf("event %d (%s):\n hot path: %s\n go-mysql: %s", i, raw.header.EventType, gotHot, gotRef)
				}
				if herr != nil || rerr != nil {
					t.Fatalf("event %d (%s): the reader's error %v through the hot path, %v through go-mysql's", i, raw.header.EventType, herr, rerr)
				}
			}
			got, want := renderAll(hotBatch), renderAll(refBatch)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("the reader's events differ\n hot path: %q\n go-mysql: %q", got, want)
			}
			commits := 0
			for i := range hotBatch {
				if !reflect.DeepEqual(hotBatch[i].Rows, refBatch[i].Rows) || !reflect.DeepEqual(hotBatch[i].Digest, refBatch[i].Digest) {
					t.Fatalf("event %d: rows %v digest %+v through the hot path, %v %+v through go-mysql's", i, hotBatch[i].Rows,
						hotBatch[i].Digest, refBatch[i].Rows, refBatch[i].Digest)
				}
				if hotBatch[i].Kind == KindCommit {
					commits++
				}
			}
			if commits < txs {
				t.Fatalf("%d commits of %d transactions", commits, txs)
			}
			if uncaptured == 0 && !opts.Compression { // a compressed transaction's events are go-mysql's
				t.Fatal("no rows event of the uncaptured table went through the hot path")
			}
		})
	}
}

// randomDoubleRows are n rows of t's columns with random values at their
// types' edges now and then.
func randomDoubleRows(rng *rand.Rand, t *mysqlsource.Table, n int) [][]any {
	text := func() string {
		var b strings.Builder
		for range rng.IntN(64) {
			switch rng.IntN(6) {
			case 0:
				b.WriteRune(rune(0x4e00 + rng.IntN(0x5000))) // CJK
			case 1:
				b.WriteRune(rune(0x1f600 + rng.IntN(80))) // four bytes in utf8mb4
			case 2:
				b.WriteByte(byte(' ' + rng.IntN(95)))
			default:
				b.WriteByte(byte('a' + rng.IntN(26)))
			}
		}
		s := b.String()
		for len(s) > 64 { // VARCHAR(64): characters, but the double counts bytes
			_, size := lastRune(s)
			s = s[:len(s)-size]
		}
		return s
	}
	rows := make([][]any, n)
	for i := range rows {
		row := make([]any, len(t.Columns))
		for j, c := range t.Columns {
			switch c.Type {
			case mysqlsource.Bigint:
				row[j] = []int64{0, 1, -1, 1 << 62, -(1 << 63), rng.Int64()}[rng.IntN(6)]
			case mysqlsource.Int:
				row[j] = []int64{0, 1, -1, 1<<31 - 1, -(1 << 31), int64(rng.Int32())}[rng.IntN(6)]
			case mysqlsource.Varchar64:
				row[j] = text()
			case mysqlsource.Longtext:
				row[j] = strings.Repeat(text(), rng.IntN(40))
			case mysqlsource.JSON:
				row[j] = fmt.Sprintf(`{"k":%q,"n":%d,"f":%g,"a":[1,"x",null,true],"o":{"z":%d}}`, text(), rng.Int64(), rng.Float64()*1e6, rng.IntN(100))
			case mysqlsource.Datetime3:
				row[j] = time.Date(1000+rng.IntN(9000), time.Month(1+rng.IntN(12)), 1+rng.IntN(28), rng.IntN(24), rng.IntN(60),
					rng.IntN(60), rng.IntN(1000)*int(time.Millisecond), time.UTC)
			}
		}
		rows[i] = row
	}
	return rows
}

func lastRune(s string) (rune, int) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i]&0xc0 != 0x80 {
			return rune(s[i]), len(s) - i
		}
	}
	return 0, 1
}

// rawEvent is one event of a stream as go-mysql's syncer handed it on in
// raw mode.
type rawEvent struct {
	header replication.EventHeader
	data   []byte
}

// readDouble reads p's binlog from its start with go-mysql's syncer in raw
// mode, as the Reader does, until xids XID, XA and standalone ends have
// come (a transaction's end each).
func readDouble(t *testing.T, p *mysqlsource.Primary, ends int) []rawEvent {
	t.Helper()
	syncer := p.RawSyncer(77)
	defer syncer.Close()
	set, _ := ParseSet(mysql.MySQLFlavor, "")
	stream, err := syncer.StartSyncGTID(set)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out []rawEvent
	for ends > 0 {
		ev, err := stream.GetEvent(ctx)
		if err != nil {
			t.Fatalf("read the double's binlog (%d ends to go): %v", ends, err)
		}
		if ev.Header.EventType == replication.HEARTBEAT_EVENT || ev.Header.EventType == replication.HEARTBEAT_LOG_EVENT_V2 {
			continue
		}
		if ev.Header.EventType == replication.ROTATE_EVENT && ev.Header.Timestamp == 0 {
			continue // the server's fake rotate: the syncer decoded it, nothing to compare
		}
		switch ev.Header.EventType {
		case replication.XID_EVENT, replication.XA_PREPARE_LOG_EVENT, replication.TRANSACTION_PAYLOAD_EVENT:
			ends--
		case replication.QUERY_EVENT:
			if q := string(ev.RawData); !strings.Contains(q, "BEGIN") && !strings.Contains(q, "XA START") && !strings.Contains(q, "XA END") {
				ends-- // a standalone statement (DDL)
			}
		}
		out = append(out, rawEvent{header: *ev.Header, data: append([]byte(nil), ev.RawData...)})
	}
	return out
}
