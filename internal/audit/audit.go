// Package audit reconciles a pipeline's outbox rows with the records on its
// Kafka topics: which rows were published once, are missing, pending or
// duplicated, and which records have no row (phantoms). The reconciliation
// (this file) does no I/O: the caller streams the rows of a time window
// (Row), then the records read from the topics (Record), looks up the
// unmatched records' ids (Unmatched) and asks for the Report, with the
// Facts of which rows the committed checkpoint covers (beyond.go, pure too:
// the rows of the binlog after the checkpoint, told apart by table and
// primary key). The verdict is clean, pending or mismatch: never clean while
// a row is pending, and a covered row without a record is missing whatever
// the relay's lag. Run (run.go, tables.go, pastread.go) is that caller for
// `outbox-relay audit`: it judges the checkpoint as `run` does (a lost one is
// its error), reads the rows on a source connection, the binlog after the
// checkpoint when it does not cover them, and the topics with Kafka clients
// of its own, read-only;
// Background (background.go) runs it on an interval inside `run` and exports
// the outcome as metrics. Memory is one small entry per
// distinct event id of the window (the id's bytes and four counters), plus
// the unmatched records; no record value is kept.
package audit

import (
	"fmt"
	"slices"
	"time"
	"unsafe"
)

// Record is what the audit reads of one Kafka record.
type Record struct {
	ID        string // the "id" header; "" when the record has none
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time
	// Replayed: the record has the "replayed" header (replay, dead-letter
	// replay): a deliberate second copy, never a duplicate.
	Replayed bool
	// DeadLetter: the record is on a dead-letter topic: its row was
	// dead-lettered, not lost.
	DeadLetter bool
}

// Window is the time window the rows were selected in, and the allowance
// for clocks at its edges.
type Window struct {
	Since, Until time.Time // Until zero: no end
	Margin       time.Duration
}

// counts is the state of one event id.
type counts struct {
	rows, published, replayed, deadLettered uint16
}

// Auditor collects rows and records. Not safe for concurrent use.
type Auditor struct {
	w         Window
	ids       map[string]counts
	arena     arena
	rows      int
	records   int
	unmatched map[string]Record // records in the window whose id is no row's
	noID      []Record          // records without an id header in the window
	noIDCount int
	edge      int // records outside the window whose id is no row's
}

// New returns an Auditor of window w.
func New(w Window) *Auditor {
	return &Auditor{w: w, ids: map[string]counts{}, unmatched: map[string]Record{}}
}

// intern copies id into a's arena.
func intern[T string | []byte](a *Auditor, id T) string { return internIn(&a.arena, id) }

// arena holds copied strings: one allocation per MiB of them, not one per
// string.
type arena []byte

// internIn copies s into ar.
func internIn[T string | []byte](ar *arena, s T) string {
	if len(s) == 0 {
		return ""
	}
	if len(*ar)+len(s) > cap(*ar) {
		*ar = make([]byte, 0, max(1<<20, len(s)))
	}
	start := len(*ar)
	*ar = append(*ar, s...)
	return unsafe.String(&(*ar)[start], len(s))
}

// Row adds a row of the window with event id id. An id may have several
// rows (a re-sent event keeps its id): each needs its record.
func (a *Auditor) Row(id string) {
	a.rows++
	c, ok := a.ids[id]
	if !ok {
		id = intern(a, id)
	}
	c.rows = sat(c.rows)
	a.ids[id] = c
}

// RowBytes is Row of an id in a buffer the caller reuses: the id is
// copied only when it is new.
func (a *Auditor) RowBytes(id []byte) {
	a.rows++
	c, ok := a.ids[string(id)]
	c.rows = sat(c.rows)
	if ok {
		a.ids[string(id)] = c
		return
	}
	a.ids[intern(a, id)] = c
}

func sat(n uint16) uint16 {
	if n == ^uint16(0) {
		return n
	}
	return n + 1
}

// Rows is the number of rows added.
func (a *Auditor) Rows() int { return a.rows }

// Record adds a record read from the topics. A record whose id is a row's
// counts for it; one in the window whose id is no row's is held for the
// lookup (Unmatched); one outside the window whose id is no row's belongs
// to a row outside the window (the edges) and is only counted.
func (a *Auditor) Record(r Record) {
	a.records++
	if c, ok := a.ids[r.ID]; ok && r.ID != "" {
		switch {
		case r.DeadLetter:
			c.deadLettered = sat(c.deadLettered)
		case r.Replayed:
			c.replayed = sat(c.replayed)
		default:
			c.published = sat(c.published)
		}
		a.ids[r.ID] = c
		return
	}
	if !a.inWindow(r.Timestamp) || r.Replayed {
		// A replayed record repeats a row's id on purpose: the row may be
		// pruned or outside the window; it is never a phantom.
		a.edge++
		return
	}
	if r.ID == "" {
		a.noIDCount++
		if len(a.noID) < maxNoID {
			a.noID = append(a.noID, r)
		}
		return
	}
	if _, ok := a.unmatched[r.ID]; !ok {
		r.ID = intern(a, r.ID)
		a.unmatched[r.ID] = r
	}
}

const maxNoID = 1000

func (a *Auditor) inWindow(t time.Time) bool {
	return !t.Before(a.w.Since) && (a.w.Until.IsZero() || t.Before(a.w.Until))
}

// Unmatched lists the ids of records in the window that have no row of the
// window, sorted: the caller looks them up in the tables (a row outside the
// window by its time column, such as one written just before Since and
// committed after it, makes its record no phantom).
func (a *Auditor) Unmatched() []string {
	out := make([]string, 0, len(a.unmatched))
	for id := range a.unmatched {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Coverage is how much of the rows read the committed checkpoint covers.
type Coverage uint8

// Coverages. The zero value, CoversAll, is the one that hides nothing: a
// row without a record is missing.
const (
	// CoversAll: the committed checkpoint covers every row read (its GTID
	// set contains the source's executed set read after the rows).
	CoversAll Coverage = iota
	// CoversAllBut: it covers every row read but those of Facts.Beyond,
	// whose transactions the binlog after it holds.
	CoversAllBut
	// CoversNone: there is no checkpoint (a first start, or after a
	// reset): no row is covered.
	CoversNone
)

// Beyond are the rows of one event id in the window whose transactions
// the checkpoint does not cover.
type Beyond struct {
	Rows   int
	Oldest time.Time // the oldest of their commit times
}

// Facts are what the caller learned around the rows and records.
type Facts struct {
	Coverage Coverage
	// Beyond: with CoversAllBut, the rows of the window past the
	// checkpoint, by event id. A row without a record that is not among
	// them is covered: missing, whatever the relay's lag.
	Beyond map[string]Beyond
	// Settled: no record read can be of a row past the checkpoint (the
	// checkpoint of an exactly-once pipeline did not move while the
	// records were read: a record is committed with the checkpoint that
	// covers its row). Records carry an event id, not a row: with rows of
	// one id on both sides of the checkpoint, a record counts for a
	// covered row first when Settled, else for a row past it first, so
	// that a covered row without its record is never called pending.
	Settled bool
	// Found are the unmatched ids that do have a row outside the window.
	Found map[string]bool
	// Oldest is the time column's oldest value still in the tables (zero:
	// the tables are empty); an unmatched record older than it may be of
	// a pruned row.
	Oldest time.Time
	// MaxIDs caps each list of ids in the report (0: DefaultMaxIDs).
	MaxIDs int
}

// DefaultMaxIDs is how many ids each list of a report names.
const DefaultMaxIDs = 20

// IDs is a count and the first ids (sorted) of one outcome.
type IDs struct {
	Count int      `json:"count"`
	IDs   []string `json:"ids"`
}

// Phantom is a record without a row.
type Phantom struct {
	ID        string    `json:"id"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Timestamp time.Time `json:"timestamp"`
}

// Phantoms is a count and the first phantoms.
type Phantoms struct {
	Count   int       `json:"count"`
	Records []Phantom `json:"records"`
}

// Verdicts of a Report.
const (
	// VerdictClean: every row of the window published once, no phantom.
	VerdictClean = "clean"
	// VerdictPending: nothing missing, duplicated or phantom, but rows not
	// yet published (past the committed checkpoint).
	VerdictPending = "pending"
	// VerdictMismatch: a row missing or duplicated, or a phantom record
	// (pending rows besides, or not).
	VerdictMismatch = "mismatch"
)

// Report is the audit's verdict.
type Report struct {
	Rows    int `json:"rows"`
	Records int `json:"records"`
	// Covered: the checkpoint covers every row read. Else the rows past
	// it (read from the binlog after it) without a record are pending, the
	// others without a record missing.
	Covered bool `json:"checkpoint_covers_rows"`
	// Published: ids with exactly as many records as rows.
	Published int `json:"published"`
	// ReplayedOnly: ids published only by replay (counted as published).
	ReplayedOnly int `json:"replayed_only"`
	// DeadLettered: ids whose rows went to a dead-letter topic.
	DeadLettered int      `json:"dead_lettered"`
	Missing      IDs      `json:"missing"`
	Pending      IDs      `json:"pending"`
	Duplicated   IDs      `json:"duplicated"`
	Phantom      Phantoms `json:"phantom"`
	// OutsideWindow: records whose row is outside the window (its edges).
	OutsideWindow int `json:"outside_window"`
	// Pruned: records without a row that are older than the oldest row
	// still in the tables: their rows may have been pruned.
	Pruned int `json:"pruned"`
	// PendingOldest is the commit time of the oldest pending row; nil when
	// none is pending, or when there is no checkpoint to read after.
	PendingOldest *time.Time `json:"pending_oldest_commit"`
	// Verdict is VerdictClean, VerdictPending or VerdictMismatch; Clean is
	// Verdict == VerdictClean.
	Verdict string `json:"verdict"`
	Clean   bool   `json:"clean"`
}

// Report classifies every id of the window and every unmatched record.
func (a *Auditor) Report(f Facts) Report {
	limit := f.MaxIDs
	if limit <= 0 {
		limit = DefaultMaxIDs
	}
	rep := Report{Rows: a.rows, Records: a.records, Covered: f.Coverage == CoversAll, OutsideWindow: a.edge}
	var missing, pending, dup []string
	var oldest time.Time
	for id, c := range a.ids {
		switch {
		case c.published > c.rows:
			dup = append(dup, id)
		case c.published == c.rows:
			rep.Published++
		case c.published+c.replayed >= c.rows:
			rep.ReplayedOnly++
		case c.deadLettered > 0:
			rep.DeadLettered++
		default:
			miss, pend, b := shortfall(c, id, f)
			if miss > 0 {
				missing = append(missing, id)
			}
			if pend > 0 {
				pending = append(pending, id)
				if !b.Oldest.IsZero() && (oldest.IsZero() || b.Oldest.Before(oldest)) {
					oldest = b.Oldest
				}
			}
		}
	}
	if len(pending) > 0 && !oldest.IsZero() {
		o := oldest.UTC()
		rep.PendingOldest = &o
	}
	rep.Missing, rep.Pending, rep.Duplicated = capped(missing, limit), capped(pending, limit), capped(dup, limit)
	var phantoms []Phantom
	for _, id := range a.Unmatched() {
		r := a.unmatched[id]
		switch {
		case f.Found[id]:
			rep.OutsideWindow++
		case f.Oldest.IsZero() || r.Timestamp.Before(f.Oldest):
			// No row left at all, or the record is older than the oldest
			// row left: its row may have been pruned. (A pruned row whose
			// transaction committed after the oldest row left was written
			// is named a phantom: a false alarm, never a hidden record.)
			rep.Pruned++
		default:
			phantoms = append(phantoms, phantomOf(r))
		}
	}
	for _, r := range a.noID {
		phantoms = append(phantoms, phantomOf(r))
	}
	rep.Phantom.Count = len(phantoms) - len(a.noID) + a.noIDCount
	rep.Phantom.Records = phantoms[:min(len(phantoms), limit)]
	if rep.Phantom.Records == nil {
		rep.Phantom.Records = []Phantom{}
	}
	switch {
	case rep.Missing.Count > 0 || rep.Duplicated.Count > 0 || rep.Phantom.Count > 0:
		rep.Verdict = VerdictMismatch
	case rep.Pending.Count > 0:
		rep.Verdict = VerdictPending
	default:
		rep.Verdict = VerdictClean
	}
	rep.Clean = rep.Verdict == VerdictClean
	return rep
}

// shortfall splits the rows of an id that lack a record (fewer records,
// replayed ones included, than rows) into missing and pending ones: the
// rows past the checkpoint may lack theirs (pending), a covered row may not
// (missing). Records name an id, not a row: see Facts.Settled for which
// rows the records of an id count for. b is the id's rows past the
// checkpoint.
func shortfall(c counts, id string, f Facts) (missing, pending int, b Beyond) {
	rows, have := int(c.rows), int(c.published)+int(c.replayed)
	switch f.Coverage {
	case CoversNone:
		b.Rows = rows
	case CoversAllBut:
		b = f.Beyond[id]
		b.Rows = min(b.Rows, rows)
	}
	forCovered := have // Settled: every record is a covered row's
	if !f.Settled {
		forCovered = max(0, have-b.Rows) // the rows past it may have theirs
	}
	missing = max(0, rows-b.Rows-forCovered)
	return missing, rows - have - missing, b
}

func phantomOf(r Record) Phantom {
	return Phantom{ID: r.ID, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC()}
}

func capped(ids []string, limit int) IDs {
	slices.Sort(ids)
	out := IDs{Count: len(ids), IDs: ids[:min(len(ids), limit)]}
	if out.IDs == nil {
		out.IDs = []string{}
	}
	return out
}

// Location names a phantom's place: topic[partition]@offset.
func (p Phantom) Location() string { return fmt.Sprintf("%s[%d]@%d", p.Topic, p.Partition, p.Offset) }
