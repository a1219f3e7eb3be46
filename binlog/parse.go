package binlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"
)

// The relay decodes the replication stream's events itself: go-mysql's
// syncer runs in raw mode (it parses only format descriptions and
// rotations, and hands every other event on as bytes), and eventParser
// decodes them with a go-mysql parser of its own, in the reader's
// goroutine. Left to itself, go-mysql (v1.16.0) would decompress a
// Transaction_payload event (binlog_transaction_compression) whole, with
// no bound, before anything of the relay's sees it: a few hundred KB of
// zstd that inflate to a GiB took the relay to 2.6 GB, and again at each
// retry. Here the relay owns that decision (payload.go: the bound, the
// decompression) and every message about an event (eventError: never more
// than a short prefix of its bytes; go-mysql's own errors quote the whole
// event, row data included). With raw mode the syncer no longer tracks the
// GTID set either: eventParser attaches it to XID and Query events as
// go-mysql did (XIDEvent.GSet, QueryEvent.GSet).

// ErrChecksumMismatch: an event of a binlog written with
// binlog_checksum=CRC32 does not match its CRC32 (its bytes changed on the
// server's disk or on the way). Nothing of it is decoded, and the relay
// stops at its transaction: the same bytes come back on a retry.
var ErrChecksumMismatch = errors.New("binlog event does not match its checksum")

// eventParser decodes one stream's raw events. Use it from one goroutine.
type eventParser struct {
	flavor string
	p      *replication.BinlogParser
	// fde is the stream's format description event as received; checksum
	// whether its events end with a CRC32.
	fde      []byte
	checksum bool
	// only, when set, names the event types to decode; others stay as they
	// came (a Dump reads GTID events and heartbeats, nothing else).
	only func(replication.EventType) bool
	// captured, when set, names the tables whose rows events the parsers
	// decode (a Reader's captured tables); nil leaves rows undecoded.
	// rowsErr is what the rows decoder returned for the event being
	// parsed: go-mysql keeps only its text.
	captured func(schema, table []byte) bool
	rowsErr  error
	// format is the stream's format description; maps its table maps and
	// rowsType the type of the rows event go-mysql is parsing, for the hot
	// path (hotparse.go), which runs when the parser decodes rows.
	format    *replication.FormatDescriptionEvent
	maps      *tableMaps
	rowsType  replication.EventType
	hotEvents hotEvents
	// templates: a rows event of each type go-mysql's parser made, its
	// decoded fields cleared (rowsTemplate).
	templates map[replication.EventType]*replication.RowsEvent
	// limit is the bound of a compressed transaction's decompressed bytes
	// and where it comes from (the packet bound, loginguard.go).
	limit func() (int64, string)
	// start is the set the stream started after; executed it plus the
	// GTIDs read, nil until the first.
	start, executed mysql.GTIDSet
	// snapshot is a copy of executed, made for the first event that carries
	// it since executed last changed and handed to the others (MySQL's BEGIN
	// and XID of one transaction share it): no one writes a GTIDSet an
	// event carries.
	snapshot mysql.GTIDSet
	inflater *inflater
}

func newEventParser(flavor string, start mysql.GTIDSet, limit func() (int64, string), captured func(schema, table []byte) bool) *eventParser {
	ep := &eventParser{flavor: flavor, start: start, limit: limit, captured: captured}
	if captured != nil {
		ep.maps = newTableMaps()
	}
	ep.p = ep.newParser(ep.streamRows)
	return ep
}

// newParser is a go-mysql parser with the reader's options; rows decodes
// the rows events of captured tables (streamRows for the stream's events,
// whose table maps the hot path keeps; rowsDecoder for those of a
// compressed transaction).
func (ep *eventParser) newParser(rows func(*replication.RowsEvent, []byte) error) *replication.BinlogParser {
	p := replication.NewBinlogParser()
	p.SetFlavor(ep.flavor)
	// TIMESTAMP values as text in this zone; decodeInsertRows renders
	// them the same way.
	p.SetTimestampStringLocation(timestampLocation)
	p.SetParseTime(false)
	p.SetUseDecimal(false)
	// MySQL's binary JSON rendered as MySQL itself prints it (key order,
	// 1.0 stays 1.0): the closest text to what the application stored.
	p.SetRenderJSONAsMySQLText(true)
	p.SetVerifyChecksum(false)
	p.SetRowsEventDecodeFunc(func(e *replication.RowsEvent, data []byte) error {
		if ep.captured == nil {
			return nil
		}
		ep.rowsErr = rows(e, data)
		return ep.rowsErr
	})
	return p
}

// parse decodes ev, which the raw-mode syncer read, and returns the event
// to use in its place, valid until the next call (hotEvents).
func (ep *eventParser) parse(ev *replication.BinlogEvent) (out *replication.BinlogEvent, err error) {
	h := ev.Header
	defer func() {
		// go-mysql's decoders index into the event without checking its
		// length: a malformed event panics.
		if r := recover(); r != nil {
			out, err = nil, eventError(h, ev.RawData, fmt.Errorf("decoder panicked: %s", clip(fmt.Sprint(r), errTextBytes)))
		}
	}()
	if h.EventType != replication.FORMAT_DESCRIPTION_EVENT { // checked once decoded, below
		if err := verify(ev.RawData, ep.checksum); err != nil {
			return nil, eventError(h, ev.RawData, err)
		}
	}
	switch h.EventType {
	case replication.FORMAT_DESCRIPTION_EVENT:
		if _, err := ep.p.Parse(ev.RawData); err != nil {
			return nil, eventError(h, ev.RawData, err)
		}
		fde, ok := ev.Event.(*replication.FormatDescriptionEvent)
		if !ok {
			return nil, eventError(h, ev.RawData, errors.New("format description not decoded"))
		}
		if err := verify(ev.RawData, fde.ChecksumAlgorithm == replication.BINLOG_CHECKSUM_ALG_CRC32); err != nil {
			return nil, eventError(h, ev.RawData, err)
		}
		ep.fde, ep.format = ev.RawData, fde
		ep.checksum = fde.ChecksumAlgorithm == replication.BINLOG_CHECKSUM_ALG_CRC32
		return ev, nil
	case replication.ROTATE_EVENT:
		return ev, nil // decoded by the syncer
	}
	if _, raw := ev.Event.(*replication.GenericEvent); !raw || ep.only != nil && !ep.only(h.EventType) {
		return ev, nil
	}
	if ok, err := ep.hot(ev); ok {
		if err != nil {
			return nil, err
		}
		return ev, nil
	}
	ep.rowsType = h.EventType
	switch h.EventType {
	case replication.TRANSACTION_PAYLOAD_EVENT:
		return ep.payload(ev)
	case replication.MARIADB_QUERY_COMPRESSED_EVENT:
		if err := ep.checkCompressedQuery(ev.RawData); err != nil {
			return nil, eventError(h, ev.RawData, err)
		}
	}
	parsed, err := ep.decode(ep.p, ev.RawData)
	if err != nil {
		return nil, eventError(h, ev.RawData, err)
	}
	if e, ok := parsed.Event.(*replication.RowsEvent); ok && ep.maps != nil {
		ep.rowsTemplate(h.EventType, e)
	}
	parsed.Header = h // as the syncer left it
	if err := ep.track(parsed); err != nil {
		return nil, eventError(h, ev.RawData, err)
	}
	return parsed, nil
}

// verify checks raw, an event, against the CRC32 it ends with
// when checksum says its binlog has them (a format description: its own
// algorithm byte, after it is decoded), as a replica's I/O thread does:
// nothing the server wrote is decoded from other bytes. That holds for the
// events the dump thread makes rather than reads from the binlog too: once
// a format description said CRC32, MySQL and MariaDB checksum the
// heartbeats and the rotations they send (a rotation to the next file, read
// from the binlog or made for it) with the binlog's algorithm, and the
// stream's position follows a rotation's name and offset. Only the rotation
// a dump starts with comes before any format description: it carries a
// checksum only if the replica declared CRC32 (go-mysql declares NONE), and
// checksum is still false for it.
func verify(raw []byte, checksum bool) error {
	if !checksum {
		return nil
	}
	n := len(raw) - replication.BinlogChecksumLength
	if n < replication.EventHeaderSize {
		return fmt.Errorf("%w: an event of %d bytes has no room for its checksum", ErrChecksumMismatch, len(raw))
	}
	if want, got := binary.LittleEndian.Uint32(raw[n:]), crc32.ChecksumIEEE(raw[:n]); want != got {
		return fmt.Errorf("%w: it ends with CRC32 %08x, its bytes give %08x (binlog_checksum=CRC32)", ErrChecksumMismatch, want, got)
	}
	return nil
}

// checkCompressedQuery refuses a MariaDB compressed query event whose
// declared size is over the bound (checkCompressed): its statement follows
// the query event's post-header (thread id, time, schema length, error
// code, status variables' length), the status variables and the schema
// with its NUL.
func (ep *eventParser) checkCompressedQuery(raw []byte) error {
	body := raw[min(replication.EventHeaderSize, len(raw)):]
	if ep.checksum && len(body) >= replication.BinlogChecksumLength {
		body = body[:len(body)-replication.BinlogChecksumLength]
	}
	if len(body) < 13 {
		return fmt.Errorf("%w: a compressed query event of %d bytes", ErrPayloadCorrupt, len(body))
	}
	pos := 13 + int(binary.LittleEndian.Uint16(body[11:])) + int(body[8]) + 1
	if pos > len(body) {
		return fmt.Errorf("%w: a compressed query event's statement starts past its %d bytes", ErrPayloadCorrupt, len(body))
	}
	if ep.limit == nil {
		return nil
	}
	return checkCompressed(body[pos:], ep.limit)
}

// decode parses one event with p; a rows decoder's error comes back as
// it was returned.
func (ep *eventParser) decode(p *replication.BinlogParser, raw []byte) (*replication.BinlogEvent, error) {
	if err := checkEvent(raw); err != nil { // what go-mysql would allocate without bound (eventshape.go)
		return nil, err
	}
	ep.rowsErr = nil
	e, err := p.Parse(raw)
	if err != nil && ep.rowsErr != nil {
		err = ep.rowsErr
	}
	return e, err
}

// track follows the GTID set as go-mysql's syncer does outside raw mode:
// each GTID event adds its GTID to the set the stream started after, and
// XID and Query events carry the set so far (the set including their
// transaction).
func (ep *eventParser) track(ev *replication.BinlogEvent) error {
	switch e := ev.Event.(type) {
	case *replication.GTIDEvent, *replication.GtidTaggedLogEvent, *replication.MariadbGTIDEvent:
		if ep.start == nil {
			return nil
		}
		if ep.executed == nil {
			ep.executed = ep.start.Clone()
		}
		ep.snapshot = nil
		return addGTID(ep.executed, e)
	case *replication.XIDEvent:
		e.GSet = ep.current()
	case *replication.QueryEvent:
		e.GSet = ep.current()
	}
	return nil
}

func (ep *eventParser) current() mysql.GTIDSet {
	if ep.executed == nil {
		return nil
	}
	if ep.snapshot == nil {
		ep.snapshot = ep.executed.Clone()
	}
	return ep.snapshot
}

// addGTID adds the GTID of event e to set.
func addGTID(set mysql.GTIDSet, e replication.Event) error {
	var g *replication.GTIDEvent
	var tag mysql.Tag
	switch e := e.(type) {
	case *replication.GTIDEvent:
		g = e
	case *replication.GtidTaggedLogEvent:
		g, tag = &e.GTIDEvent, e.Tag
	case *replication.MariadbGTIDEvent:
		s, ok := set.(*mysql.MariadbGTIDSet)
		if !ok {
			return fmt.Errorf("a MariaDB gtid event in a stream of %T", set)
		}
		return s.AddSet(&e.GTID)
	default:
		return nil
	}
	s, ok := set.(*mysql.MysqlGTIDSet)
	if !ok {
		return fmt.Errorf("a MySQL gtid event in a stream of %T", set)
	}
	u, err := uuid.FromBytes(g.SID)
	if err != nil {
		return fmt.Errorf("gtid event: %w", err)
	}
	s.AddGTIDWithTag(u, tag, g.GNO)
	return nil
}

// errTextBytes bounds what a message quotes of an event's bytes or of a
// library's error about them.
const errTextBytes = 256

// eventError is the relay's error for an event it could not decode: the
// event's type, position and size, the first bytes of its data and a
// clipped cause; never the event's data whole (go-mysql's EventError
// quotes it all, and its row decoder adds the rows decoded so far).
func eventError(h *replication.EventHeader, raw []byte, cause error) error {
	var sentinel error
	for _, s := range []error{ErrPayloadBound, ErrPayloadCorrupt, ErrMalformedEvent, ErrChecksumMismatch} {
		if errors.Is(cause, s) {
			sentinel = s
		}
	}
	msg := cause.Error()
	var ee *replication.EventError
	if errors.As(cause, &ee) {
		msg = ee.Err
	}
	if sentinel == nil {
		// go-mysql's text: its row decoder's panic message goes on with
		// ", data %q, parsed rows %#v, table map %#v"
		if i := strings.Index(msg, ", data "); i >= 0 {
			msg = msg[:i] + " (the rest of the decoder's message quotes the event)"
		}
		msg = clip(msg, errTextBytes)
	}
	typ, pos, size := "unknown", uint32(0), len(raw)
	if h != nil {
		typ, pos = h.EventType.String(), h.LogPos
	}
	// The header, and a query's fixed part: none of the statement or data
	// an event carries after them (a rows query event's statement, a LOAD
	// DATA block), which may hold a password.
	head := raw[:min(len(raw), replication.EventHeaderSize)]
	if h != nil && (h.EventType == replication.QUERY_EVENT || h.EventType == replication.MARIADB_QUERY_COMPRESSED_EVENT) {
		head = raw[:min(len(raw), replication.EventHeaderSize+13)]
	}
	err := fmt.Errorf("decode binlog event %s (end position %d, %d bytes, first %d: %x): %s", typ, pos, size, len(head), head, msg)
	if sentinel != nil {
		return &sentinelError{err: err, sentinel: sentinel}
	}
	return err
}

// syncerError is err, from the raw-mode syncer's stream, as the relay
// words it: an event the syncer could not decode (a format description or
// rotation: go-mysql's EventError quotes it whole) as eventError, and any
// other long message (a panic of the syncer comes with its goroutine's
// stack) clipped.
func syncerError(err error) error {
	var ee *replication.EventError
	if errors.As(err, &ee) {
		return eventError(ee.Header, ee.Data, err)
	}
	if msg := err.Error(); len(msg) > 4*errTextBytes {
		return &clippedError{msg: clip(msg, 4*errTextBytes), err: err}
	}
	return err
}

// clippedError is err with its message clipped; errors.Is and As see err.
type clippedError struct {
	msg string
	err error
}

func (e *clippedError) Error() string { return e.msg }
func (e *clippedError) Unwrap() error { return e.err }

// sentinelError is a message of the relay's with the sentinel it means.
type sentinelError struct {
	err      error
	sentinel error
}

func (e *sentinelError) Error() string { return e.err.Error() }
func (e *sentinelError) Unwrap() error { return e.sentinel }

// clip shortens s to at most n bytes, saying how long it was.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:n], len(s))
}

// eventLength reads the length of the event whose header starts b.
func eventLength(b []byte) (int, bool) {
	if len(b) < replication.EventHeaderSize {
		return 0, false
	}
	return int(binary.LittleEndian.Uint32(b[9:13])), true
}
