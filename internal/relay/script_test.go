package relay

// A test harness for the relay loop: a scripted binlog (the binlog.Event
// values binlog.Reader would send for it) runs through the real loop and
// sink onto an embedded Kafka broker (kfake). Attempts start from the
// committed checkpoint as Relay.attempt starts them; one ends by SIGTERM
// (its run context canceled: it must commit what it holds) or by a crash
// (it dies between two events, its Kafka transaction left open for the
// next attempt's producer initialisation to abort). verify compares what a
// read_committed consumer sees with the outbox rows the script committed,
// and checks every checkpoint written.
//
//	s := newScript("mariadb")
//	s.tx(s.insert("order", "1", 2)) // BEGIN; 2 outbox rows; COMMIT
//	h := newHarness(t, s, nil)
//	a := h.start()                  // an attempt from the committed checkpoint
//	a.feed(s.through(1) - 1)        // the reader sends the rows event, not the commit
//	a.term()                        // SIGTERM: a partial checkpoint
//	h.start().finish()              // restart, read to the end, SIGTERM
//	h.verify()

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/schema"
)

// The captured table, with the default outbox columns.
var (
	outboxColumns = []string{"event_id", "aggregate_type", "aggregate_id", "event_type", "payload", "created_at"}
	outboxTable   = &binlog.Table{Schema: "app", Name: "outbox", Columns: outboxColumns}
	outboxSchema  = schema.Tables{"app.outbox": outboxColumns}
)

const mysqlUUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"

// outboxRow is one row inserted into app.outbox.
type outboxRow struct{ id, aggType, aggID string }

// script is a source binlog: its events in binlog order, and the outbox
// rows its committed transactions wrote, in commit order.
type script struct {
	flavor string
	n      int // source transactions so far
	events []binlog.Event
	ends   []int // ends[n-1]: index of the n-th transaction's last event
	want   []outboxRow
	held   map[string][]outboxRow // rows of XA transactions prepared and not yet ended
	rows   int                    // outbox rows written so far
	start  time.Time
}

// newScript starts a script whose transactions commit a second apart from
// now on: the loop reads them at the source's head (see behind).
func newScript(flavor string) *script {
	return &script{flavor: flavor, held: map[string][]outboxRow{}, start: time.Now().UTC().Truncate(time.Second)}
}

// behind makes s's transactions an hour old: the loop catches up (the
// batch is due at its bounds, or once the reader stays quiet).
func (s *script) behind() *script {
	s.start = s.start.Add(-time.Hour)
	return s
}

// gtid is the GTID of the n-th source transaction (from 1).
func (s *script) gtid(n int) string {
	if s.flavor == "mysql" {
		return mysqlUUID + ":" + strconv.Itoa(n)
	}
	return "0-1-" + strconv.Itoa(n)
}

// set is the GTID set of the first n source transactions, as the server
// renders it.
func (s *script) set(n int) string {
	v := "0-1-" + strconv.Itoa(n)
	switch {
	case n == 0:
		return ""
	case s.flavor == "mysql":
		v = mysqlUUID + ":1-" + strconv.Itoa(n)
	}
	set, err := binlog.ParseSet(s.flavor, v)
	if err != nil {
		panic(err)
	}
	return set.String()
}

// through is the number of events up to the end of the n-th transaction:
// a.feed(s.through(n)) sends the first n transactions.
func (s *script) through(n int) int { return s.ends[n-1] + 1 }

// end is the GTID set of the whole script.
func (s *script) end() string { return s.set(s.n) }

// insert returns n new outbox rows of one aggregate: one rows event's worth.
func (s *script) insert(aggType, aggID string, n int) []outboxRow {
	out := make([]outboxRow, n)
	for i := range out {
		s.rows++
		out[i] = outboxRow{id: "e" + strconv.Itoa(s.rows), aggType: aggType, aggID: aggID}
	}
	return out
}

// tx appends a transaction (BEGIN ... COMMIT) with one rows event per
// argument; without any, one that writes other tables only.
func (s *script) tx(rows ...[]outboxRow) string {
	for _, r := range rows {
		s.want = append(s.want, r...)
	}
	return s.group(binlog.KindCommit, "", false, rows)
}

// xaPrepare appends XA START xid; rows; XA END; XA PREPARE: one group.
func (s *script) xaPrepare(xid string, rows ...[]outboxRow) string {
	s.held[xid] = slices.Concat(rows...)
	return s.group(binlog.KindPrepare, xid, false, rows)
}

// xaCommit appends XA COMMIT xid, a group of its own, which commits the
// rows of its prepare.
func (s *script) xaCommit(xid string) string {
	s.want = append(s.want, s.held[xid]...)
	delete(s.held, xid)
	return s.group(binlog.KindCommit, xid, false, nil)
}

// xaRollback appends XA ROLLBACK xid.
func (s *script) xaRollback(xid string) string {
	delete(s.held, xid)
	return s.group(binlog.KindRollback, xid, false, nil)
}

// xaOnePhase appends XA START xid; rows; XA END; XA COMMIT xid ONE PHASE.
func (s *script) xaOnePhase(xid string, rows ...[]outboxRow) string {
	s.want = append(s.want, slices.Concat(rows...)...)
	return s.group(binlog.KindCommit, xid, true, rows)
}

// group appends one source transaction's events as binlog.Reader sends
// them: a rows event per element of rows, then its end (kind) carrying the
// GTID set including it and the captured tables' layout.
func (s *script) group(kind binlog.Kind, xid string, onePhase bool, rows [][]outboxRow) string {
	s.n++
	gtid, at := s.gtid(s.n), s.start.Add(time.Duration(s.n)*time.Second)
	for _, rs := range rows {
		ev := binlog.Event{Kind: binlog.KindRows, GTID: gtid, XID: xid, Table: outboxTable, Op: binlog.OpInsert, Time: at, Size: 100}
		for _, r := range rs {
			ev.Rows = append(ev.Rows, []any{r.id, r.aggType, r.aggID, "created", []byte(payload(r.id)), at.Format(time.DateTime)})
		}
		s.events = append(s.events, ev)
	}
	set, err := binlog.ParseSet(s.flavor, s.set(s.n))
	if err != nil {
		panic(err)
	}
	end := binlog.Event{Kind: kind, GTID: gtid, XID: xid, OnePhase: onePhase, Set: set, Schema: outboxSchema, Time: at, Size: 50}
	if n := len(slices.Concat(rows...)); kind == binlog.KindCommit && xid == "" && n > 0 {
		// As the reader digests a transaction's captured rows.
		end.Digest = &binlog.TxDigest{Tables: []string{outboxTable.String()}, Rows: n, Sum: "digest of " + gtid}
	}
	s.events = append(s.events, end)
	s.ends = append(s.ends, len(s.events)-1)
	return gtid
}

func payload(id string) string { return `{"id":"` + id + `"}` }

// matrix runs the script build makes, for both flavors, each way on a
// broker of its own and verifies each: straight through (one event per
// batch, and all at once), SIGTERM after every event, a crash after every
// event (each stop followed by a restart from the committed checkpoint).
func matrix(t *testing.T, build func(flavor string) *script, tweak func(*config.Config)) {
	for _, flavor := range []string{"mariadb", "mysql"} {
		for _, batch := range []int{1, 0} {
			name := fmt.Sprintf("matrix/%s/batch=%d", flavor, batch)
			if batch == 0 {
				name = "matrix/" + flavor + "/batch=all"
			}
			run := func(name string, f func(h *harness)) {
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					h := newHarness(t, build(flavor), tweak)
					h.batch = batch
					f(h)
					h.verify()
				})
			}
			run(name+"/straight", func(h *harness) { h.start().finish() })
			run(name+"/sigterm-after-every-event", func(h *harness) { h.stopEvery((*attempt).term, nil) })
			run(name+"/crash-after-every-event", func(h *harness) { h.stopEvery((*attempt).crash, errCrash) })
		}
	}
}
