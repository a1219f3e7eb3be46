package relay

import (
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/schema"
)

// Assembling source transactions: the binlog's events (binlog.Event, one
// group per source transaction, framed by the reader) become the rows the
// loop publishes, transaction by transaction. The assembler knows the
// transaction being read (its rows so far, to skip those a split
// checkpoint says are published, and its deletes, to tell the
// delete-after-insert pattern from an invalid operation), the XA
// transactions read and not yet ended (their rows held from prepare to
// commit), and, after a restart from before a prepared XA transaction,
// what the checkpoint covers (read again only to collect the XA rows). It
// does no I/O: the loop routes what it hands over, and looks up an XA
// prepare it does not know (xa.go).

// ErrInvalidOp: an UPDATE or DELETE on an outbox table with invalid_op fatal.
var ErrInvalidOp = errclass.New(errclass.DataStop, "invalid_op", "invalid operation on an outbox table")

// assembler is the loop's assembly of source transactions; only the
// loop's goroutine uses it.
type assembler struct {
	flavor  string
	cur     reading
	xa      xaState  // XA transactions read and not yet ended (xa.go)
	replay  replayed // what the checkpoint covered, while it is read again
	metrics *metrics.Metrics
	log     zerolog.Logger
}

// reading is the source transaction whose rows are being read.
type reading struct {
	gtid string // "" between transactions
	rows int64  // its INSERTed rows of captured tables seen so far
	// deleted counts its rows deleted from outbox tables, taken as the
	// delete-after-insert pattern while they do not outnumber rows.
	deleted int64
}

// replayed is, while the loop reads again from before a prepared XA
// transaction, the position published before the restart: nothing it
// covers is published again.
type replayed struct {
	done mysql.GTIDSet // nil: not replaying
	gtid string        // the GTID last looked up, and its answer
	hit  bool
}

// newAssembler is the assembly of the captured tables read from a server
// of flavor, from cp (nil: none): the XA transactions it lists as
// prepared, and, when it resumes from before one of them, what it covers.
func newAssembler(flavor string, cp *checkpoint.Checkpoint, m *metrics.Metrics, log zerolog.Logger) (*assembler, error) {
	a := &assembler{flavor: flavor, metrics: m, log: log}
	a.xa.load(cp)
	if cp != nil && cp.Replays() {
		done, err := binlog.ParseSet(flavor, cp.GTIDSet)
		if err != nil {
			return nil, fmt.Errorf("checkpoint position: %w", err)
		}
		a.replay.done = done
	}
	return a, nil
}

// enter notes that a rows event of transaction gtid is read.
func (a *assembler) enter(gtid string) {
	if a.cur.gtid != gtid {
		a.cur = reading{gtid: gtid}
	}
}

// next counts the next INSERTed row of the transaction being read and
// reports whether it was published before the restart (published, the
// checkpoint's part of a split transaction, covers it).
func (a *assembler) next(published checkpoint.Partial) bool {
	a.cur.rows++
	return published.GTID == a.cur.gtid && a.cur.rows <= published.Rows
}

// leave notes the end of the transaction being read.
func (a *assembler) leave() { a.cur = reading{} }

// invalidOp handles UPDATE and DELETE on table, an outbox table whose
// router.invalid_op is policy. DELETEs in a transaction that inserted at
// least as many outbox rows before them are the delete-after-insert
// pattern (the row was published by its INSERT) and are only counted.
func (a *assembler) invalidOp(table, policy string, ev *binlog.Event) error {
	n := int64(ev.RowCount()) // a partial JSON update, its images not decoded: one per event
	if ev.Op == binlog.OpDelete {
		expected := min(n, a.cur.rows-a.cur.deleted)
		a.cur.deleted += expected
		if expected > 0 {
			a.metrics.InvalidOps.WithLabelValues(table, "delete_after_insert").Add(float64(expected))
		}
		if n -= expected; n == 0 {
			return nil
		}
	}
	a.metrics.InvalidOps.WithLabelValues(table, ev.Op.String()).Add(float64(n))
	msg := "outbox rows must only be inserted: skipped"
	switch policy {
	case "fatal":
		return fmt.Errorf("%w: %s of %d rows of %s at %s (router.invalid_op fatal)", ErrInvalidOp, ev.Op, n, ev.Table, ev.GTID)
	case "error":
		a.log.Error().Str("table", table).Str("op", ev.Op.String()).Str("gtid", ev.GTID).Int64("rows", n).Msg(msg)
	default:
		a.log.Warn().Str("table", table).Str("op", ev.Op.String()).Str("gtid", ev.GTID).Int64("rows", n).Msg(msg)
	}
	return nil
}

// partialImage is the stop at ev's transaction, whose INSERT image lacks
// columns (ev.Absent): nothing of its rows is published from here on
// (the loop's stop drops its pending records); the part of it a split
// published before (published, the checkpoint's partial), if any, is
// named. xid and preparedAt name an XA transaction whose XA COMMIT ev is.
func partialImage(ev *binlog.Event, xid, preparedAt string, published checkpoint.Partial) error {
	e := &binlog.PartialImageError{GTID: ev.GTID, Table: ev.Table.String(), Absent: ev.Absent, XID: xid, PreparedAt: preparedAt}
	if published.GTID == ev.GTID {
		e.Published = published.Rows
	}
	return e
}

// replaying reports whether gtid was published before a restart that
// resumed from before a prepared XA transaction: its rows are read again
// only to collect the XA transactions' rows.
func (a *assembler) replaying(gtid string) bool {
	r := &a.replay
	if r.done == nil {
		return false
	}
	if gtid != r.gtid {
		one, err := binlog.ParseSet(a.flavor, gtid)
		r.gtid, r.hit = gtid, err == nil && r.done.Contain(one)
	}
	return r.hit
}

// replays reports whether the loop is reading again what the checkpoint
// covered.
func (a *assembler) replays() bool { return a.replay.done != nil }

// advanced ends the replay once the position covers what was published.
func (a *assembler) advanced(set mysql.GTIDSet) {
	if a.replay.done != nil && set.Contain(a.replay.done) {
		a.replay = replayed{}
	}
}

// xaAt is where an XA transaction was prepared: the position before its
// prepare group and the captured tables' layout there.
type xaAt struct {
	before      string
	schema      schema.Tables
	unsigned    schema.Signs
	provisional schema.Provisional
}

// at is the position p as an XA prepare records it.
func (p *position) at() xaAt {
	return xaAt{before: p.String(), schema: p.schema, unsigned: p.unsigned, provisional: p.provisional}
}
