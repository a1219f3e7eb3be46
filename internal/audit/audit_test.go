package audit

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func at(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }

// rec is a record "id@minute" on topic t, with flags r (replayed) and d
// (dead letter) after a slash: "a@5", "a@5/r", "a@5/d".
func rec(s string) Record {
	s, flags, _ := strings.Cut(s, "/")
	id, m, _ := strings.Cut(s, "@")
	min, err := strconv.Atoi(m)
	if err != nil {
		panic(err)
	}
	return Record{ID: id, Topic: "t", Timestamp: at(min), Replayed: strings.Contains(flags, "r"), DeadLetter: strings.Contains(flags, "d")}
}

func TestReportClassifiesRowsAndRecords(t *testing.T) {
	win := Window{Since: at(0), Until: at(60), Margin: 5 * time.Minute}
	type want struct {
		published, replayedOnly, deadLettered, outside, pruned int
		missing, pending, dup, phantom                         []string
		clean                                                  bool
	}
	cases := []struct {
		name    string
		rows    []string
		recs    []string
		covered bool
		found   []string
		oldest  int // minute of the oldest row left; -1000: none
		want    want
	}{
		{name: "each row once: clean", rows: []string{"a", "b"}, recs: []string{"a@1", "b@2"}, covered: true,
			want: want{published: 2, clean: true}},
		{name: "a covered row without a record is missing", rows: []string{"a", "b"}, recs: []string{"a@1"}, covered: true,
			want: want{published: 1, missing: []string{"b"}}},
		{name: "a row the checkpoint does not cover is pending, not missing", rows: []string{"a", "b"}, recs: []string{"a@1"},
			want: want{published: 1, pending: []string{"b"}, clean: true}},
		{name: "two records of one row are a duplicate", rows: []string{"a"}, recs: []string{"a@1", "a@2"}, covered: true,
			want: want{dup: []string{"a"}}},
		{name: "a replayed copy is no duplicate", rows: []string{"a"}, recs: []string{"a@1", "a@30/r"}, covered: true,
			want: want{published: 1, clean: true}},
		{name: "a row published only by replay is not missing", rows: []string{"a"}, recs: []string{"a@30/r"}, covered: true,
			want: want{replayedOnly: 1, clean: true}},
		{name: "a dead-lettered row is not missing", rows: []string{"a"}, recs: []string{"a@1/d"}, covered: true,
			want: want{deadLettered: 1, clean: true}},
		{name: "two rows of one id need two records", rows: []string{"a", "a"}, recs: []string{"a@1", "a@2"}, covered: true,
			want: want{published: 1, clean: true}},
		{name: "two rows of one id with one record: missing", rows: []string{"a", "a"}, recs: []string{"a@1"}, covered: true,
			want: want{missing: []string{"a"}}},
		{name: "a record in the window without a row is a phantom", rows: []string{"a"}, recs: []string{"a@1", "x@10"}, covered: true,
			want: want{published: 1, phantom: []string{"x"}}},
		{name: "a record whose row is outside the window is no phantom", rows: []string{"a"}, recs: []string{"a@1", "y@0"}, covered: true,
			found: []string{"y"}, want: want{published: 1, outside: 1, clean: true}},
		{name: "a record before the window is an edge", rows: []string{"a"}, recs: []string{"z@-3", "a@1"}, covered: true,
			want: want{published: 1, outside: 1, clean: true}},
		{name: "a record after the window is an edge", rows: []string{"a"}, recs: []string{"a@1", "z@61"}, covered: true,
			want: want{published: 1, outside: 1, clean: true}},
		{name: "a record older than the oldest row left may be of a pruned row", rows: []string{"a"}, recs: []string{"p@2", "a@20"}, covered: true,
			oldest: 20, want: want{published: 1, pruned: 1, clean: true}},
		{name: "a record newer than the oldest row left is a phantom", rows: []string{"a"}, recs: []string{"a@20", "p@21"}, covered: true,
			oldest: 20, want: want{published: 1, phantom: []string{"p"}}},
		{name: "with no row left at all a record may be of a pruned row", recs: []string{"p@21"}, covered: true,
			oldest: -1000, want: want{pruned: 1, clean: true}},
		{name: "a replayed record without a row is no phantom", rows: []string{"a"}, recs: []string{"a@1", "q@10/r"}, covered: true,
			want: want{published: 1, outside: 1, clean: true}},
		{name: "a record without an id in the window is a phantom", rows: []string{"a"}, recs: []string{"a@1", "@10"}, covered: true,
			want: want{published: 1, phantom: []string{""}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := New(win)
			for _, id := range c.rows {
				a.Row(id)
			}
			for _, r := range c.recs {
				a.Record(rec(r))
			}
			found := map[string]bool{}
			for _, id := range c.found {
				found[id] = true
			}
			oldest := at(c.oldest)
			if c.oldest == -1000 {
				oldest = time.Time{}
			}
			got := a.Report(Facts{Covered: c.covered, Found: found, Oldest: oldest})
			var phantom []string
			for _, p := range got.Phantom.Records {
				phantom = append(phantom, p.ID)
			}
			g := want{published: got.Published, replayedOnly: got.ReplayedOnly, deadLettered: got.DeadLettered,
				outside: got.OutsideWindow, pruned: got.Pruned, missing: got.Missing.IDs, pending: got.Pending.IDs,
				dup: got.Duplicated.IDs, phantom: phantom, clean: got.Clean}
			norm := func(w *want) {
				for _, l := range []*[]string{&w.missing, &w.pending, &w.dup, &w.phantom} {
					if len(*l) == 0 {
						*l = nil
					}
				}
			}
			norm(&g)
			w := c.want
			norm(&w)
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("got  %+v\nwant %+v", g, w)
			}
			if got.Phantom.Count != len(w.phantom) || got.Missing.Count != len(w.missing) || got.Duplicated.Count != len(w.dup) {
				t.Fatalf("counts: %+v", got)
			}
		})
	}
}

// The report names at most MaxIDs ids of each outcome, sorted, and counts
// them all.
func TestReportCapsIDLists(t *testing.T) {
	a := New(Window{Since: at(0)})
	for _, id := range []string{"e", "d", "c", "b", "a"} {
		a.Row(id)
	}
	got := a.Report(Facts{Covered: true, MaxIDs: 2})
	if got.Missing.Count != 5 || !reflect.DeepEqual(got.Missing.IDs, []string{"a", "b"}) || got.Clean {
		t.Fatalf("missing: %+v", got.Missing)
	}
}

// The ids are copied: a caller may reuse the buffer it passes.
func TestRowKeepsItsOwnCopyOfTheID(t *testing.T) {
	a := New(Window{Since: at(0)})
	buf := []byte("id-1")
	a.RowBytes(buf)
	buf[3] = '2'
	a.RowBytes(buf)
	a.RowBytes([]byte("id-3"))
	a.Row("id-3")
	a.Record(Record{ID: "id-1", Timestamp: at(1)})
	a.Record(Record{ID: "id-2", Timestamp: at(1)})
	a.Record(Record{ID: "id-3", Timestamp: at(1)})
	a.Record(Record{ID: "id-3", Timestamp: at(2)})
	if got := a.Report(Facts{Covered: true}); got.Published != 3 || got.Rows != 4 || !got.Clean {
		t.Fatalf("%+v", got)
	}
}
