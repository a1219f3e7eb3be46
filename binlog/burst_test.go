package binlog

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/internal/hostiledb"
	"github.com/outbox-relay/outbox-relay/schema"
)

// A stream that ends in the same read of the socket as the transactions
// before its end (a server flushes its last events and the error that ends
// the stream together; an event go-mysql's syncer cannot take; one the
// reader refuses) still hands on those transactions, before Run returns
// the end: the relay commits what ended before it, never drops it in
// favour of the error.
func TestRunHandsOnTheTransactionsReadWithTheStreamsEnd(t *testing.T) {
	for _, c := range []struct {
		name string
		end  func(e *encoder) []byte
		want func(error) bool
	}{
		{"the server's error", func(*encoder) []byte {
			return append([]byte{0xff, 0xd4, 0x04}, "#HY000log event entry exceeded max_allowed_packet; Increase max_allowed_packet on source"...)
		}, func(err error) bool { return errors.Is(err, ErrPacketTooLarge) }},
		{"an event whose header misstates its size", func(e *encoder) []byte {
			raw := e.xidEvent().RawData
			binary.LittleEndian.PutUint32(raw[9:], uint32(len(raw)+10))
			return append([]byte{0}, raw...)
		}, func(err error) bool { return err != nil && !errors.Is(err, context.DeadlineExceeded) }},
		{"an event the reader refuses", func(e *encoder) []byte {
			return append([]byte{0}, e.raw(replication.TABLE_MAP_EVENT,
				withOptional(wideTableMap(1), replication.TABLE_MAP_OPT_META_ENUM_STR_VALUE, enumLists(1, 1<<34)))...)
		}, func(err error) bool { return errors.Is(err, ErrMalformedEvent) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEncoder(t, mysql.MySQLFlavor)
			event := func(raw []byte) []byte { return append([]byte{0}, raw...) }
			srv := hostiledb.StartScript(t, hostiledb.Script{Plugin: pluginNative, Steps: []hostiledb.Step{hostiledb.Read, hostiledb.OK},
				Binlog: [][]byte{event(e.raw(replication.FORMAT_DESCRIPTION_EVENT, e.fde())), event(e.mysqlGTID(testSID, 1).RawData),
					event(e.raw(replication.QUERY_EVENT, e.query("", "BEGIN"))), event(e.tableMap(testTable).RawData),
					event(e.rowsEvent(OpInsert, testTable, 1).RawData), event(e.xidEvent().RawData), c.end(e)}})
			cfg := guardConfig(srv.Addr)
			cfg.Tables = []string{testTable}
			r := NewReader(cfg, &Server{Addr: srv.Addr, Flavor: mysql.MySQLFlavor, ColumnNames: true},
				schema.New(cfg.Tables, nil, nil), slog.New(slog.NewTextHandler(io.Discard, nil)))
			out := make(chan []Event, 16)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			err := r.Run(ctx, "", out)
			if !c.want(err) {
				t.Fatalf("run: %v", err)
			}
			var got []string
			for len(out) > 0 {
				got = append(got, renderAll(<-out)...)
			}
			if len(got) != 2 || got[1] != "commit "+testSID+":1 set="+testSID+":1" {
				t.Fatalf("handed on before the stream's end (%v): %q, want the transaction's rows and commit", err, got)
			}
		})
	}
}
