package binlog

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// The proof's read of one transaction (Dump.Digest) ends by itself
// whatever the server sends: a server that streams endless transactions
// other than the one asked for, or one transaction whose rows never end,
// is answered within the caller's bound, holding nothing but one digest.

// feed streams ev(i) for i = 0, 1, ... into s until the returned stop is
// called.
func feed(s *replication.BinlogStreamer, ev func(i int) *replication.BinlogEvent) (stop func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			if s.AddEventToStreamer(ev(i)) != nil {
				return
			}
		}
	}()
	return func() {
		s.AddErrorToStreamer(errors.New("stop"))
		<-done
	}
}

func event(e replication.Event) *replication.BinlogEvent {
	return &replication.BinlogEvent{Header: &replication.EventHeader{Timestamp: 1}, Event: e}
}

var proofSID = []byte{0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42, 0x95, 0x00}

// MySQL: transactions that are not the one asked for, without end: not
// found after reorderedLimit of them.
func TestProofReadOfEndlessOtherTransactionsEndsNotFound(t *testing.T) {
	s := replication.NewBinlogStreamerWithChanSize(16)
	stop := feed(s, func(i int) *replication.BinlogEvent {
		if i%2 == 0 {
			return event(&replication.GTIDEvent{SID: proofSID, GNO: int64(1000 + i)})
		}
		return event(&replication.XIDEvent{XID: uint64(i)})
	})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := &Dump{decode: func(db, table []byte) bool { return true }}
	dg, found, err := d.Digest(ctx, &DumpStream{s: s, p: newEventParser(mysql.MySQLFlavor, nil, nil, nil)}, "3e11fa47-71ca-11e1-9e33-c80aa9429500:5")
	if err != nil || found || dg != nil {
		t.Fatalf("endless other transactions: %+v, found %v, %v; want not found", dg, found, err)
	}
}

// MariaDB: endless transactions of another domain (which a host may send
// between the start and the transaction asked for), and one transaction
// whose events never end: the read ends with the caller's bound.
func TestProofReadOfEndlessStreamEndsAtTheBound(t *testing.T) {
	for name, ev := range map[string]func(i int) *replication.BinlogEvent{
		"other domain": func(i int) *replication.BinlogEvent {
			if i%2 == 0 {
				return event(&replication.MariadbGTIDEvent{GTID: mysql.MariadbGTID{DomainID: 7, ServerID: 1, SequenceNumber: uint64(i)}})
			}
			return event(&replication.XIDEvent{XID: uint64(i)})
		},
		"rows without end": func(i int) *replication.BinlogEvent {
			if i == 0 {
				return event(&replication.MariadbGTIDEvent{GTID: mysql.MariadbGTID{DomainID: 0, ServerID: 1, SequenceNumber: 5}})
			}
			tm := typedMap("app", "outbox", mysql.MYSQL_TYPE_LONG)
			return &replication.BinlogEvent{Header: &replication.EventHeader{Timestamp: 1, EventType: replication.WRITE_ROWS_EVENTv1},
				Event: &replication.RowsEvent{Table: tm, Rows: [][]any{{int32(i)}}}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := replication.NewBinlogStreamerWithChanSize(16)
			stop := feed(s, ev)
			defer stop()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			d := &Dump{decode: func(db, table []byte) bool { return true }}
			began := time.Now()
			_, _, err := d.Digest(ctx, &DumpStream{s: s, p: newEventParser(mysql.MariaDBFlavor, nil, nil, nil)}, "0-1-5")
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("endless stream: %v, want the bound's end", err)
			}
			if took := time.Since(began); took > 5*time.Second {
				t.Fatalf("the read ended %s after its bound of 300ms", took)
			}
		})
	}
}

// The proof's read of a transaction with a partial INSERT image digests it
// as the Reader does (neither digests what a partial image holds: a replica
// logs its own row image): the same digest from both. The read digested
// the columns the image holds, by the table's column types, and a
// transaction the Reader had fingerprinted read otherwise on any host.
func TestProofDigestOfAPartialImageIsTheReaders(t *testing.T) {
	for _, flavor := range flavors {
		t.Run(flavor, func(t *testing.T) {
			s := &script{encoder: newEncoder(t, flavor)}
			s.begin(1).insert(testTable, 2)
			s.add(s.tableMap(testTable), s.imageEvent(OpInsert, testTable, 0b01, 1, false))
			s.xid()
			f := newFixture(t, flavor)
			var batch []Event
			for _, ev := range s.evs {
				f.sync.stamp(ev)
				var err error
				if batch, err = f.r.convert(f.st, ev, batch); err != nil {
					t.Fatal(err)
				}
			}
			read := batch[len(batch)-1].Digest
			st := replication.NewBinlogStreamerWithChanSize(len(s.evs))
			for _, ev := range s.evs {
				if err := st.AddEventToStreamer(ev); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			d := &Dump{decode: func(db, table []byte) bool { return string(db)+"."+string(table) == testTable }}
			dg, found, err := d.Digest(ctx, &DumpStream{s: st, p: newEventParser(flavor, nil, nil, nil)}, gtidOfN(flavor, 1))
			if err != nil || !found || read == nil || dg == nil || dg.Sum != read.Sum || dg.Rows != read.Rows || dg.Rows != 2 {
				t.Fatalf("proof read %+v (found %v, %v), Reader %+v; want the same digest of the 2 whole rows", dg, found, err, read)
			}
		})
	}
}
