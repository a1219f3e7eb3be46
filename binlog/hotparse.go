package binlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// The stream's hot events: what every transaction of a busy outbox brings
// (a GTID event, BEGIN on MySQL, a table map and a rows event per table,
// an XID), decoded without go-mysql's BinlogParser where it would only
// allocate. go-mysql's Parse allocates a header, an event and its struct
// for each, decodes every table map whole (its column names, charsets,
// keys) though the table maps of one table repeat byte for byte from one
// transaction to the next, and decodes the header of every rows event to
// find that its table is not captured: per one-row outbox transaction
// (two tables), about 40 allocations and a fifth of the relay's CPU.
//
// So the stream's parser (eventParser.hot):
//
//   - decodes GTID, XID and Query events with go-mysql's own decoder of
//     each (Event.Decode) into the event the syncer handed on, whose
//     header it keeps;
//   - keeps each table map by table id with its bytes (tableMaps): one
//     that repeats the last of its id byte for byte is the same
//     TableMapEvent, decoded once, whose captured check and row plan are
//     kept with it; any other is decoded by go-mysql, as before;
//   - follows which table maps the statement being read has mapped, as
//     go-mysql's parser does (a rows event names its table by the id of a
//     table map of its statement; the statement ends with the rows event
//     flagged STMT_END), and resolves the table of a rows event there: a
//     rows event of a table that is not captured becomes
//     uncapturedRowsEvent, undecoded; one of a captured table is decoded by
//     go-mysql's parser with the reader's rows decoder, which decodes its
//     header as go-mysql's RowsEvent.DecodeHeader does (rowsHeader) and
//     takes its table from the statement's table maps, not go-mysql's.
//
// Everything else goes through go-mysql's parser as before, and so does
// every event inside a compressed transaction (payload.go), whose own
// parser keeps its own table maps. The values decoded are go-mysql's
// (its decoders, or decodeInsertRows, held to go-mysql's output by
// rowdecode_differential_test.go); hotparse_test.go holds rowsHeader to
// DecodeHeader and a stream through the hot path to go-mysql's parse.

// hotEvents are the structs the hot path decodes into, one of each type,
// used again for the next event of the type: the event parse returns is
// valid until the next parse (the Reader and Dump.Digest are done with
// each event before they ask for the next; the syncer's events are not
// kept).
type hotEvents struct {
	mariadbGTID replication.MariadbGTIDEvent
	gtid        replication.GTIDEvent
	xid         replication.XIDEvent
	query       replication.QueryEvent
	uncaptured  uncapturedRowsEvent
	// rows: a captured table's rows event, decoded into a copy of its
	// type's template (eventParser.rows).
	rows replication.RowsEvent
}

// mappedTable is a table map as the stream's parser keeps it.
type mappedTable struct {
	// body is the table map event's body as received (post-header and
	// payload, no header, no checksum): what another table map of the
	// same id must repeat to be this one.
	body []byte
	tm   *replication.TableMapEvent
	// captured: tm's table is one of the reader's (its rows are decoded).
	captured bool
	// plan is how decodeInsertRows reads its columns (planned once it is
	// needed; planOK false when it cannot).
	plan            []colPlan
	planned, planOK bool
	// last: the values its rows' columns last had (rowdecode.go).
	last *lastValues
}

// columnPlan is planColumns of m's table map, worked out once, and the
// values its columns last had.
func (m *mappedTable) columnPlan() ([]colPlan, *lastValues, bool) {
	if !m.planned {
		m.plan, m.planOK = planColumns(m.tm, int(m.tm.ColumnCount))
		m.planned = true
		if m.planOK {
			m.last = newLastValues(len(m.plan))
		}
	}
	return m.plan, m.last, m.planOK
}

// maxMappedTables bounds the table maps kept by id (a server gives a
// table a new id whenever it opens it anew); past it they are forgotten
// and decoded again.
const maxMappedTables = 4096

// tableMaps are the table maps of one stream.
type tableMaps struct {
	// known: the last table map of each table id.
	known map[uint64]*mappedTable
	// stmt: the table maps of the statement being read, by the table id a
	// rows event names (go-mysql's BinlogParser.tables); a statement maps
	// a table or two, looked up in a slice; past stmtScan of them, in
	// stmtMap.
	stmt    []stmtTable
	stmtMap map[uint64]*mappedTable
	// parsed counts the table maps go-mysql's parser decoded since it was
	// made (eventParser.renewParser).
	parsed int
}

// stmtScan is how many table maps of a statement are looked up one by one.
const stmtScan = 8

// stmtTable is a table map of the statement being read.
type stmtTable struct {
	id uint64
	m  *mappedTable
}

func newTableMaps() *tableMaps {
	return &tableMaps{known: map[uint64]*mappedTable{}}
}

// mapped notes m as the statement's table map of table id id.
func (t *tableMaps) mapped(id uint64, m *mappedTable) {
	if t.stmtMap != nil {
		t.stmtMap[id] = m
		return
	}
	for i := range t.stmt {
		if t.stmt[i].id == id {
			t.stmt[i].m = m
			return
		}
	}
	if len(t.stmt) < stmtScan {
		t.stmt = append(t.stmt, stmtTable{id, m})
		return
	}
	t.stmtMap = make(map[uint64]*mappedTable, 2*stmtScan)
	for _, st := range t.stmt {
		t.stmtMap[st.id] = st.m
	}
	t.stmtMap[id] = m
}

// of is the statement's table map of table id id; nil when it has none.
func (t *tableMaps) of(id uint64) *mappedTable {
	if t.stmtMap != nil {
		return t.stmtMap[id]
	}
	for i := range t.stmt {
		if t.stmt[i].id == id {
			return t.stmt[i].m
		}
	}
	return nil
}

// none reports whether the statement has mapped no table.
func (t *tableMaps) none() bool { return len(t.stmt) == 0 }

// endStatement forgets the statement's table maps.
func (t *tableMaps) endStatement() {
	clear(t.stmt)
	t.stmt, t.stmtMap = t.stmt[:0], nil
}

// uncapturedRowsEvent stands for a rows event of a table the reader does
// not capture: nothing of it was decoded beyond its table id and flags.
type uncapturedRowsEvent struct {
	TableID uint64
	Flags   uint16
}

// Decode is never called: the parser builds the event itself.
func (e *uncapturedRowsEvent) Decode([]byte) error {
	return errors.New("uncapturedRowsEvent is not decoded")
}

// Dump writes the event for go-mysql's Dump.
func (e *uncapturedRowsEvent) Dump(w io.Writer) {
	fmt.Fprintf(w, "Rows of a table not captured, table id %d, flags %d\n", e.TableID, e.Flags)
}

// body is ev's body without its checksum; ok false when it is shorter
// than its checksum.
func (ep *eventParser) body(raw []byte) ([]byte, bool) {
	if len(raw) < replication.EventHeaderSize {
		return nil, false
	}
	b := raw[replication.EventHeaderSize:]
	if ep.checksum {
		if len(b) < replication.BinlogChecksumLength {
			return nil, false
		}
		b = b[:len(b)-replication.BinlogChecksumLength]
	}
	return b, true
}

// hot decodes ev, a raw event of the stream, when it is a hot event
// (above); ok false leaves it to go-mysql's parser.
func (ep *eventParser) hot(ev *replication.BinlogEvent) (ok bool, err error) {
	if ep.maps == nil || ep.format == nil {
		return false, nil
	}
	h := ev.Header
	body, ok := ep.body(ev.RawData)
	if !ok {
		return false, nil
	}
	var e replication.Event
	hot := &ep.hotEvents
	switch h.EventType {
	case replication.MARIADB_GTID_EVENT:
		hot.mariadbGTID = replication.MariadbGTIDEvent{}
		hot.mariadbGTID.GTID.ServerID = h.ServerID // as go-mysql's parser sets it
		e = &hot.mariadbGTID
	case replication.GTID_EVENT:
		hot.gtid = replication.GTIDEvent{}
		e = &hot.gtid
	case replication.XID_EVENT:
		hot.xid = replication.XIDEvent{}
		e = &hot.xid
	case replication.QUERY_EVENT:
		hot.query = replication.QueryEvent{}
		e = &hot.query
	case replication.TABLE_MAP_EVENT:
		return ep.tableMap(ev, body)
	default:
		if rowsEventTypes[h.EventType] {
			return ep.rows(ev, body)
		}
		return false, nil
	}
	if err := e.Decode(body); err != nil {
		return true, eventError(h, ev.RawData, err)
	}
	ev.Event = e
	if err := ep.track(ev); err != nil {
		return true, eventError(h, ev.RawData, err)
	}
	return true, nil
}

// tableMap takes a table map: the one known for its id when it repeats
// its bytes, else go-mysql's decoding of it.
func (ep *eventParser) tableMap(ev *replication.BinlogEvent, body []byte) (bool, error) {
	id, ok := ep.tableID(replication.TABLE_MAP_EVENT, body)
	if !ok {
		return false, nil // go-mysql refuses it
	}
	if m := ep.maps.known[id]; m != nil && bytes.Equal(m.body, body) {
		ep.maps.mapped(id, m)
		ev.Event = m.tm
		return true, nil
	}
	if err := ep.renewParser(); err != nil {
		return true, eventError(ev.Header, ev.RawData, err)
	}
	parsed, err := ep.decode(ep.p, ev.RawData)
	if err != nil {
		return true, eventError(ev.Header, ev.RawData, err)
	}
	tm, ok := parsed.Event.(*replication.TableMapEvent)
	if !ok {
		return true, eventError(ev.Header, ev.RawData, fmt.Errorf("a table map decoded as %T", parsed.Event))
	}
	m := &mappedTable{body: bytes.Clone(body), tm: tm, captured: ep.captured(tm.Schema, tm.Table)}
	ep.maps.mapped(tm.TableID, m)
	if tm.TableID == id {
		if len(ep.maps.known) >= maxMappedTables {
			clear(ep.maps.known)
		}
		ep.maps.known[id] = m
	}
	ev.Event = tm
	return true, nil
}

// renewParser counts a table map go-mysql's parser is about to decode and,
// past maxMappedTables of them, between two statements, replaces the
// parser with a new one of the stream's format: go-mysql's parser keeps
// every table map it decodes until the end of a statement it decodes
// itself, which the hot path no longer gives it, so that a stream meeting
// new table ids without end (a server gives a table a new one each time it
// opens it anew) would hold them all. Its table maps serve nothing
// between statements: the stream's rows events are decoded with the hot
// path's (rowsHeader).
func (ep *eventParser) renewParser() error {
	if ep.maps.parsed++; ep.maps.parsed <= maxMappedTables || !ep.maps.none() {
		return nil
	}
	p := ep.newParser(ep.streamRows)
	if _, err := p.Parse(ep.fde); err != nil {
		return fmt.Errorf("format description for a new parser: %w", err)
	}
	ep.p, ep.maps.parsed = p, 1
	return nil
}

// rows takes a rows event of a table its statement mapped: one of a table
// not captured becomes an uncapturedRowsEvent, undecoded; one of a
// captured table is decoded by streamRows into a RowsEvent copied from the
// parser's template of its type (go-mysql's decode options, as its parser
// set them: rowsTemplate). False leaves it to go-mysql's parser: a table
// id its statement did not map (go-mysql's error), or no template yet (the
// first rows event of its type makes it).
func (ep *eventParser) rows(ev *replication.BinlogEvent, body []byte) (bool, error) {
	h := ev.Header
	id, ok := ep.tableID(h.EventType, body)
	size := ep.tableIDSize(h.EventType)
	if !ok || len(body) < size+2 {
		return false, nil
	}
	m := ep.maps.of(id)
	if m == nil {
		return false, nil
	}
	if m.captured {
		t := ep.templates[h.EventType]
		if t == nil {
			return false, nil
		}
		e := &ep.hotEvents.rows
		*e = *t
		ep.rowsType = h.EventType
		if err := ep.streamRows(e, body); err != nil {
			return true, eventError(h, ev.RawData, err)
		}
		ev.Event = e
		return true, nil
	}
	flags := binary.LittleEndian.Uint16(body[size:])
	ep.endOfStatement(flags)
	ep.hotEvents.uncaptured = uncapturedRowsEvent{TableID: id, Flags: flags}
	ev.Event = &ep.hotEvents.uncaptured
	return true, nil
}

// rowsTemplate keeps e, a rows event go-mysql's parser made, as the
// template of its type t: its decode options (unexported: the event
// type, the table id's size, whether MariaDB compressed it, the time
// options), with every field decoded from an event cleared.
func (ep *eventParser) rowsTemplate(t replication.EventType, e *replication.RowsEvent) {
	if ep.templates == nil {
		ep.templates = map[replication.EventType]*replication.RowsEvent{}
	}
	if ep.templates[t] != nil {
		return
	}
	c := *e
	c.Table, c.TableID, c.Flags, c.NdbFormat, c.NdbData, c.PartitionId, c.SourcePartitionId = nil, 0, 0, 0, nil, 0, 0
	c.ColumnCount, c.ColumnBitmap1, c.ColumnBitmap2, c.Rows, c.SkippedColumns = 0, nil, nil, nil, nil
	ep.templates[t] = &c
}

// endOfStatement forgets the statement's table maps after its last rows
// event, as go-mysql's parser does.
func (ep *eventParser) endOfStatement(flags uint16) {
	if flags&replication.RowsEventStmtEndFlag != 0 {
		ep.maps.endStatement()
	}
}

// tableIDSize is the bytes of the table id in an event of type t: as
// go-mysql reads it, 4 when the format description gives the type a
// post-header of 6 bytes, else 6.
func (ep *eventParser) tableIDSize(t replication.EventType) int {
	if i := int(t) - 1; i >= 0 && i < len(ep.format.EventTypeHeaderLengths) && ep.format.EventTypeHeaderLengths[i] == 6 {
		return 4
	}
	return 6
}

// tableID reads the table id at the start of body, an event of type t.
func (ep *eventParser) tableID(t replication.EventType, body []byte) (uint64, bool) {
	n := ep.tableIDSize(t)
	if len(body) < n {
		return 0, false
	}
	return mysql.FixedLengthInt(body[:n]), true
}

// rowsEventTypes are the rows events go-mysql decodes as RowsEvent, by
// type code.
var rowsEventTypes = func() (types [256]bool) {
	for _, t := range []replication.EventType{
		replication.WRITE_ROWS_EVENTv0, replication.UPDATE_ROWS_EVENTv0, replication.DELETE_ROWS_EVENTv0,
		replication.WRITE_ROWS_EVENTv1, replication.UPDATE_ROWS_EVENTv1, replication.DELETE_ROWS_EVENTv1,
		replication.WRITE_ROWS_EVENTv2, replication.UPDATE_ROWS_EVENTv2, replication.DELETE_ROWS_EVENTv2,
		replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1, replication.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1,
		replication.MARIADB_DELETE_ROWS_COMPRESSED_EVENT_V1, replication.PARTIAL_UPDATE_ROWS_EVENT,
	} {
		types[t] = true
	}
	return types
}()

// hasAfterImage reports whether rows events of type t carry a second
// column bitmap (go-mysql's needBitmap2).
func hasAfterImage(t replication.EventType) bool {
	switch t {
	case replication.UPDATE_ROWS_EVENTv1, replication.UPDATE_ROWS_EVENTv2, replication.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1,
		replication.PARTIAL_UPDATE_ROWS_EVENT:
		return true
	}
	return false
}

// errRowsHeader: a rows event's header runs past its data.
var errRowsHeader = errors.New("rows event header runs past the event")

// rowsHeader decodes the header of e, a rows event of type t, from data
// as go-mysql's RowsEvent.DecodeHeader does (its fields, its errors for a
// table id its statement did not map), where go-mysql would index past
// data an error; its table is the statement's table map of its id. It
// returns that table map and where the row images start.
func (ep *eventParser) rowsHeader(e *replication.RowsEvent, t replication.EventType, data []byte) (*mappedTable, int, error) {
	size := ep.tableIDSize(t)
	if len(data) < size+2 {
		return nil, 0, errRowsHeader
	}
	e.TableID = mysql.FixedLengthInt(data[:size])
	pos := size
	e.Flags = binary.LittleEndian.Uint16(data[pos:])
	pos += 2
	if e.Version == 2 {
		if len(data) < pos+2 {
			return nil, 0, errRowsHeader
		}
		extra := int(binary.LittleEndian.Uint16(data[pos:]))
		pos += 2
		if extra > 2 {
			if err := rowsExtraData(e, t, data[pos:]); err != nil {
				return nil, 0, err
			}
		}
		// go-mysql adds extra-2 as an uint16: 0 and 1 wrap around.
		pos += int(uint16(extra - 2))
		if pos > len(data) {
			return nil, 0, errRowsHeader
		}
	}
	if len(data) > pos {
		need := 0
		switch data[pos] {
		case 0xfc:
			need = 3
		case 0xfd:
			need = 4
		case 0xfe:
			need = 9
		}
		if len(data) < pos+need {
			return nil, 0, errRowsHeader
		}
	}
	var n int
	e.ColumnCount, _, n = mysql.LengthEncodedInt(data[pos:])
	pos += n
	width := (e.ColumnCount + 7) / 8
	images := uint64(1)
	if hasAfterImage(t) {
		images = 2
	}
	if e.ColumnCount > uint64(len(data)-pos)*8 || width*images > uint64(len(data)-pos) {
		return nil, 0, errRowsHeader
	}
	e.ColumnBitmap1 = data[pos : pos+int(width)]
	pos += int(width)
	if images == 2 {
		e.ColumnBitmap2 = data[pos : pos+int(width)]
		pos += int(width)
	}
	m := ep.maps.of(e.TableID)
	if m == nil {
		if !ep.maps.none() {
			return nil, 0, fmt.Errorf("invalid table id %d, no corresponding table map event", e.TableID)
		}
		return nil, 0, fmt.Errorf("table id %d: invalid table id, no corresponding table map event", e.TableID)
	}
	e.Table = m.tm
	return m, pos, nil
}

// rowsExtraData reads a v2 rows event's extra row data as go-mysql's
// decodeExtraData does.
func rowsExtraData(e *replication.RowsEvent, t replication.EventType, data []byte) error {
	if len(data) < 1 {
		return errRowsHeader
	}
	switch data[0] {
	case replication.ENUM_EXTRA_ROW_INFO_TYPECODE_NDB:
		if len(data) < 3 {
			return errRowsHeader
		}
		n := int(data[1])
		if n < 2 || len(data) < 3+n-2 {
			return errRowsHeader
		}
		e.NdbFormat = data[2]
		e.NdbData = data[3 : 3+n-2]
	case replication.ENUM_EXTRA_ROW_INFO_TYPECODE_PARTITION:
		if len(data) < 3 {
			return errRowsHeader
		}
		e.PartitionId = binary.LittleEndian.Uint16(data[1:])
		if t == replication.UPDATE_ROWS_EVENTv1 || t == replication.UPDATE_ROWS_EVENTv2 || t == replication.PARTIAL_UPDATE_ROWS_EVENT {
			if len(data) < 5 {
				return errRowsHeader
			}
			e.SourcePartitionId = binary.LittleEndian.Uint16(data[3:])
		}
	}
	return nil
}

// streamRows is the rows decoder of the stream's parser: the header by
// rowsHeader, the images of a captured table's by decodeRows with
// its table map's plan.
func (ep *eventParser) streamRows(e *replication.RowsEvent, data []byte) error {
	m, pos, err := ep.rowsHeader(e, ep.rowsType, data)
	if err != nil {
		return err
	}
	ep.endOfStatement(e.Flags)
	if !m.captured {
		return nil
	}
	return decodeRows(e, pos, data, ep.limit, m.columnPlan)
}
