package debezium

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/router"
)

// A scripted binlog: MariaDB transactions 0-1-1, 0-1-2, ... each with
// outbox rows (event ids t<seq>r<n>), walked from 0-1-0 as DoWalk walks the
// reader's events.

type scriptTx struct {
	rows  int    // outbox rows
	other bool   // a transaction of other tables only (no rows)
	agg   string // aggregate type of its rows ("alarm" unless set)
	// partial: its last rows event is a partial image without event_type
	// (binlog_row_image MINIMAL), as the reader hands it on.
	partial bool
}

var outboxColumns = []string{"event_id", "aggregate_type", "aggregate_id", "event_type", "payload", "created_at"}

func scriptedWalk(t *testing.T, txs []scriptTx, claim func(seq int) bool, keep int) *Walk {
	t.Helper()
	cfg := config.Default()
	cfg.Name = "p"
	rt, err := clients.TableRouter(cfg, cfg.Router.For("app.outbox"), "app.outbox")
	if err != nil {
		t.Fatal(err)
	}
	srv := &binlog.Server{Flavor: "mariadb"}
	o := WalkOptions{Server: srv, From: "0-1-0", Head: fmt.Sprintf("0-1-%d", len(txs)), Routers: map[string]*router.Router{"app.outbox": rt},
		Place: func(topic string) (int32, error) { return 3, nil }, MaxRows: 1000, Keep: keep}
	w := &Walk{From: o.From, End: o.From}
	head, _ := binlog.ParseSet("mariadb", o.Head)
	s := &walkState{o: o, w: w, before: o.From, head: head, places: map[string]int32{}}
	table := &binlog.Table{Schema: "app", Name: "outbox", Columns: outboxColumns}
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, tx := range txs {
		seq := i + 1
		gtid := fmt.Sprintf("0-1-%d", seq)
		if !tx.other && tx.rows > 0 {
			agg := tx.agg
			if agg == "" {
				agg = "alarm"
			}
			var rows [][]any
			for n := 1; n <= tx.rows; n++ {
				rows = append(rows, []any{fmt.Sprintf("t%dr%d", seq, n), agg, fmt.Sprintf("dev-%d", n%4), "AlarmCreated", []byte("{}"), "2025-01-02 03:04:05"})
			}
			// Two rows events per transaction when it has more than one row.
			half := len(rows) / 2
			for i, part := range [][][]any{rows[:half], rows[half:]} {
				if len(part) == 0 {
					continue
				}
				ev := binlog.Event{Kind: binlog.KindRows, GTID: gtid, Table: table, Op: binlog.OpInsert, Rows: part, Time: at}
				if tx.partial && i == 1 {
					img := &binlog.PartialImage{Columns: []int{0, 1, 2, 4, 5}}
					for _, row := range part {
						img.Rows = append(img.Rows, append(slices.Clone(row[:3]), row[4:]...))
					}
					ev.Rows, ev.Image, ev.Absent = nil, img, []string{"event_type"}
				}
				if err := s.event(&ev); err != nil {
					t.Fatal(err)
				}
			}
		}
		set, _ := binlog.ParseSet("mariadb", gtid)
		// The claim by file and position: at this commit's end when the
		// script says it covers it, else before it.
		pos := uint32(1000 + seq)
		s.o.Claim = Claim{File: "mysql-bin.000001", Pos: pos - 1}
		if claim(seq) {
			s.o.Claim.Pos = pos
		}
		commit := binlog.Event{Kind: binlog.KindCommit, GTID: gtid, Set: set, Time: at, File: "mysql-bin.000001", Pos: pos}
		if !tx.other && tx.rows > 0 {
			commit.Digest = &binlog.TxDigest{Tables: []string{"app.outbox"}, Rows: tx.rows, Sum: "x:" + gtid}
		}
		if err := s.event(&commit); err != nil {
			t.Fatal(err)
		}
		at = at.Add(time.Second)
	}
	if !s.done {
		t.Fatal("the walk did not end at the head")
	}
	return w
}

// published marks event ids present in Kafka where the relay places them.
func published(w *Walk, ids ...string) map[string]Found {
	found := map[string]Found{}
	for _, id := range ids {
		for _, r := range w.Rows {
			if r.EventID == id {
				found[id] = Found{Topic: r.Topic, Partition: r.Partition, Count: 1}
			}
		}
	}
	return found
}

func ids(prefix string, seq, from, to int) []string {
	var out []string
	for n := from; n <= to; n++ {
		out = append(out, fmt.Sprintf("%s%dr%d", prefix, seq, n))
	}
	return out
}

func cat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

func TestTranslateFindsTheNextRowAfterKafkasRecords(t *testing.T) {
	// 1: 2 rows, 2: none (other tables), 3: 3 rows, 4: 4 rows, 5: 1 row.
	script := []scriptTx{{rows: 2}, {other: true}, {rows: 3}, {rows: 4}, {rows: 1}}
	upTo := func(n int) func(int) bool { return func(seq int) bool { return seq <= n } }
	for _, c := range []struct {
		name      string
		claim     func(int) bool
		off       Offset
		present   []string
		position  string
		partial   string // gtid:rows
		first     string
		anomaly   string
		note      string
		published int
	}{
		{name: "at a boundary, Kafka agrees", claim: upTo(3), off: Offset{File: "mysql-bin.000001", Pos: 1003},
			present: cat(ids("t", 1, 1, 2), ids("t", 3, 1, 3)), position: "0-1-3", first: "t4r1", note: "Kafka's records end where Debezium's offset is", published: 5},
		{name: "stopped inside a transaction", claim: upTo(3), off: Offset{File: "mysql-bin.000001", Pos: 1003, Event: 3, Row: 1},
			present: cat(ids("t", 1, 1, 2), ids("t", 3, 1, 3), ids("t", 4, 1, 2)), position: "0-1-3", partial: "0-1-4:2", first: "t4r3",
			note: "Debezium stopped inside transaction 0-1-4 (offset: file mysql-bin.000001 pos 1003, event 3, row 1): 2 of its 4 outbox rows are published", published: 7},
		{name: "the offset inside a transaction after its last row", claim: upTo(3), off: Offset{File: "mysql-bin.000001", Pos: 1003, Row: 4},
			present: cat(ids("t", 1, 1, 2), ids("t", 3, 1, 3), ids("t", 4, 1, 4)), position: "0-1-4", first: "t5r1",
			note: "Debezium's offset (file mysql-bin.000001 pos 1003, event 0, row 4) is inside transaction 0-1-4, after its last outbox row: all 4 are published", published: 9},
		{name: "one row of a transaction published", claim: upTo(3), off: Offset{File: "f", Event: 2},
			present: cat(ids("t", 1, 1, 2), ids("t", 3, 1, 3), ids("t", 4, 1, 1)), position: "0-1-3", partial: "0-1-4:1", first: "t4r2", published: 6},
		{name: "Kafka ahead of an offset at a boundary by one whole transaction", claim: upTo(3), off: Offset{File: "mysql-bin.000001", Pos: 1003},
			present: cat(ids("t", 1, 1, 2), ids("t", 3, 1, 3), ids("t", 4, 1, 4)), position: "0-1-4", first: "t5r1",
			note: "Kafka holds 4 rows past Debezium's committed offset", published: 9},
		{name: "Kafka ahead of the offset by whole transactions", claim: upTo(1), off: Offset{File: "f"},
			present: cat(ids("t", 1, 1, 2), ids("t", 3, 1, 3), ids("t", 4, 1, 4)), position: "0-1-4", first: "t5r1",
			note: "Kafka holds 7 rows past Debezium's committed offset", published: 9},
		{name: "everything published", claim: upTo(5), off: Offset{File: "f"}, present: cat(ids("t", 1, 1, 2), ids("t", 3, 1, 3), ids("t", 4, 1, 4), ids("t", 5, 1, 1)),
			position: "0-1-5", published: 10},
		{name: "nothing published from the start of the file", claim: upTo(0), off: Offset{File: "f"}, position: "0-1-0", first: "t1r1",
			anomaly: `nothing in Kafka proves the position: none of the 10 outbox rows from "0-1-0" to the source's head has a record in outbox.event.alarm`, published: 0},
		{name: "a gap: a row published after one that is not", claim: upTo(3), off: Offset{File: "f"},
			present: cat(ids("t", 1, 1, 2), ids("t", 3, 1, 3), ids("t", 4, 2, 2)), position: "0-1-3", first: "t4r1",
			anomaly: `records are not a prefix of the binlog: event "t4r1" (GTID 0-1-4, row 1 of its outbox rows, app.outbox) has no record, yet rows after it have: event "t4r2"`, published: 5},
		{name: "the offset covers rows Kafka lacks", claim: upTo(4), off: Offset{File: "f", Pos: 1004},
			present: cat(ids("t", 1, 1, 2), ids("t", 3, 1, 3)), position: "0-1-3", first: "t4r1",
			anomaly: `Debezium's offset (file f pos 1004) covers event "t4r1" (GTID 0-1-4, row 1 of its outbox rows, app.outbox), whose record is not in outbox.event.alarm`, published: 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := scriptedWalk(t, script, c.claim, 1000)
			res := Translate(w, published(w, c.present...), c.off)
			if res.Published != c.published || res.Position != c.position {
				t.Fatalf("published %d at %s, want %d at %s (%+v)", res.Published, res.Position, c.published, c.position, res)
			}
			partial := ""
			if res.Partial != nil {
				partial = fmt.Sprintf("%s:%d", res.Partial.GTID, res.Partial.Rows)
			}
			first := ""
			if res.First != nil {
				first = res.First.EventID
			}
			if partial != c.partial || first != c.first {
				t.Fatalf("partial %q first %q, want %q %q", partial, first, c.partial, c.first)
			}
			all := strings.Join(res.Anomalies, "\n")
			if (c.anomaly == "") != (all == "") || !strings.Contains(all, c.anomaly) {
				t.Fatalf("anomalies %q, want %q", all, c.anomaly)
			}
			if notes := strings.Join(res.Notes, "\n"); !strings.Contains(notes, c.note) {
				t.Fatalf("notes %q, want %q", notes, c.note)
			}
			if res.Walked != 10 {
				t.Fatalf("walked %d rows", res.Walked)
			}
			// The fingerprint is the last transaction with outbox rows the
			// position covers, as the relay records it.
			wantFP := map[string]string{"0-1-0": "", "0-1-3": "0-1-3 after 0-1-2", "0-1-4": "0-1-4 after 0-1-3", "0-1-5": "0-1-5 after 0-1-4"}[res.Position]
			gotFP := ""
			if fp := res.Fingerprint; fp != nil {
				gotFP = fp.GTID + " after " + fp.Before
				if fp.Digest != "x:"+fp.GTID || fp.Rows == 0 {
					t.Fatalf("fingerprint %+v", fp)
				}
			}
			if gotFP != wantFP {
				t.Fatalf("fingerprint %q, want %q", gotFP, wantFP)
			}
		})
	}
}

// A transaction whose binlog image of an outbox row lacks columns
// (binlog_row_image MINIMAL): its rows count and their event ids are
// looked up like any other's. Debezium stopped before such a row: the
// position is just before it (the relay stops there, which a note says);
// it published it: the position is past it. The walk passed over the
// partial image as if it held no row, and the position was past it
// whether or not Debezium had published it: the row was lost, silently.
func TestTranslateStopsBeforeARowLoggedWithoutAllItsColumns(t *testing.T) {
	script := []scriptTx{{rows: 2}, {rows: 2, partial: true}, {rows: 1}}
	for _, c := range []struct {
		name     string
		present  []string
		position string
		partial  string
		first    string
		note     string
	}{
		{name: "Debezium stopped before the partial image", present: []string{"t1r1", "t1r2", "t2r1"}, position: "0-1-1", partial: "0-1-2:1",
			first: "t2r2", note: `the first row the relay would publish, event "t2r2" (GTID 0-1-2, row 2 of its outbox rows, app.outbox, whose ` +
				"binlog image lacks column(s) event_type), was logged without all its columns: the relay stops at transaction 0-1-2"},
		{name: "Debezium published the partial image", present: []string{"t1r1", "t1r2", "t2r1", "t2r2"}, position: "0-1-2", first: "t3r1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := scriptedWalk(t, script, func(seq int) bool { return seq <= 1 }, 1000)
			res := Translate(w, published(w, c.present...), Offset{File: "f", Event: 2, Row: 1})
			partial := ""
			if res.Partial != nil {
				partial = fmt.Sprintf("%s:%d", res.Partial.GTID, res.Partial.Rows)
			}
			if res.Walked != 5 || res.Position != c.position || partial != c.partial || res.First == nil || res.First.EventID != c.first ||
				len(res.Anomalies) > 0 {
				t.Fatalf("walked %d rows, position %s partial %q, first %+v, anomalies %q; want 5 rows, %s %q, first %s",
					res.Walked, res.Position, partial, res.First, res.Anomalies, c.position, c.partial, c.first)
			}
			if notes := strings.Join(res.Notes, "\n"); !strings.Contains(notes, c.note) {
				t.Fatalf("notes %q, want %q", notes, c.note)
			}
		})
	}
}

func TestTranslateRefusesRecordsWhereTheRelayDoesNotPlaceThem(t *testing.T) {
	w := scriptedWalk(t, []scriptTx{{rows: 2}, {rows: 1}}, func(seq int) bool { return seq <= 1 }, 1000)
	found := published(w, "t1r1", "t1r2")
	f := found["t1r2"]
	f.Partition = (f.Partition + 1) % 3
	found["t1r2"] = f
	res := Translate(w, found, Offset{File: "f"})
	if len(res.Anomalies) != 1 || !strings.Contains(res.Anomalies[0], `records are not where the relay places them`) ||
		!strings.Contains(res.Anomalies[0], fmt.Sprintf(`event "t1r2" (GTID 0-1-1, row 2 of its outbox rows, app.outbox) is in outbox.event.alarm[%d], the relay places it in outbox.event.alarm[%d]`, f.Partition, w.Rows[1].Partition)) {
		t.Fatalf("%q", res.Anomalies)
	}
}

func TestTranslateNotesDuplicatesAndKeepsTheTailBeforeTheOffset(t *testing.T) {
	// 30 transactions of 5 rows before the offset, keep 10 of their rows.
	script := make([]scriptTx, 32)
	for i := range script {
		script[i] = scriptTx{rows: 5}
	}
	w := scriptedWalk(t, script, func(seq int) bool { return seq <= 30 }, 10)
	if len(w.Rows) > 30 || w.Dropped+len(w.Rows) != 160 || w.Rows[len(w.Rows)-11].Tx.GTID != "0-1-30" {
		t.Fatalf("kept %d rows, dropped %d", len(w.Rows), w.Dropped)
	}
	var present []string
	for _, r := range w.Rows[:len(w.Rows)-7] { // through t31r3
		present = append(present, r.EventID)
	}
	found := published(w, present...)
	f := found["t30r5"]
	f.Count = 2
	found["t30r5"] = f
	res := Translate(w, found, Offset{File: "f", Event: 4, Row: 0})
	if res.Position != "0-1-30" || res.Partial == nil || *res.Partial != (checkpoint.Partial{GTID: "0-1-31", Rows: 3}) || res.First.EventID != "t31r4" || res.Last.EventID != "t31r3" || len(res.Anomalies) != 0 {
		t.Fatalf("%+v", res)
	}
	notes := strings.Join(res.Notes, "\n")
	if !strings.Contains(notes, "1 of the published rows have more than one record") || !strings.Contains(notes, "Debezium stopped inside transaction 0-1-31") {
		t.Fatalf("notes %q", notes)
	}
}

func TestTranslateRefusesAnOffsetThatSkipsTransactions(t *testing.T) {
	w := scriptedWalk(t, []scriptTx{{rows: 1}, {rows: 1}, {rows: 1}}, func(seq int) bool { return seq == 1 || seq == 3 }, 1000)
	res := Translate(w, published(w, "t1r1"), Offset{File: "f"})
	if w.Disorder != "0-1-3" || !strings.Contains(strings.Join(res.Anomalies, "\n"), "covers transaction 0-1-3 but not one before it") {
		t.Fatalf("disorder %q anomalies %q", w.Disorder, res.Anomalies)
	}
}

func TestComparePos(t *testing.T) {
	for _, c := range []struct {
		fa   string
		pa   uint32
		fb   string
		pb   uint32
		want int
	}{
		{"mysql-bin.000009", 900, "mysql-bin.000010", 4, -1},
		{"mysql-bin.000010", 4, "mysql-bin.000009", 900, 1},
		{"mysql-bin.999999", 4, "mysql-bin.1000000", 4, -1},
		{"mysql-bin.000003", 5, "mysql-bin.000003", 5, 0},
		{"mysql-bin.000003", 6, "mysql-bin.000003", 5, 1},
	} {
		if got := comparePos(c.fa, c.pa, c.fb, c.pb); got != c.want {
			t.Errorf("%s:%d vs %s:%d = %d, want %d", c.fa, c.pa, c.fb, c.pb, got, c.want)
		}
	}
}

func TestClaimCoversByGTIDSetElseByPosition(t *testing.T) {
	set, _ := binlog.ParseSet("mysql", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-77")
	byGTID := Claim{Set: set, File: "binlog.000001", Pos: 4}
	if !byGTID.covers("mysql", "3e11fa47-71ca-11e1-9e33-c80aa9429562:77", "binlog.000009", 100) ||
		byGTID.covers("mysql", "3e11fa47-71ca-11e1-9e33-c80aa9429562:78", "binlog.000001", 4) {
		t.Fatal("a claim with a GTID set decides by it, not by position")
	}
	byPos := Claim{File: "binlog.000002", Pos: 500}
	if !byPos.covers("mysql", "x:1", "binlog.000002", 500) || byPos.covers("mysql", "x:1", "binlog.000002", 501) ||
		!byPos.covers("mysql", "x:1", "binlog.000001", 9000) || byPos.covers("mysql", "x:1", "", 0) {
		t.Fatal("a claim by position covers commits ending at or before it")
	}
}
