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
		verdict                                                string
		pendingOldest                                          int // minute; 0: none
	}
	cases := []struct {
		name    string
		rows    []string
		recs    []string
		cov     Coverage
		beyond  []string // ids of rows past the checkpoint, "id@minute" of its commit (cov CoversAllBut)
		settled bool
		found   []string
		oldest  int // minute of the oldest row left; -1000: none
		want    want
	}{
		{name: "each row once: clean", rows: []string{"a", "b"}, recs: []string{"a@1", "b@2"},
			want: want{published: 2, verdict: VerdictClean}},
		{name: "a covered row without a record is missing", rows: []string{"a", "b"}, recs: []string{"a@1"},
			want: want{published: 1, missing: []string{"b"}, verdict: VerdictMismatch}},
		{name: "without a checkpoint a row without a record is pending, and the verdict is pending, not clean", rows: []string{"a", "b"},
			recs: []string{"a@1"}, cov: CoversNone, want: want{published: 1, pending: []string{"b"}, verdict: VerdictPending}},
		{name: "a row past the checkpoint without a record is pending: not clean", rows: []string{"a", "b"}, recs: []string{"a@1"},
			cov: CoversAllBut, beyond: []string{"b@7"}, want: want{published: 1, pending: []string{"b"}, verdict: VerdictPending, pendingOldest: 7}},
		{name: "a covered row without a record is missing while the relay is behind", rows: []string{"a", "b", "c"}, recs: []string{"a@1"},
			cov: CoversAllBut, beyond: []string{"c@9"}, want: want{published: 1, missing: []string{"b"}, pending: []string{"c"}, verdict: VerdictMismatch, pendingOldest: 9}},
		{name: "a row past the checkpoint with its record is published", rows: []string{"a", "b"}, recs: []string{"a@1", "b@8"},
			cov: CoversAllBut, beyond: []string{"b@7"}, want: want{published: 2, verdict: VerdictClean}},
		{name: "pending besides a phantom: mismatch", rows: []string{"a", "b"}, recs: []string{"a@1", "x@10"},
			cov: CoversAllBut, beyond: []string{"b@7"}, want: want{published: 1, pending: []string{"b"}, phantom: []string{"x"}, verdict: VerdictMismatch, pendingOldest: 7}},
		{name: "the oldest pending commit is the oldest of the pending rows'", rows: []string{"a", "b", "c"},
			cov: CoversAllBut, beyond: []string{"a@12", "b@4", "c@30"}, want: want{pending: []string{"a", "b", "c"}, verdict: VerdictPending, pendingOldest: 4}},
		{name: "two rows of one id, one past the checkpoint, no record: one missing, one pending", rows: []string{"a", "a"},
			cov: CoversAllBut, beyond: []string{"a@5"}, want: want{missing: []string{"a"}, pending: []string{"a"}, verdict: VerdictMismatch, pendingOldest: 5}},
		{name: "two rows of one id, one past a settled checkpoint, one record: the covered row's, none missing", rows: []string{"a", "a"},
			recs: []string{"a@1"}, cov: CoversAllBut, settled: true, beyond: []string{"a@5"}, want: want{pending: []string{"a"}, verdict: VerdictPending, pendingOldest: 5}},
		{name: "two rows of one id, one past a checkpoint that moved, one record: maybe the later row's, the covered one missing", rows: []string{"a", "a"},
			recs: []string{"a@1"}, cov: CoversAllBut, beyond: []string{"a@5"}, want: want{missing: []string{"a"}, verdict: VerdictMismatch}},
		{name: "a row past a checkpoint that moved, without a record, is pending", rows: []string{"a", "b"}, recs: []string{"a@1"},
			cov: CoversAllBut, beyond: []string{"b@5"}, want: want{published: 1, pending: []string{"b"}, verdict: VerdictPending, pendingOldest: 5}},
		{name: "a dead-lettered row past the checkpoint is dead-lettered", rows: []string{"a"}, recs: []string{"a@1/d"},
			cov: CoversAllBut, beyond: []string{"a@1"}, want: want{deadLettered: 1, verdict: VerdictClean}},
		{name: "two records of one row are a duplicate", rows: []string{"a"}, recs: []string{"a@1", "a@2"},
			want: want{dup: []string{"a"}, verdict: VerdictMismatch}},
		{name: "a replayed copy is no duplicate", rows: []string{"a"}, recs: []string{"a@1", "a@30/r"},
			want: want{published: 1, verdict: VerdictClean}},
		{name: "a row published only by replay is not missing", rows: []string{"a"}, recs: []string{"a@30/r"},
			want: want{replayedOnly: 1, verdict: VerdictClean}},
		{name: "a dead-lettered row is not missing", rows: []string{"a"}, recs: []string{"a@1/d"},
			want: want{deadLettered: 1, verdict: VerdictClean}},
		{name: "two rows of one id need two records", rows: []string{"a", "a"}, recs: []string{"a@1", "a@2"},
			want: want{published: 1, verdict: VerdictClean}},
		{name: "two rows of one id with one record: missing", rows: []string{"a", "a"}, recs: []string{"a@1"},
			want: want{missing: []string{"a"}, verdict: VerdictMismatch}},
		{name: "a record in the window without a row is a phantom", rows: []string{"a"}, recs: []string{"a@1", "x@10"},
			want: want{published: 1, phantom: []string{"x"}, verdict: VerdictMismatch}},
		{name: "a record whose row is outside the window is no phantom", rows: []string{"a"}, recs: []string{"a@1", "y@0"},
			found: []string{"y"}, want: want{published: 1, outside: 1, verdict: VerdictClean}},
		{name: "a record before the window is an edge", rows: []string{"a"}, recs: []string{"z@-3", "a@1"},
			want: want{published: 1, outside: 1, verdict: VerdictClean}},
		{name: "a record after the window is an edge", rows: []string{"a"}, recs: []string{"a@1", "z@61"},
			want: want{published: 1, outside: 1, verdict: VerdictClean}},
		{name: "a record older than the oldest row left may be of a pruned row", rows: []string{"a"}, recs: []string{"p@2", "a@20"},
			oldest: 20, want: want{published: 1, pruned: 1, verdict: VerdictClean}},
		{name: "a record newer than the oldest row left is a phantom", rows: []string{"a"}, recs: []string{"a@20", "p@21"},
			oldest: 20, want: want{published: 1, phantom: []string{"p"}, verdict: VerdictMismatch}},
		{name: "with no row left at all a record may be of a pruned row", recs: []string{"p@21"},
			oldest: -1000, want: want{pruned: 1, verdict: VerdictClean}},
		{name: "a replayed record without a row is no phantom", rows: []string{"a"}, recs: []string{"a@1", "q@10/r"},
			want: want{published: 1, outside: 1, verdict: VerdictClean}},
		{name: "a record without an id in the window is a phantom", rows: []string{"a"}, recs: []string{"a@1", "@10"},
			want: want{published: 1, phantom: []string{""}, verdict: VerdictMismatch}},
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
			beyond := map[string]Beyond{}
			for _, r := range c.beyond {
				p := rec(r)
				b := beyond[p.ID]
				b.Rows++
				if b.Oldest.IsZero() || p.Timestamp.Before(b.Oldest) {
					b.Oldest = p.Timestamp
				}
				beyond[p.ID] = b
			}
			got := a.Report(Facts{Coverage: c.cov, Beyond: beyond, Settled: c.settled, Found: found, Oldest: oldest})
			var phantom []string
			for _, p := range got.Phantom.Records {
				phantom = append(phantom, p.ID)
			}
			g := want{published: got.Published, replayedOnly: got.ReplayedOnly, deadLettered: got.DeadLettered,
				outside: got.OutsideWindow, pruned: got.Pruned, missing: got.Missing.IDs, pending: got.Pending.IDs,
				dup: got.Duplicated.IDs, phantom: phantom, verdict: got.Verdict}
			if got.PendingOldest != nil {
				g.pendingOldest = int(got.PendingOldest.Sub(t0) / time.Minute)
			}
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
			if got.Phantom.Count != len(w.phantom) || got.Missing.Count != len(w.missing) || got.Duplicated.Count != len(w.dup) ||
				got.Pending.Count != len(w.pending) {
				t.Fatalf("counts: %+v", got)
			}
			if got.Clean != (w.verdict == VerdictClean) || got.Covered != (c.cov == CoversAll) {
				t.Fatalf("clean %v, covered %v with verdict %s and coverage %d", got.Clean, got.Covered, got.Verdict, c.cov)
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
	got := a.Report(Facts{MaxIDs: 2})
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
	if got := a.Report(Facts{}); got.Published != 3 || got.Rows != 4 || !got.Clean {
		t.Fatalf("%+v", got)
	}
}
