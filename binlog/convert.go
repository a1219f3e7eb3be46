package binlog

import (
	"errors"
	"fmt"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/schema"
)

// Conversion of go-mysql's events to the relay's Events: one handler per
// kind of event, dispatched by convert; the framer (framer.go) decides
// where transactions begin and end.

// streamState is what the reader carries from one event to the next.
type streamState struct {
	frame framer
	size  int
	// file and pos: the end of the last event read (Reader.ReadPosition,
	// published once per hand-off); "" until the server names its file.
	file string
	pos  uint32
	// tableCache holds, by table id, the Table built from a table map event;
	// the server sends one per transaction, mostly identical to the last.
	// Cleared when DDL changes a captured table's layout, and past
	// maxMappedTables ids.
	tableCache map[uint64]*cachedTable
	// digest of the captured rows of the group being read (digest.go).
	digest rowsDigest
	// captured: whether each table map met names a captured table (the
	// stream's parser hands the same TableMapEvent while a table's table
	// map repeats); reset past 256 (go-mysql's parser, in a compressed
	// transaction, makes a new one each time).
	captured map[*replication.TableMapEvent]bool
}

// capturedMap reports whether tm names a captured table (Reader.captured).
func (st *streamState) capturedMap(r *Reader, tm *replication.TableMapEvent) bool {
	c, ok := st.captured[tm]
	if !ok {
		if st.captured == nil || len(st.captured) >= 256 {
			st.captured = map[*replication.TableMapEvent]bool{}
		}
		c = r.captured(tm.Schema, tm.Table)
		st.captured[tm] = c
	}
	return c
}

// convert appends the relay's view of ev (nothing, rows, a commit, a
// prepare or rollback of an XA transaction, a schema note) to batch; the
// framer decides where transactions begin and end. Each kind of event has
// its handler below; in a transaction being skipped (see skipPublished)
// only the next GTID event counts.
func (r *Reader) convert(st *streamState, ev *replication.BinlogEvent, batch []Event) ([]Event, error) {
	st.size += int(ev.Header.EventSize)
	if st.frame.state == stateSkip && !isGTIDEvent(ev) {
		return batch, nil
	}
	switch e := ev.Event.(type) {
	case *replication.RowsEvent:
		return r.rowsEvent(st, ev, e, batch)
	case *uncapturedRowsEvent:
		return batch, nil // rows of a table not captured, not decoded (hotparse.go)
	case *replication.TableMapEvent:
		return batch, r.tableMapEvent(st, e)
	case *replication.XIDEvent:
		return r.xidEvent(st, e, batch)
	case *replication.QueryEvent:
		return r.queryEvent(st, e, batch)
	case *replication.GTIDEvent, *replication.GtidTaggedLogEvent, *replication.MariadbGTIDEvent:
		return batch, gtidEvent(st, ev)
	case *replication.TransactionPayloadEvent:
		return r.payloadEvent(st, e, batch)
	case *replication.GenericEvent:
		return r.genericEvent(st, ev, e, batch)
	case *replication.HeartbeatEvent:
		return heartbeatEvent(st, batch), nil
	case *replication.FormatDescriptionEvent, *replication.RotateEvent,
		*replication.PreviousGTIDsEvent, *replication.MariadbGTIDListEvent, *replication.MariadbBinlogCheckPointEvent,
		*replication.IntVarEvent, *replication.RowsQueryEvent, *replication.MariadbAnnotateRowsEvent,
		*replication.BeginLoadQueryEvent:
		return batch, nil // nothing of a transaction's content (track follows rotations)
	}
	return batch, st.frame.other(ev)
}

// isGTIDEvent reports whether ev opens a group: a GTID event of either
// flavor.
func isGTIDEvent(ev *replication.BinlogEvent) bool {
	switch ev.Event.(type) {
	case *replication.GTIDEvent, *replication.GtidTaggedLogEvent, *replication.MariadbGTIDEvent:
		return true
	}
	return false
}

// gtidEvent opens the group the GTID event starts.
func gtidEvent(st *streamState, ev *replication.BinlogEvent) error {
	gtid, at, shape, _, err := gtidOf(ev)
	if err != nil {
		return err
	}
	return st.frame.open(gtid, at, shape)
}

// rowsEvent appends the rows of a captured table (KindRows; held by the
// framer when its group keeps them until its end). Rows of other tables
// are not decoded (RowsEventDecodeFunc) and are dropped.
func (r *Reader) rowsEvent(st *streamState, ev *replication.BinlogEvent, e *replication.RowsEvent, batch []Event) ([]Event, error) {
	f := &st.frame
	if e.Table == nil || !st.capturedMap(r, e.Table) {
		return batch, nil // RowsEventDecodeFunc leaves other tables' rows undecoded
	}
	if f.state != stateTx && f.state != stateXA {
		return batch, fmt.Errorf("%w: rows of %s.%s outside BEGIN ... COMMIT (after %s)", ErrUnframed,
			e.Table.Schema, e.Table.Table, f.gtid)
	}
	if why := rowsShape(e); why != "" {
		return batch, malformedRowsError(f.gtid, e, why) // not decoded (rowsDecoder)
	}
	// A PARTIAL_UPDATE_ROWS_EVENT (binlog_row_value_options=PARTIAL_JSON)
	// is an UPDATE whose images are not decoded (their JSON diffs would be
	// go-mysql's alone, jsonbound.go): it goes on without rows, counted
	// once by router.invalid_op.
	undecoded := e.Type() == replication.EnumRowsEventTypeUnknown
	if len(e.Rows) == 0 && !undecoded {
		return batch, nil
	}
	c, batch, err := r.tableOf(st, e.Table, batch)
	if err != nil {
		return batch, err
	}
	t := c.table
	out := Event{Kind: KindRows, GTID: f.gtid, XID: f.xid, Table: t, Time: f.commitTime, Size: st.size}
	var ok bool
	if out.Op, out.Rows, ok = rowImages(ev.Header.EventType, e); !ok {
		return batch, fmt.Errorf("%w: transaction %s: rows event %s of %s", ErrUnframed, f.gtid, ev.Header.EventType, t)
	}
	switch {
	case partialInsert(e):
		// Decided from the image's own bitmap; its rows hold the columns
		// present alone (rowimage.go), never a NULL for an absent one.
		out.Absent = absentNames(t, e.ColumnBitmap1, e.ColumnCount)
		out.Image = &PartialImage{Columns: presentColumns(e.ColumnBitmap1, e.ColumnCount), Rows: out.Rows}
		out.Rows = nil
	case out.Op == OpInsert && e.Table.JsonColumnCount() > 0:
		out.Undecoded = undecodedRows(e.Rows, t.Columns)
	}
	if c.signs != nil {
		var err error
		if out.Image != nil {
			// Never published: a value of unknown signedness stays as read.
			err = c.signs.applyAt(out.Image.Rows, out.Image.Columns, false, t.String(), f.gtid)
		} else {
			err = c.signs.apply(out.Rows, out.Op == OpInsert, t.String(), f.gtid)
		}
		if err != nil {
			return batch, fmt.Errorf("read binlog: %w", err)
		}
	}
	st.digest.add(f.gtid, e.Table, out.Op, out.Rows)
	f.rows += out.RowCount()
	st.size = 0
	if f.hold {
		f.held = append(f.held, out)
		return batch, nil
	}
	return append(batch, out), nil
}

// rowImages are the operation and row images (UPDATE: the after images)
// of e, a rows event of type t; ok false for an event of another kind.
func rowImages(t replication.EventType, e *replication.RowsEvent) (op Op, rows [][]any, ok bool) {
	kind := e.Type()
	if t == replication.PARTIAL_UPDATE_ROWS_EVENT {
		// MySQL's UPDATE under binlog_row_value_options=PARTIAL_JSON (its
		// after images may hold JSON diffs): an update, which go-mysql's
		// Type does not name.
		kind = replication.EnumRowsEventTypeUpdate
	}
	switch kind {
	case replication.EnumRowsEventTypeInsert:
		return OpInsert, e.Rows, true
	case replication.EnumRowsEventTypeDelete:
		return OpDelete, e.Rows, true
	case replication.EnumRowsEventTypeUpdate:
		for i := 1; i < len(e.Rows); i += 2 {
			rows = append(rows, e.Rows[i])
		}
		return OpUpdate, rows, true
	}
	return 0, nil, false
}

// tableOf is the Table (columns, signedness plan) of tm: the one cached
// for its table id while it matches, else built anew (a KindDDL note first
// when the binlog's column names replace the tracked layout).
func (r *Reader) tableOf(st *streamState, tm *replication.TableMapEvent, batch []Event) (*cachedTable, []Event, error) {
	if c := st.tableCache[tm.TableID]; c != nil && c.matches(tm) {
		return c, batch, nil
	}
	db, tbl := r.configured(string(tm.Schema), string(tm.Table))
	cols, note, err := r.columns(tm, db, tbl, st.frame.gtid)
	if err != nil {
		return nil, batch, err
	}
	if note != "" {
		batch = append(batch, Event{Kind: KindDDL, GTID: st.frame.gtid, Note: note})
		clear(st.tableCache)
	}
	t := &Table{Schema: db, Name: tbl, Columns: cols, Latin1: latin1Columns(tm, len(cols))}
	unsigned, known := r.tracker.UnsignedColumns(t.Schema, t.Name)
	c := newCachedTable(tm, t, planSigns(tm, cols, unsigned, known))
	if len(st.tableCache) >= maxMappedTables {
		clear(st.tableCache) // a table opened anew again and again: ids without end
	}
	st.tableCache[tm.TableID] = c
	return c, batch, nil
}

// tableMapEvent notes that the group touches a captured table.
func (r *Reader) tableMapEvent(st *streamState, e *replication.TableMapEvent) error {
	if st.capturedMap(r, e) {
		st.frame.touched = true
		return st.frame.checkUnknown()
	}
	return nil
}

// xidEvent ends a transaction with its commit (KindCommit).
func (r *Reader) xidEvent(st *streamState, e *replication.XIDEvent, batch []Event) ([]Event, error) {
	f := &st.frame
	if e.GSet != nil {
		f.set = e.GSet
	}
	if f.state != stateTx {
		return batch, fmt.Errorf("%w: XID event outside BEGIN ... (after %s)", ErrUnframed, f.gtid)
	}
	out, err := f.close(KindCommit, "")
	if err != nil {
		return batch, err
	}
	return r.commit(st, out, batch), nil
}

// queryEvent gives a statement to the framer (BEGIN, COMMIT, XA ...,
// savepoints, DDL, statement-logged changes): a warning it raised, and at
// a group's end the DDL applied to the schema tracker and the group's end.
func (r *Reader) queryEvent(st *streamState, e *replication.QueryEvent, batch []Event) ([]Event, error) {
	f := &st.frame
	out, closed, err := f.query(e)
	if f.warning != "" {
		batch = append(batch, Event{Kind: KindWarning, GTID: f.gtid, Note: f.warning})
		f.warning = ""
	}
	if err != nil || !closed {
		return batch, err
	}
	if out.stmt != "" {
		if batch, err = r.applyDDL(st, out, batch); err != nil {
			return batch, err
		}
	}
	return r.commit(st, out, batch), nil
}

// payloadEvent converts the events of a MySQL compressed transaction
// (binlog_transaction_compression): the transaction's events, XID
// included, inside one event, whose (compressed) size is what the binlog
// holds: inner events count nothing more.
func (r *Reader) payloadEvent(st *streamState, e *replication.TransactionPayloadEvent, batch []Event) ([]Event, error) {
	for _, inner := range e.Events {
		st.size -= int(inner.Header.EventSize)
		var err error
		if batch, err = r.convert(st, inner, batch); err != nil {
			return batch, err
		}
	}
	if st.frame.state != stateIdle {
		return batch, fmt.Errorf("%w: compressed transaction %s does not end inside its payload", ErrUnframed, st.frame.gtid)
	}
	return batch, nil
}

// genericEvent handles the events go-mysql does not decode: MySQL's XA
// prepare ends its group (KindPrepare, xaPrepareEvent); the others listed
// carry nothing of a transaction's content; any other is the framer's to
// judge.
func (r *Reader) genericEvent(st *streamState, ev *replication.BinlogEvent, e *replication.GenericEvent, batch []Event) ([]Event, error) {
	switch ev.Header.EventType {
	case xaPrepareLogEvent:
		return r.xaPrepareEvent(st, e, batch)
	case replication.RAND_EVENT, replication.USER_VAR_EVENT, replication.IGNORABLE_EVENT, replication.STOP_EVENT,
		replication.TRANSACTION_CONTEXT_EVENT, replication.VIEW_CHANGE_EVENT, replication.MARIADB_START_ENCRYPTION_EVENT,
		replication.HEARTBEAT_LOG_EVENT_V2, replication.PREVIOUS_GTIDS_EVENT:
		return batch, nil
	}
	return batch, st.frame.other(ev)
}

// xaPrepareEvent ends an XA transaction's group with its prepare
// (KindPrepare, or the commit of a one-phase XA commit).
func (r *Reader) xaPrepareEvent(st *streamState, e *replication.GenericEvent, batch []Event) ([]Event, error) {
	out, err := st.frame.prepare(e)
	if err != nil {
		return batch, err
	}
	return r.commit(st, out, batch), nil
}

// heartbeatEvent appends a KindHeartbeat between transactions: the server
// had nothing more to send.
func heartbeatEvent(st *streamState, batch []Event) []Event {
	if st.frame.state == stateIdle {
		batch = append(batch, Event{Kind: KindHeartbeat, Time: time.Now()})
	}
	return batch
}

// applyDDL gives a standalone statement to the schema tracker. When the
// binlog carries column names, those are the truth and a statement the
// tracker cannot follow is only reported; otherwise it stops the relay.
func (r *Reader) applyDDL(st *streamState, out frameOut, batch []Event) ([]Event, error) {
	gtid := st.frame.gtid
	changed, err := r.tracker.ApplyMode(out.stmtDB, out.stmt, out.stmtMode)
	// The statement's text, and the tracker's error about it, can hold a
	// password (GRANT ... IDENTIFIED BY): both are redacted.
	stmt := RedactStatement(out.stmt)
	note := func(format string, a ...any) string { return RedactIn(fmt.Sprintf(format, a...), out.stmt) }
	switch {
	case errors.Is(err, schema.ErrUnparsed) && !r.srv.ColumnNames:
		return batch, redactedError{fmt.Errorf("read binlog at %s: %w (statement: %.200s)", gtid, err, stmt), out.stmt}
	case errors.Is(err, schema.ErrIgnored):
		batch = append(batch, Event{Kind: KindIgnored, GTID: gtid, Note: note("%v (statement: %.200s)", err, stmt)})
	case err != nil:
		batch = append(batch, Event{Kind: KindWarning, GTID: gtid, Note: note("%v (statement: %.200s); the binlog's "+
			"column names are used", err, stmt)})
	case changed:
		batch = append(batch, Event{Kind: KindDDL, GTID: gtid, Note: note("schema changed: %.200s", stmt)})
	}
	if changed {
		clear(st.tableCache)
	}
	return batch, nil
}

// columns is the layout of captured table db.tbl (its configured names)
// for a rows event: the binlog's own column names when it carries them
// (they replace a tracked layout that disagrees: note says so), else the
// layout tracked from DDL.
func (r *Reader) columns(tm *replication.TableMapEvent, db, tbl, gtid string) (cols []string, note string, err error) {
	tracked, known := r.tracker.Columns(db, tbl)
	names := tm.ColumnNameString()
	if len(names) > 0 {
		if r.tracker.Learn(db, tbl, names, binlogUnsigned(tm, names), hasSignedness(tm)) && known {
			note = fmt.Sprintf("layout of %s.%s from the binlog's column names %v replaces the one tracked from DDL %v", db, tbl, names, tracked)
		}
		return names, note, nil
	}
	if !known {
		return nil, "", fmt.Errorf("%w: table %s.%s at %s: set binlog_row_metadata=FULL on the server, or start where the binlog "+
			"still holds its CREATE TABLE (or at `now`, with SELECT granted on it)", ErrNoColumnNames, db, tbl, gtid)
	}
	if err := r.tracker.Verify(db, tbl, tm.ColumnType); err != nil {
		return nil, "", fmt.Errorf("%w: %s.%s at %s: %w; nothing of it is published: if the table's definition has not changed "+
			"since, record it with `outbox-relay checkpoint set --gtid SET --schema server` (SET: the checkpoint's GTID set, from "+
			"`outbox-relay checkpoint show`); binlog_row_metadata=FULL on the server spares this for rows written after it is set "+
			"(they carry their column names)", ErrSchemaMismatch, db, tbl, gtid, err)
	}
	if len(tracked) != int(tm.ColumnCount) {
		return nil, "", fmt.Errorf("%w: %s.%s at %s: the row has %d columns, DDL read so far gives %d (%v)",
			ErrSchemaMismatch, db, tbl, gtid, tm.ColumnCount, len(tracked), tracked)
	}
	return tracked, "", nil
}

// commit appends the end of a group: a commit, an XA prepare or an XA
// rollback, with the GTID set including it.
func (r *Reader) commit(st *streamState, out frameOut, batch []Event) []Event {
	f := &st.frame
	if len(f.held) > 0 { // what the group kept: its rows come out at its end
		batch = append(batch, f.held...)
		clear(f.held)
		f.held = f.held[:0]
	}
	ev := Event{Kind: out.kind, GTID: f.gtid, XID: out.xid, OnePhase: out.onePhase, Set: out.set, Schema: r.tracker.Tables(), Unsigned: r.tracker.Unsigned(),
		Provisional: r.tracker.Provisional(), Time: f.commitTime, Size: st.size}
	if out.kind == KindCommit && out.xid == "" && f.xid == "" {
		ev.Digest = st.digest.sum(f.gtid)
	}
	ev.File, ev.Pos = st.file, st.pos
	st.size = 0
	return append(batch, ev)
}
