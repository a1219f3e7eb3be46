package binlog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"reflect"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/schema"
)

// Fuzz targets for the bytes the relay takes from a source server: the row
// images decodeInsertRows reads, and the event stream the framer cuts into
// transactions. Their seeds are the events of a binlog MariaDB 10.11 wrote
// (testdata/mariadb-10.11-shapes.binlog); `go test` runs the seeds, `make
// fuzz` fuzzes each target for a while (FUZZTIME).

const shapesBinlog = "testdata/mariadb-10.11-shapes.binlog"

// protect runs fn and turns a panic into an error.
func protect(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return fn()
}

// FuzzDecodeInsertRows replaces the row images of a recorded INSERT event
// with the fuzzer's bytes: the fast decoder never panics, and whatever it
// accepts go-mysql decodes without error to the same values.
func FuzzDecodeInsertRows(f *testing.F) {
	raw := rawEvents(f, shapesBinlog)
	type insert struct {
		before []*replication.BinlogEvent
		data   []byte
		head   int
	}
	var inserts []insert
	for i, ev := range raw {
		if ev.Header.EventType != replication.WRITE_ROWS_EVENTv1 && ev.Header.EventType != replication.WRITE_ROWS_EVENTv2 {
			continue
		}
		head, err := rowsHeaderOffset(raw[:i], ev.RawData)
		if err != nil {
			f.Fatal(err)
		}
		inserts = append(inserts, insert{before: raw[:i], data: ev.RawData, head: head})
		start := replication.EventHeaderSize + head
		f.Add(uint8(len(inserts)-1), bytes.Clone(ev.RawData[start:len(ev.RawData)-replication.BinlogChecksumLength]))
	}
	if len(inserts) == 0 {
		f.Fatal("no INSERT event in " + shapesBinlog)
	}
	f.Fuzz(func(t *testing.T, which uint8, images []byte) {
		in := inserts[int(which)%len(inserts)]
		start := replication.EventHeaderSize + in.head
		data := append(append(bytes.Clone(in.data[:start]), images...), in.data[len(in.data)-replication.BinlogChecksumLength:]...)
		binary.LittleEndian.PutUint32(data[9:], uint32(len(data)))
		var want RowsDecode
		var wantErr error
		if protect(func() error { want, wantErr = parseOne(in.before, data, false); return nil }) != nil {
			t.Skip("go-mysql itself panics on these row images")
		}
		var got RowsDecode
		var gotErr error
		if err := protect(func() error { got, gotErr = parseOne(in.before, data, true); return nil }); err != nil {
			t.Fatalf("the reader's rows decoder %v, go-mysql alone does not", err)
		}
		if got.Fast {
			if wantErr != nil {
				t.Fatalf("fast decoder accepted row images go-mysql refuses (%v): %s", wantErr, dump(got.Rows))
			}
			if !reflect.DeepEqual(want.Rows, got.Rows) || !reflect.DeepEqual(want.Skipped, got.Skipped) {
				t.Fatalf("fast decoder differs\n go-mysql: %s\n     fast: %s", dump(want.Rows), dump(got.Rows))
			}
			return
		}
		if (wantErr == nil) != (gotErr == nil) || !reflect.DeepEqual(want.Rows, got.Rows) {
			t.Fatalf("declined images: go-mysql %v / %s, through the reader %v / %s", wantErr, dump(want.Rows), gotErr, dump(got.Rows))
		}
	})
}

// rowsHeaderOffset is rowsHeaderLen for a fuzz target's setup.
func rowsHeaderOffset(before []*replication.BinlogEvent, data []byte) (int, error) {
	p := replication.NewBinlogParser()
	p.SetFlavor(mysql.MariaDBFlavor)
	head := -1
	p.SetRowsEventDecodeFunc(func(e *replication.RowsEvent, data []byte) error {
		pos, err := e.DecodeHeader(data)
		head = pos
		return err
	})
	for _, ev := range before {
		if _, ok := ev.Event.(*replication.RowsEvent); !ok {
			if _, err := p.Parse(ev.RawData); err != nil {
				return 0, err
			}
		}
	}
	if _, err := p.Parse(data); err != nil || head < 0 {
		return 0, fmt.Errorf("rows event header: %v", err)
	}
	return head, nil
}

// FuzzFramer feeds the framer a stream built from the recorded binlog's
// events in the order the fuzzer picks (each byte of ops one event; 0xff a
// statement with the fuzzer's text): it never panics, and every rows event
// it emits belongs to the transaction that the next commit, prepare or
// rollback it emits closes.
func FuzzFramer(f *testing.F) {
	raw := rawEvents(f, shapesBinlog)
	var setup [][]byte // format description and table maps: parsed first, every time
	var captured []string
	for _, ev := range raw {
		switch e := ev.Event.(type) {
		case *replication.FormatDescriptionEvent:
			setup = append(setup, ev.RawData)
		case *replication.TableMapEvent:
			setup = append(setup, ev.RawData)
			if t := string(e.Schema) + "." + string(e.Table); t == "a.outbox" || t == "a.alarm" {
				captured = append(captured, t)
			}
		}
	}
	inOrder := make([]byte, 0, len(raw))
	for i := range raw {
		inOrder = append(inOrder, byte(i))
	}
	f.Add(inOrder, "")
	f.Add(inOrder[len(inOrder)/2:], "GRANT SELECT ON a.outbox TO u IDENTIFIED BY 'pw'")
	f.Add([]byte{0xff}, "XA START 'x'")
	f.Add(append([]byte{0xff}, inOrder[10:40]...), "/* c */ BEGIN")
	f.Add([]byte{0xff, 0xff}, "INSERT INTO a.outbox VALUES (1)")
	f.Fuzz(func(t *testing.T, ops []byte, q string) {
		if len(ops) > 256 {
			ops = ops[:256]
		}
		p := replication.NewBinlogParser()
		p.SetFlavor(mysql.MariaDBFlavor)
		for _, b := range setup {
			if _, err := p.Parse(b); err != nil {
				t.Fatal(err)
			}
		}
		enc := newEncoder(t, mysql.MariaDBFlavor)
		r := NewReader(Config{Tables: captured}, &Server{Flavor: mysql.MariaDBFlavor, ColumnNames: true},
			schema.New(captured, nil, nil), nil)
		st := &streamState{tableCache: map[uint64]*cachedTable{}, frame: r.newFramer()}
		sync := newSyncer(t, mysql.MariaDBFlavor)
		var batch []Event
		err := protect(func() error {
			for _, op := range ops {
				var ev *replication.BinlogEvent
				if op == 0xff {
					var err error
					if ev, err = enc.p.Parse(enc.raw(replication.QUERY_EVENT, enc.query("a", q))); err != nil {
						continue
					}
				} else {
					var err error
					if ev, err = p.Parse(raw[int(op)%len(raw)].RawData); err != nil {
						continue // a rows event go-mysql cannot decode here
					}
				}
				sync.stamp(ev)
				var err error
				if batch, err = r.convert(st, ev, batch); err != nil {
					return nil // refused: the relay stops there
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("the framer %v", err)
		}
		var open []Event
		for _, ev := range batch {
			switch ev.Kind {
			case KindRows:
				open = append(open, ev)
			case KindCommit, KindPrepare, KindRollback:
				for _, rows := range open {
					if rows.GTID != ev.GTID {
						t.Fatalf("rows of %s (%s) closed by the %s of %s", rows.GTID, rows.Table, kindNames[ev.Kind], ev.GTID)
					}
				}
				open = open[:0]
			}
		}
	})
}
