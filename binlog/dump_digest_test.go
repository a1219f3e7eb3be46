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
