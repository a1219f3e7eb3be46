package audit

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// script builds binlog events of app.outbox (primary key id) and app.nokey
// (none): rows are "insert GTID id..." (XID after a slash: "insert
// 0-1-11/x 7"), commits "commit GTID" (or "commit GTID/x" for an XA
// COMMIT), "prepare GTID/x", "rollback GTID/x", "update GTID id",
// "nokey GTID", "minimal GTID id..." (an INSERT image without event_id, as
// the reader hands on a partial image), "heartbeat". A transaction's commit time is its sequence
// number in minutes.
func script(t *testing.T, lines ...string) []binlog.Event {
	t.Helper()
	outbox := &binlog.Table{Schema: "app", Name: "outbox", Columns: []string{"ID", "event_id"}}
	nokey := &binlog.Table{Schema: "app", Name: "nokey", Columns: []string{"event_id"}}
	var out []binlog.Event
	set := "0-1-0"
	for _, l := range lines {
		f := strings.Fields(l)
		verb := f[0]
		if verb == "heartbeat" {
			out = append(out, binlog.Event{Kind: binlog.KindHeartbeat})
			continue
		}
		gtid, xid, _ := strings.Cut(f[1], "/")
		ids := f[2:]
		seq, _ := strconv.Atoi(strings.TrimPrefix(gtid, "0-1-"))
		at := t0.Add(time.Duration(seq) * time.Minute)
		ev := binlog.Event{GTID: gtid, XID: xid, Time: at}
		switch verb {
		case "minimal":
			ev.Kind, ev.Op, ev.Table, ev.Absent = binlog.KindRows, binlog.OpInsert, outbox, []string{"event_id"}
			ev.Image = &binlog.PartialImage{Columns: []int{0}}
			for _, id := range ids {
				n, _ := strconv.ParseInt(id, 10, 64)
				ev.Image.Rows = append(ev.Image.Rows, []any{n})
			}
		case "insert", "update", "nokey":
			ev.Kind, ev.Op, ev.Table = binlog.KindRows, binlog.OpInsert, outbox
			if verb == "update" {
				ev.Op = binlog.OpUpdate
			}
			if verb == "nokey" {
				ev.Table = nokey
				ev.Rows = [][]any{{"e"}}
			}
			for _, id := range ids {
				n, _ := strconv.ParseInt(id, 10, 64)
				ev.Rows = append(ev.Rows, []any{n, "e" + id})
			}
		case "commit", "prepare", "rollback":
			ev.Kind = map[string]binlog.Kind{"commit": binlog.KindCommit, "prepare": binlog.KindPrepare, "rollback": binlog.KindRollback}[verb]
			set = gtid
			s, err := binlog.ParseSet("mariadb", set)
			if err != nil {
				t.Fatal(err)
			}
			ev.Set = s
		default:
			t.Fatalf("script: %q", l)
		}
		out = append(out, ev)
	}
	return out
}

// key is the key of app.outbox's row with id n.
func key(n int) string { return string(appendKey(nil, "app.outbox", []byte(strconv.Itoa(n)))) }

func TestPastCollectsTheRowsOfTransactionsTheCheckpointDoesNotCover(t *testing.T) {
	cases := []struct {
		name    string
		cp      checkpoint.Checkpoint
		head    string
		events  []string
		want    map[int]int // row id -> commit minute
		unkeyed bool
		done    bool
	}{
		{name: "a transaction in the checkpoint's set is covered, one after it is not",
			cp: checkpoint.Checkpoint{GTIDSet: "0-1-10"}, head: "0-1-12",
			events: []string{"insert 0-1-11 1 2", "commit 0-1-11", "insert 0-1-12 3", "commit 0-1-12"},
			want:   map[int]int{1: 11, 2: 11, 3: 12}, done: true},
		{name: "a row outside the window is not kept",
			cp: checkpoint.Checkpoint{GTIDSet: "0-1-10"}, head: "0-1-11",
			events: []string{"insert 0-1-11 1 99", "commit 0-1-11"},
			want:   map[int]int{1: 11}, done: true},
		{name: "a transaction read again from before the checkpoint (XA resume) is covered",
			cp: checkpoint.Checkpoint{GTIDSet: "0-1-10"}, head: "0-1-11",
			events: []string{"insert 0-1-9 1", "commit 0-1-9", "insert 0-1-11 2", "commit 0-1-11"},
			want:   map[int]int{2: 11}, done: true},
		{name: "it stops at the transaction that completes head",
			cp: checkpoint.Checkpoint{GTIDSet: "0-1-10"}, head: "0-1-11",
			events: []string{"insert 0-1-11 1", "commit 0-1-11", "insert 0-1-12 2", "commit 0-1-12"},
			want:   map[int]int{1: 11}, done: true},
		{name: "the checkpoint's part of a split transaction is covered, the rest is not",
			cp: checkpoint.Checkpoint{GTIDSet: "0-1-10", Partial: &checkpoint.Partial{GTID: "0-1-11", Rows: 2}}, head: "0-1-11",
			events: []string{"insert 0-1-11 1 2", "insert 0-1-11 3", "commit 0-1-11"},
			want:   map[int]int{3: 11}, done: true},
		{name: "the checkpoint's part of an XA transaction committed in parts is covered: its rows count at its XA COMMIT",
			cp: checkpoint.Checkpoint{GTIDSet: "0-1-12", Partial: &checkpoint.Partial{GTID: "0-1-13", Rows: 2}}, head: "0-1-13",
			events: []string{"insert 0-1-11/x 1 2", "insert 0-1-11/x 3", "prepare 0-1-11/x", "commit 0-1-12", "commit 0-1-13/x"},
			want:   map[int]int{3: 13}, done: true},
		{name: "the checkpoint's part of a one-phase XA transaction is covered",
			cp: checkpoint.Checkpoint{GTIDSet: "0-1-10", Partial: &checkpoint.Partial{GTID: "0-1-11", Rows: 1}}, head: "0-1-11",
			events: []string{"insert 0-1-11/x 1 2", "commit 0-1-11/x"},
			want:   map[int]int{2: 11}, done: true},
		{name: "an XA transaction's rows are those of its XA COMMIT, at its time",
			cp: checkpoint.Checkpoint{GTIDSet: "0-1-10"}, head: "0-1-13",
			events: []string{"insert 0-1-11/x 1", "prepare 0-1-11/x", "commit 0-1-12", "commit 0-1-13/x"},
			want:   map[int]int{1: 13}, done: true},
		{name: "an XA transaction prepared before the checkpoint and committed in it is covered",
			cp: checkpoint.Checkpoint{GTIDSet: "0-1-12"}, head: "0-1-13",
			events: []string{"insert 0-1-11/x 1", "prepare 0-1-11/x", "commit 0-1-12/x", "insert 0-1-13 2", "commit 0-1-13"},
			want:   map[int]int{2: 13}, done: true},
		{name: "an XA transaction rolled back publishes nothing",
			cp: checkpoint.Checkpoint{GTIDSet: "0-1-10"}, head: "0-1-12",
			events: []string{"insert 0-1-11/x 1", "prepare 0-1-11/x", "rollback 0-1-12/x"},
			want:   map[int]int{}, done: true},
		{name: "a partial image's rows are keyed by the columns it holds: past the checkpoint, the relay stops at them",
			cp: checkpoint.Checkpoint{GTIDSet: "0-1-10", Partial: &checkpoint.Partial{GTID: "0-1-11", Rows: 1}}, head: "0-1-13",
			events: []string{"insert 0-1-11 1 2", "minimal 0-1-11 3 4", "commit 0-1-11", "minimal 0-1-12/x 5", "prepare 0-1-12/x",
				"commit 0-1-13/x"},
			want: map[int]int{2: 11, 3: 11, 4: 11, 5: 13}, done: true},
		{name: "an UPDATE publishes nothing",
			cp: checkpoint.Checkpoint{GTIDSet: "0-1-10"}, head: "0-1-11",
			events: []string{"update 0-1-11 1", "commit 0-1-11"},
			want:   map[int]int{}, done: true},
		{name: "a table without a primary key has no keys, and says so",
			cp: checkpoint.Checkpoint{GTIDSet: "0-1-10"}, head: "0-1-11",
			events: []string{"nokey 0-1-11", "commit 0-1-11"},
			want:   map[int]int{}, unkeyed: true, done: true},
		{name: "a heartbeat ends it: the server had nothing more",
			cp: checkpoint.Checkpoint{GTIDSet: "0-1-10"}, head: "0-2-99",
			events: []string{"insert 0-1-11 1", "commit 0-1-11", "heartbeat", "insert 0-1-12 2", "commit 0-1-12"},
			want:   map[int]int{1: 11}, done: true},
		{name: "not done before head is reached",
			cp: checkpoint.Checkpoint{GTIDSet: "0-1-10"}, head: "0-1-12",
			events: []string{"insert 0-1-11 1", "commit 0-1-11"},
			want:   map[int]int{1: 11}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cp.Flavor = "mariadb"
			head, err := binlog.ParseSet("mariadb", c.head)
			if err != nil {
				t.Fatal(err)
			}
			p, err := newPast(&c.cp, head, map[string][]string{"app.outbox": {"id"}}, func(k string) bool { return k != key(99) })
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range script(t, c.events...) {
				if err := p.add(&ev); err != nil {
					t.Fatal(err)
				}
			}
			want := map[string]time.Time{}
			for id, m := range c.want {
				want[key(id)] = t0.Add(time.Duration(m) * time.Minute)
			}
			if !maps.Equal(p.keys, want) {
				t.Fatalf("keys %v, want %v", p.keys, want)
			}
			if p.done != c.done || p.unkeyed["app.nokey"] != c.unkeyed {
				t.Fatalf("done %v unkeyed %v; want %v %v", p.done, p.unkeyed, c.done, c.unkeyed)
			}
		})
	}
}

// The SELECT's key of a row (its text) and the binlog's (the row image's
// value) are the same key; the window's rows among the keys past the
// checkpoint are counted by event id with the oldest commit time.
func TestRowKeysFindTheWindowsRowsPastTheCheckpoint(t *testing.T) {
	k := newRowKeys()
	buf := []byte("ev-1")
	k.add(appendKey(nil, "app.outbox", []byte("1")), buf)
	copy(buf, "ev-9") // the caller reuses its buffer
	k.add(appendKey(nil, "app.outbox", []byte("2")), []byte("ev-2"))
	k.add(appendKey(nil, "app.outbox", []byte("3")), []byte("ev-2"))
	k.add(appendKey(nil, "app.outbox", []byte("4")), []byte("ev-4"))
	past := map[string]time.Time{
		string(appendKey(nil, "app.outbox", valueBytes(int64(1)))):  at(5),
		string(appendKey(nil, "app.outbox", valueBytes(uint32(2)))): at(9),
		string(appendKey(nil, "app.outbox", valueBytes("3"))):       at(7),
		string(appendKey(nil, "app.outbox", valueBytes(int64(99)))): at(1), // outside the window
		string(appendKey(nil, "app.other", valueBytes(int64(4)))):   at(1), // another table's row 4
	}
	got := k.beyond(past)
	want := map[string]Beyond{"ev-1": {Rows: 1, Oldest: at(5)}, "ev-2": {Rows: 2, Oldest: at(7)}}
	if !maps.Equal(got, want) {
		t.Fatalf("beyond %v, want %v", got, want)
	}
	// Keys of several columns cannot run into each other.
	a := appendKey(nil, "t", []byte("ab"), []byte("c"))
	b := appendKey(nil, "t", []byte("a"), []byte("bc"))
	n := appendKey(nil, "t", nil, []byte("c"))
	e := appendKey(nil, "t", []byte{}, []byte("c"))
	if keys := []string{string(a), string(b), string(n), string(e)}; len(slices.Compact(slices.Sorted(slices.Values(keys)))) != 4 {
		t.Fatalf("keys collide: %q", keys)
	}
}
