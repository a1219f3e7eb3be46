package binlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/schema"
)

// ErrNoColumnNames: a captured table's rows arrived without column names
// and its layout is not known from the DDL read so far.
var ErrNoColumnNames = errors.New("binlog has no column names")

// ErrSchemaMismatch: the binlog's column names disagree with the layout
// tracked from DDL.
var ErrSchemaMismatch = errors.New("binlog columns disagree with the tracked schema")

// Kind tells an Event's meaning.
type Kind uint8

const (
	// KindRows carries rows of one captured table from one binlog rows event.
	KindRows Kind = iota + 1
	// KindCommit ends a source transaction: everything before it is committed.
	KindCommit
	// KindDDL reports a statement that changed a captured table's layout,
	// or one the schema tracker could not parse (Note says which).
	KindDDL
	// KindPrepare: the XA transaction XID was prepared. Its rows (KindRows
	// events with that XID) are not committed: a later KindCommit with the
	// same XID commits them, a KindRollback discards them. Set includes the
	// prepare's GTID.
	KindPrepare
	// KindRollback: XA ROLLBACK of a prepared XA transaction (XID).
	KindRollback
	// KindWarning: something an operator should know (Note), that does not
	// stop the stream.
	KindWarning
	// KindIgnored: a statement that mentions a captured table but changes
	// no layout (a trigger, an event, a grant...); Note says which.
	KindIgnored
	// KindHeartbeat: the server sent a heartbeat between transactions, which
	// it does only when it has nothing more to send: everything before this
	// event is all the server had (the relay's lag is 0). Time is when it
	// arrived.
	KindHeartbeat
)

// Op is the row operation.
type Op uint8

// Row operations.
const (
	OpInsert Op = iota + 1
	OpUpdate
	OpDelete
)

func (o Op) String() string {
	switch o {
	case OpInsert:
		return "insert"
	case OpUpdate:
		return "update"
	case OpDelete:
		return "delete"
	}
	return "unknown"
}

// Table names a captured table and its columns at the time of the event.
type Table struct {
	Schema  string
	Name    string
	Columns []string
	// Latin1 marks character columns stored in latin1; nil when none is.
	Latin1 []bool
}

// String is db.table.
func (t *Table) String() string { return t.Schema + "." + t.Name }

// Event is one item of the stream.
type Event struct {
	Kind Kind
	// GTID of the source transaction the event belongs to.
	GTID string
	// XID: rows of an XA transaction (held until it commits), or the XA
	// transaction a KindCommit (XA COMMIT, or a one-phase XA commit),
	// KindPrepare or KindRollback ends. Canonical form: see parseXID.
	XID string
	// OnePhase marks the KindCommit of an XA transaction committed in one
	// phase (XA COMMIT ... ONE PHASE): it was never prepared.
	OnePhase bool
	// Rows: the table, the operation and the row images (for updates, the
	// after images).
	Table *Table
	Op    Op
	Rows  [][]any
	// Absent: the columns of Table an INSERT's row images lack (a
	// session's binlog_row_image MINIMAL or NOBLOB; rowimage.go); nil when
	// the images are whole. Such an event has no Rows: its rows are in
	// Image, the values of the columns present only. A row with one is
	// never published (the relay stops at its transaction's end:
	// PartialImageError).
	Absent []string
	Image  *PartialImage
	// Commit: the GTID set including this transaction, and the captured
	// tables' layout and signedness after it (immutable snapshots).
	Set      mysql.GTIDSet
	Schema   schema.Tables
	Unsigned schema.Signs
	// Provisional: the tables of Schema whose layout awaits its check
	// against a table map (schema.Provisional).
	Provisional schema.Provisional
	// Digest: on a commit, the digest of the transaction's rows inserted
	// into captured tables (digest.go); nil when it has none, and on XA
	// transactions.
	Digest *TxDigest
	// DDL: the statement and what became of it.
	Note string
	// Time is the transaction's commit time (on rows and commits).
	Time time.Time
	// File and Pos, on a commit, are the binlog file and offset after the
	// event that ended the transaction on the server read (ReadPosition
	// then: the end of a compressed payload for the events inside it);
	// "" and 0 when the server had not named its file.
	File string
	Pos  uint32
	// Size is the number of binlog bytes the event accounts for.
	Size int
	// Undecoded, for rows (inserts), says per row why the reader did not
	// decode one of its values (a JSON document nested too deep: the value
	// is an Undecoded); "" for a row decoded whole. Nil when every row is.
	// Such a row is a bad row.
	Undecoded []string
}

// RowCount is how many rows a rows event holds: its Rows, the rows of a
// partial image (Image), and one for a partial JSON update, whose images
// are not decoded (as router.invalid_op counts it).
func (e *Event) RowCount() int {
	switch {
	case e.Image != nil:
		return len(e.Image.Rows)
	case len(e.Rows) == 0:
		return 1 // the reader hands on no rows event without rows but this one
	}
	return len(e.Rows)
}

// UndecodedRow is Undecoded[i], "" when the row was decoded whole.
func (e *Event) UndecodedRow(i int) string {
	if i < len(e.Undecoded) {
		return e.Undecoded[i]
	}
	return ""
}

// batchBytes bounds the binlog bytes a batch the reader hands on accounts
// for (about; one event more at most): large rows go on in several
// batches, so that the loop's channel holds a bounded number of bytes (1 MB
// batches against 4 MB: a sixth less relay CPU in bulk catch-up,
// BENCHMARKS.md). A batch is handed on earlier at the end of each burst the
// server sent (conn.go).
const batchBytes = 1 << 20

// Reader streams one server's binlog. Use it once: Run, then discard.
type Reader struct {
	cfg    Config
	srv    *Server
	tables map[string]map[string]bool
	// folded: the captured tables by their names in lower case, when the
	// server's names fold (srv.Names): lower "db.table" to the configured
	// names.
	folded  map[string]Table
	logger  *slog.Logger
	tracker *schema.Tracker
	done    mysql.GTIDSet // see Published
	gate    *readGate     // the replication connection's reads (conn.go)
	// file and pos: the end of the last event read (see ReadPosition).
	file atomic.Pointer[string]
	pos  atomic.Uint32
	// streaming is closed at the first event of the stream (see Streaming).
	streaming     chan struct{}
	streamingOnce sync.Once
	// free: batches the loop is done with (Release), for the next ones.
	free chan []Event
}

// freeBatches is how many batches the loop is done with the reader keeps
// for its next ones (two wait in the loop's channel, one is handled).
const freeBatches = 4

// Release gives back a batch Run sent, once the caller is done with it and
// with every pointer into it: the reader fills it again with later events.
// Optional (a batch not given back is collected as any other); safe to call
// from any goroutine.
func (r *Reader) Release(batch []Event) {
	clear(batch) // nothing of its events stays reachable through it
	select {
	case r.free <- batch[:0]:
	default:
	}
}

// newBatch is an empty batch with room for room Events at least: one
// given back (Release) when it has that room, else a new one.
func (r *Reader) newBatch(room int) []Event {
	select {
	case b := <-r.free:
		if cap(b) >= room {
			return b
		}
	default:
	}
	return make([]Event, 0, room)
}

// Streaming is closed once Run has received the first event of its binlog
// stream: the server has logged the relay in, registered it as a replica
// and started sending its binlog. Until then the reader only connects.
func (r *Reader) Streaming() <-chan struct{} { return r.streaming }

// ReadPosition is the binlog file and offset after the last event the
// reader has converted, as of its last hand-off to the loop ("" before the
// server named its file). Safe to call while Run runs; file and offset are
// read separately, good for a sample.
func (r *Reader) ReadPosition() (file string, pos uint32) {
	if f := r.file.Load(); f != nil {
		file = *f
	}
	return file, r.pos.Load()
}

// Received is the number of bytes read off the replication connection so
// far. Safe to call while Run runs.
func (r *Reader) Received() int64 { return r.gate.total.Load() }

// track notes ev's place in the server's binlog files, in st (published
// for ReadPosition once per hand-off: publish). Heartbeats and events
// without a position (the server's fake rotate at the start, events inside
// a compressed payload) leave it as it is.
func track(st *streamState, ev *replication.BinlogEvent) {
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		st.file, st.pos = string(e.NextLogName), uint32(e.Position)
	case *replication.HeartbeatEvent:
	default:
		if p := ev.Header.LogPos; p > st.pos {
			st.pos = p
		}
	}
}

// publish makes st's place in the binlog what ReadPosition says.
func (r *Reader) publish(st *streamState) {
	if f := r.file.Load(); f == nil || *f != st.file {
		name := st.file
		r.file.Store(&name)
	}
	r.pos.Store(st.pos)
}

// NewReader returns a reader of srv (from source.Inspect) for cfg.Tables; tracker
// holds the captured tables' layout at the start position (it may know
// nothing when the binlog carries column names).
func NewReader(cfg Config, srv *Server, tracker *schema.Tracker, logger *slog.Logger) *Reader {
	tables := make(map[string]map[string]bool)
	var folded map[string]Table
	for _, t := range cfg.Tables {
		db, tbl, _ := strings.Cut(t, ".")
		if tables[db] == nil {
			tables[db] = make(map[string]bool)
		}
		tables[db][tbl] = true
		if srv.Names == schema.NamesFolded {
			if folded == nil {
				folded = map[string]Table{}
			}
			folded[strings.ToLower(t)] = Table{Schema: db, Name: tbl}
		}
	}
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Reader{cfg: cfg, srv: srv, tables: tables, folded: folded, logger: logger, tracker: tracker,
		gate: newReadGate(), streaming: make(chan struct{}), free: make(chan []Event, freeBatches)}
}

// captured reports whether db.table is a captured table, as the server
// compares names (lower_case_table_names).
func (r *Reader) captured(db, table []byte) bool {
	if r.tables[string(db)][string(table)] {
		return true
	}
	if r.folded == nil {
		return false
	}
	_, ok := r.folded[strings.ToLower(string(db)+"."+string(table))]
	return ok
}

// configured is the captured table db.table under its configured names
// (the server's may differ in letter case when its names fold).
func (r *Reader) configured(db, table string) (string, string) {
	if r.folded == nil || r.tables[db][table] {
		return db, table
	}
	if t, ok := r.folded[strings.ToLower(db+"."+table)]; ok {
		return t.Schema, t.Name
	}
	return db, table
}

func (r *Reader) newFramer() framer {
	f := framer{captured: r.captured, savepoints: map[string]int{}, allowStatements: r.cfg.AllowStatementDML}
	for _, t := range r.cfg.Tables {
		_, tbl, _ := strings.Cut(t, ".")
		f.names = append(f.names, strings.ToLower(tbl))
	}
	return f
}

// Run streams every transaction after from into out, in batches of events
// in binlog order, until ctx ends or the connection fails; it never
// reconnects by itself (the caller resumes from its committed checkpoint). It
// returns ctx.Err() after cancellation. A batch holds what the server had
// sent when it was cut: one event when the stream is idle, many in catch-up.
func (r *Reader) Run(ctx context.Context, from string, out chan<- []Event) error {
	set, err := ParseSet(r.srv.Flavor, from)
	if err != nil {
		return err
	}
	host, portStr, err := net.SplitHostPort(r.srv.Addr)
	if err != nil {
		return fmt.Errorf("start binlog: address %q: %w", r.srv.Addr, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return fmt.Errorf("start binlog: port %q: %w", portStr, err)
	}
	raws := make(chan []*replication.BinlogEvent, 1)
	h := &streamHandler{r: r, ctx: ctx, out: raws}
	r.gate.before = h.handOn
	var repl atomic.Pointer[sourceConn] // the replication connection, for its phases (deadline.go)
	watch := &watchdog{gate: r.gate, base: syncerDialer(ctx, r.cfg, func(c *sourceConn) { repl.Store(c) })}
	guard := newLoginGuard(r.cfg, r.srv.Addr)
	scfg := replication.BinlogSyncerConfig{
		ServerID:        r.cfg.ServerID,
		Flavor:          r.srv.Flavor,
		Host:            host,
		Port:            uint16(port),
		User:            r.cfg.User,
		Password:        guard.clientPassword(),
		TLSConfig:       tlsFor(r.cfg.TLS, r.srv.Addr),
		HeartbeatPeriod: r.cfg.HeartbeatPeriod,
		// No ReadTimeout: go-mysql would set a socket deadline per packet,
		// a quarter of the relay's CPU in catch-up. The watchdog below
		// notices a silent connection instead.
		Dialer:           guard.dial(watch.dial),
		Option:           func(c *client.Conn) error { setPhase(&repl, phaseRegister); return guard.bound(c) },
		DisableRetrySync: true, // resume from the Kafka checkpoint, never from memory
		// go-mysql's reading goroutine hands the events to h (conn.go),
		// none into go-mysql's channel of this many.
		SynchronousEventHandler: h,
		EventCacheCount:         1,
		Logger:                  r.logger,
		// The reader decodes the events itself (parse.go): go-mysql would
		// decompress a compressed transaction without bound, and quote a
		// whole event in its errors.
		RawModeEnabled: true,
	}
	syncer := replication.NewBinlogSyncer(scfg)
	defer logClose(guard, syncer, r.logger)
	// Runs before syncer.Close: go-mysql's Close waits for its reading
	// goroutine, which may wait for the loop to take a batch (conn.go).
	defer r.gate.release()
	stream, err := login(guard, func() (*replication.BinlogStreamer, error) { return syncer.StartSyncGTID(set) })
	if err != nil {
		return guard.or(mapStreamErr(fmt.Errorf("start binlog at %q: %w", from, phaseErr(&repl, err))))
	}
	setPhase(&repl, phaseStream)
	// The silence bound watches the stream only: until it starts, each
	// wait has its phase's bound (deadline.go), which names the phase and
	// the host (the watchdog, shorter by default, would cut a hung
	// registration short as a bare closed connection).
	stopWatch := watch.start(3 * r.cfg.HeartbeatPeriod)
	defer stopWatch()
	// h hands on the events in bursts (raws); the stream's end (the
	// server's, the connection's) comes from go-mysql's streamer.
	ended := make(chan struct{})
	var endErr error
	streamCtx, stopStream := context.WithCancel(ctx)
	go func() {
		defer close(ended)
		_, endErr = stream.GetEvent(streamCtx)
	}()
	defer func() {
		stopStream()
		<-ended
	}()
	st := &streamState{tableCache: map[uint64]*cachedTable{}, frame: r.newFramer()}
	parser := newEventParser(r.srv.Flavor, set, guard.packetBound, r.captured)
	var room int
	for {
		select {
		case evs := <-raws:
			if room, err = r.convertBurst(ctx, st, parser, evs, room, out); err != nil {
				return err
			}
			continue
		case <-ctx.Done():
			return ctx.Err()
		case <-ended:
		}
		if ctx.Err() != nil {
			return ctx.Err() // stopped: nothing more is handed on
		}
		// The bursts handed on before the end are taken first, then the
		// one go-mysql gathered after its last read of the socket: a
		// stream that ends without another read (an error the server
		// flushed with its last events, an event the syncer refused) ends
		// after the transactions read with it. go-mysql's goroutine has
		// returned: the stream's end came after its last event.
		for more := true; more; {
			evs := h.burst
			select {
			case evs = <-raws:
			default:
				more, h.burst = false, nil
			}
			if room, err = r.convertBurst(ctx, st, parser, evs, room, out); err != nil {
				return err
			}
		}
		err = endErr
		if watch.fired.Load() {
			err = fmt.Errorf("%w (no data, not even a heartbeat, for %s)", err, 3*r.cfg.HeartbeatPeriod)
		}
		return guard.orGrown(ctx, mapStreamErr(fmt.Errorf("read binlog: %w", syncerError(err))))
	}
}

// convertBurst converts the events of one burst (evs, as the raw-mode
// syncer read them) and sends what they become to out in batches of about
// batchBytes at most: room Events at first (0: a few), and it returns the
// room the next burst's batch starts with (a quarter more than this one
// held). On an error it sends what came before it first, so that the loop
// can commit the transactions that ended before it.
func (r *Reader) convertBurst(ctx context.Context, st *streamState, parser *eventParser, evs []*replication.BinlogEvent,
	room int, out chan<- []Event) (int, error) {
	batch := r.newBatch(max(16, room))
	size := 0
	for i, ev := range evs {
		evs[i] = nil // go-mysql's copy can go once converted
		n := len(batch)
		var err error
		if batch, err = r.take(st, parser, ev, batch); err != nil {
			r.publish(st)
			if len(batch) > 0 {
				if serr := send(ctx, out, batch); serr != nil {
					return room, serr
				}
			}
			return room, err
		}
		for _, e := range batch[n:] {
			size += e.Size
		}
		if size >= batchBytes {
			// Large rows: hand on what is converted, so that the loop's
			// channel holds a bounded number of bytes.
			r.publish(st)
			if err := send(ctx, out, batch); err != nil {
				return room, err
			}
			batch, size = r.newBatch(len(batch)), 0
		}
	}
	r.publish(st)
	room = len(batch) + len(batch)/4
	if len(batch) == 0 {
		return room, nil
	}
	return room, send(ctx, out, batch)
}

// streamHandler takes the stream's events on go-mysql's reading goroutine
// (SynchronousEventHandler) into a burst, which goes to the reader's
// goroutine before the replication connection's next read of the socket
// (handOn, conn.go), or at batchBytes of binlog: one hand-off per burst the
// server sent, the reader converting one burst while go-mysql reads the
// next.
type streamHandler struct {
	r     *Reader
	ctx   context.Context
	out   chan<- []*replication.BinlogEvent
	burst []*replication.BinlogEvent
	size  int // binlog bytes the burst holds
	room  int // events a new burst has room for
}

// HandleEvent takes ev, as the raw-mode syncer read it, into the burst.
func (h *streamHandler) HandleEvent(ev *replication.BinlogEvent) error {
	h.r.streamingOnce.Do(func() { close(h.r.streaming) })
	if h.burst == nil {
		h.burst = make([]*replication.BinlogEvent, 0, max(16, h.room))
	}
	h.burst = append(h.burst, ev)
	if h.size += int(ev.Header.EventSize); h.size >= batchBytes {
		return h.handOn()
	}
	return nil
}

// handOn gives the burst to the reader, waiting while it has not taken the
// one before; nothing when the burst is empty.
func (h *streamHandler) handOn() error {
	if len(h.burst) == 0 {
		return nil
	}
	if err := handOn(h.r.gate, h.ctx, h.out, h.burst); err != nil {
		return err
	}
	// The next burst has room for a quarter more events than this one
	// held: bursts of a stream are alike.
	h.room = len(h.burst) + len(h.burst)/4
	h.burst, h.size = nil, 0
	return nil
}

// take decodes ev, as the raw-mode syncer read it, and appends what it
// becomes to batch.
func (r *Reader) take(st *streamState, parser *eventParser, ev *replication.BinlogEvent, batch []Event) ([]Event, error) {
	ev, err := parser.parse(ev)
	if err != nil {
		return batch, err
	}
	return r.step(st, ev, batch)
}

// step appends what ev, a decoded event, becomes to batch.
func (r *Reader) step(st *streamState, ev *replication.BinlogEvent, batch []Event) ([]Event, error) {
	track(st, ev)
	batch, err := r.convert(st, ev, batch)
	if err != nil && r.skipPublished(st, err) {
		err = nil
	}
	return batch, err
}

// Published tells the reader that the transactions in set were published
// (or skipped by an operator) before: a restart that reads them again (from
// before a prepared XA transaction) must not stop where they made the relay
// stop before. Call before Run.
func (r *Reader) Published(set mysql.GTIDSet) { r.done = set }

// skipPublished reports whether err, a stop in the transaction being
// framed, is in a transaction Published covers; the framer then ignores
// the rest of it.
func (r *Reader) skipPublished(st *streamState, err error) bool {
	f := &st.frame
	if r.done == nil || f.gtid == "" || !(errors.Is(err, ErrStatementLogged) || errors.Is(err, ErrRolledBackRows) ||
		errors.Is(err, ErrUnframed)) {
		return false
	}
	one, perr := ParseSet(r.srv.Flavor, f.gtid)
	if perr != nil || !r.done.Contain(one) {
		return false
	}
	f.state = stateSkip
	return true
}

func send(ctx context.Context, out chan<- []Event, batch []Event) error {
	select {
	case out <- batch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
