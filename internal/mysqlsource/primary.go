package mysqlsource

import (
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	vtmysql "vitess.io/vitess/go/mysql"
)

// Options shape a double. Zero values give a MySQL 8.0 primary with
// gtid_mode ON, binlog_row_metadata FULL, no compression, and a relay
// account (relay / relay-pw) granted REPLICATION SLAVE, REPLICATION CLIENT
// and SELECT on *.*.
type Options struct {
	Version     string // "8.0.40" (default) or "8.4.3"
	UUID        string // server_uuid; random by default
	ServerID    uint32 // server_id; 1 by default
	RowMetadata string // binlog_row_metadata: FULL (default) or MINIMAL
	// Compression is binlog_transaction_compression: transactions are
	// logged as a GTID event and a zstd Transaction_payload event.
	Compression bool
	// BinlogChecksum is binlog_checksum: CRC32 (default), every event of
	// the binlog ends with its CRC32; NONE, none does (the format
	// description's own is there all the same, as MySQL writes it).
	BinlogChecksum string
	User           string // default relay
	Password       string // default relay-pw
	// Grants is what SHOW GRANTS answers for the user (MySQL's form, e.g.
	// "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `relay`@`%`").
	Grants []string
	// Roles: role name ("`r`@`%`") -> the role's grants, shown by SHOW
	// GRANTS ... USING role.
	Roles map[string][]string
	// RolesInactive: the roles are granted but not active in sessions (no
	// SET DEFAULT ROLE, activate_all_roles_on_login OFF).
	RolesInactive bool
	// Variables override the server's global variables (binlog_format,
	// gtid_mode...).
	Variables map[string]string
	// ReplicaOf: SHOW REPLICA STATUS shows this source host (the double
	// is a replica).
	ReplicaOf string
	// Addr to listen on; 127.0.0.1:0 by default.
	Addr string
}

// Insert is one INSERT statement: rows of a table, logged as one
// WRITE_ROWS event after the table's table map.
type Insert struct {
	Table *Table
	Rows  [][]any
	// Logged marks the columns the row images hold (a session's
	// binlog_row_image MINIMAL logs those the statement set, NOBLOB leaves
	// out the BLOB and TEXT ones it did not); nil: every column (FULL).
	// The values of the others are not logged.
	Logged []bool
}

// Update is one UPDATE statement: pairs of before and after images of a
// table's rows, logged as one UPDATE_ROWS event (PartialJSON: a
// PARTIAL_UPDATE_ROWS_EVENT, as binlog_row_value_options=PARTIAL_JSON
// logs it) after the table's table map.
type Update struct {
	Table *Table
	Rows  [][2][]any
	// Before and After mark the columns each image holds (MINIMAL: the
	// key before, the changed columns after); nil: every column.
	Before, After []bool
	PartialJSON   bool
}

// XID is an XA transaction id: gtrid, bqual, formatID.
type XID struct {
	GTRID, BQual string
	FormatID     int
}

// sql renders the xid as MySQL logs it: X'hex',X'hex',formatID.
func (x XID) sql() string {
	return fmt.Sprintf("X'%s',X'%s',%d", hex.EncodeToString([]byte(x.GTRID)), hex.EncodeToString([]byte(x.BQual)), x.FormatID)
}

// XAPhase is how an XA transaction's rows end their binlog group.
type XAPhase uint8

// XA phases.
const (
	XAPrepare  XAPhase = iota + 1 // XA END; XA PREPARE: prepared, commits later
	XAOnePhase                    // XA COMMIT ... ONE PHASE
)

// Tx is one transaction to commit on the double.
type Tx struct {
	// GTID is "uuid:n" or (8.4) "uuid:tag:n"; empty: the server's own
	// uuid and its next number.
	GTID string
	// Inserts are logged as BEGIN, table maps and rows, XID (or, with XA,
	// XA START ... XA END, XA_PREPARE); Updates after them.
	Inserts []Insert
	Updates []Update
	XA      *XID
	Phase   XAPhase
	// Statement without Inserts is a standalone statement (DDL, XA COMMIT
	// X'..',X'',1, XA ROLLBACK ...) logged as one Query event in DB.
	Statement string
	DB        string
	// Time is the commit time; now by default.
	Time time.Time
	// Uncompressed logs this transaction uncompressed even with
	// Options.Compression (as MySQL does for some transactions).
	Uncompressed bool
	// PayloadPad, with Options.Compression, adds that many zero bytes
	// after the transaction's events inside its Transaction_payload: a
	// second zstd frame of RLE blocks, 4 bytes for each 128 KiB (a zstd
	// bomb: 1 GiB in 32 KiB).
	PayloadPad int64
	// PayloadDeclared, when not 0, is the uncompressed size the payload
	// declares instead of its own (a lie).
	PayloadDeclared uint64
}

// loggedEvent is one event of a binlog file with what SHOW BINLOG EVENTS
// says of it.
type loggedEvent struct {
	data      event
	typ, info string
	pos       uint32 // start position
	gtid      *GTID  // the transaction the event belongs to
}

// binlogFile is one binary log file of the double.
type binlogFile struct {
	name   string
	prev   *Set // Previous_gtids
	events []loggedEvent
	size   uint32
	seq    int64 // logical clock of the file
	closed bool
}

// record is one committed transaction, as the history replicas copy.
type record struct {
	gtid GTID
	tx   Tx
}

// Primary is the MySQL primary double: a binary log of committed
// transactions served over the MySQL protocol.
type Primary struct {
	opts     Options
	sid      uuid.UUID
	mu       sync.Mutex
	changed  chan struct{} // closed and replaced at every change of the binlog
	files    []*binlogFile
	purged   *Set
	executed *Set
	history  []record
	tables   map[string]*Table
	nextID   uint64
	w, inner *writer
	srv      *netServer
	unknown  []string
	replicas map[uint32]*handler // dumps by server_id
	started  time.Time
}

// Start starts a double listening on opts.Addr (127.0.0.1:0 by default).
func Start(opts Options) (*Primary, error) {
	if opts.Version == "" {
		opts.Version = "8.0.40"
	}
	if opts.UUID == "" {
		opts.UUID = uuid.NewString()
	}
	if opts.ServerID == 0 {
		opts.ServerID = 1
	}
	if opts.RowMetadata == "" {
		opts.RowMetadata = "FULL"
	}
	switch opts.BinlogChecksum = strings.ToUpper(opts.BinlogChecksum); opts.BinlogChecksum {
	case "":
		opts.BinlogChecksum = "CRC32"
	case "CRC32", "NONE":
	default:
		return nil, fmt.Errorf("mysqlsource: binlog_checksum %q: CRC32 or NONE", opts.BinlogChecksum)
	}
	if opts.User == "" {
		opts.User, opts.Password = "relay", "relay-pw"
	}
	if opts.Grants == nil {
		opts.Grants = []string{"GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `" + opts.User + "`@`%`"}
	}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	p := &Primary{opts: opts, sid: mustUUID(opts.UUID), changed: make(chan struct{}), purged: NewSet(), started: time.Now(),
		executed: NewSet(), tables: map[string]*Table{}, nextID: 100, replicas: map[uint32]*handler{},
		w: newWriter(opts.Version, opts.ServerID, opts.BinlogChecksum == "CRC32"), inner: newWriter(opts.Version, opts.ServerID, false)}
	p.newFile()
	srv, err := listen(p, opts.Addr)
	if err != nil {
		return nil, err
	}
	p.srv = srv
	return p, nil
}

// Addr is host:port of the double.
func (p *Primary) Addr() string { return p.srv.addr }

// UUID is the double's server_uuid.
func (p *Primary) UUID() string { return p.sid.String() }

// Version is the version the double claims.
func (p *Primary) Version() string { return p.opts.Version }

// Close stops listening and drops every connection.
func (p *Primary) Close() { p.srv.close() }

// Restart drops every connection and listens again on the same address,
// keeping the binlog, as a restarted mysqld does.
func (p *Primary) Restart() error {
	p.srv.close()
	srv, err := listen(p, p.srv.addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.srv = srv
	p.mu.Unlock()
	return nil
}

// DropConnections closes every client connection (the binlog dump ones
// included) and keeps listening.
func (p *Primary) DropConnections() { p.srv.dropAll() }

// Executed is gtid_executed.
func (p *Primary) Executed() *Set {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.executed.Clone()
}

// Purged is gtid_purged.
func (p *Primary) Purged() *Set {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.purged.Clone()
}

// CreateTable adds a table and logs its CREATE TABLE as a standalone DDL
// transaction of the server's uuid (OutboxDDL for the outbox columns).
func (p *Primary) CreateTable(db, name string, cols []Column, ddl string) (*Table, error) {
	p.mu.Lock()
	p.nextID++
	t := &Table{DB: db, Name: name, Columns: cols, id: p.nextID}
	p.tables[db+"."+name] = t
	p.mu.Unlock()
	if ddl == "" {
		var defs []string
		for _, c := range cols {
			_, _, sqlType := typeInfo(c.Type)
			defs = append(defs, fmt.Sprintf("`%s` %s NOT NULL", c.Name, sqlType))
		}
		ddl = fmt.Sprintf("CREATE TABLE `%s`.`%s` (%s, PRIMARY KEY (`%s`))", db, name, strings.Join(defs, ", "), cols[0].Name)
	}
	_, err := p.Commit(Tx{Statement: ddl, DB: db})
	return t, err
}

// CreateOutbox creates db.name with OutboxColumns.
func (p *Primary) CreateOutbox(db, name string) (*Table, error) {
	return p.CreateTable(db, name, OutboxColumns, fmt.Sprintf(OutboxDDL, db, name))
}

// Commit logs tx at the end of the current binlog file and returns its
// GTID. A GTID the server already executed is refused, as MySQL refuses
// SET gtid_next to one.
func (p *Primary) Commit(tx Tx) (GTID, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.commitLocked(tx)
}

func (p *Primary) commitLocked(tx Tx) (GTID, error) {
	var g GTID
	if tx.GTID == "" {
		g = GTID{SID: p.sid, GNO: 1}
		for _, x := range p.executed.m[sidTag{sid: p.sid}] {
			g.GNO = max(g.GNO, x.end+1)
		}
	} else {
		var err error
		if g, err = ParseGTID(tx.GTID); err != nil {
			return g, err
		}
		if g.Tag != "" && !tagged(p.opts.Version) {
			return g, fmt.Errorf("commit %s: MySQL %s has no tagged GTIDs", g, p.opts.Version)
		}
	}
	if p.executed.Contains(g) {
		return g, fmt.Errorf("commit %s: @@SESSION.GTID_NEXT is already used (error 1837)", g)
	}
	if tx.Time.IsZero() {
		tx.Time = time.Now()
	}
	if err := p.log(g, tx); err != nil {
		return g, err
	}
	p.executed.Add(g)
	p.history = append(p.history, record{gtid: g, tx: tx})
	p.notify()
	return g, nil
}

func (p *Primary) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Table returns a table created with CreateTable.
func (p *Primary) Table(db, name string) *Table {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tables[db+"."+name]
}

// Rotate closes the current binlog file and starts the next, as FLUSH
// BINARY LOGS does.
func (p *Primary) Rotate() {
	p.mu.Lock()
	defer p.mu.Unlock()
	cur := p.files[len(p.files)-1]
	next := nextName(cur.name)
	ev := event(vtmysql.NewRotateEvent(p.w.f, p.w.s, 4, next).Bytes())
	p.append(cur, ev, "Rotate", next+";pos=4", nil, uint32(time.Now().Unix()))
	cur.closed = true
	p.newFile()
	p.notify()
}

func nextName(name string) string {
	var n int
	fmt.Sscanf(name[strings.LastIndexByte(name, '.')+1:], "%d", &n)
	return fmt.Sprintf("binlog.%06d", n+1)
}

// PurgeTo removes the binlog files before file (PURGE BINARY LOGS TO):
// their transactions join gtid_purged.
func (p *Primary) PurgeTo(file string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, f := range p.files {
		if f.name != file {
			continue
		}
		for _, old := range p.files[:i] {
			for _, e := range old.events {
				if e.gtid != nil {
					p.purged.Add(*e.gtid)
				}
			}
		}
		p.files = p.files[i:]
		p.notify()
		return nil
	}
	return fmt.Errorf("purge binary logs to %s: not found (error 1373)", file)
}

// Files lists the binlog files (SHOW BINARY LOGS).
func (p *Primary) Files() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, f := range p.files {
		out = append(out, f.name)
	}
	return out
}

// newFile opens a binlog file: format description, then Previous_gtids.
func (p *Primary) newFile() {
	name := "binlog.000001"
	if n := len(p.files); n > 0 {
		name = nextName(p.files[n-1].name)
	}
	f := &binlogFile{name: name, prev: p.executed.Clone(), size: 4}
	p.files = append(p.files, f)
	now := uint32(time.Now().Unix())
	fde := event(vtmysql.NewFormatDescriptionEvent(p.w.f, p.w.s).Bytes())
	p.append(f, fde, "Format_desc", "Server ver: "+p.opts.Version+", Binlog ver: 4", nil, now)
	p.append(f, p.w.previousGTIDsEvent(f.prev), "Previous_gtids", f.prev.Flat(), nil, now)
}

// append stamps ev at the end of f.
func (p *Primary) append(f *binlogFile, ev event, typ, info string, g *GTID, ts uint32) {
	start := f.size
	ev = p.w.stamp(ev, ts, start+uint32(len(ev)))
	f.events = append(f.events, loggedEvent{data: ev, typ: typ, info: info, pos: start, gtid: g})
	f.size += uint32(len(ev))
}

// part is an event of a transaction before it is placed in a file.
type part struct {
	ev        event
	typ, info string
}

// log encodes tx's events and appends them to the current file.
func (p *Primary) log(g GTID, tx Tx) error {
	f := p.files[len(p.files)-1]
	compress := p.opts.Compression && !tx.Uncompressed && tx.XA == nil && len(tx.Inserts)+len(tx.Updates) > 0
	w := p.w
	if compress {
		w = p.inner
	}
	var parts []part
	query := func(db, sql string) {
		parts = append(parts, part{event(vtmysql.NewQueryEvent(w.f, w.s, vtmysql.Query{Database: db, SQL: sql}).Bytes()), "Query", sql})
	}
	switch {
	case len(tx.Inserts)+len(tx.Updates) == 0:
		if tx.Statement == "" {
			return fmt.Errorf("commit %s: no inserts and no statement", g)
		}
		query(tx.DB, tx.Statement)
	default:
		var db string
		if len(tx.Inserts) > 0 {
			db = tx.Inserts[0].Table.DB
		} else {
			db = tx.Updates[0].Table.DB
		}
		if tx.XA != nil {
			query(db, "XA START "+tx.XA.sql())
		} else {
			query(db, "BEGIN")
		}
		for _, in := range tx.Inserts {
			parts = append(parts, part{w.tableMapEvent(in.Table, strings.EqualFold(p.opts.RowMetadata, "FULL")), "Table_map",
				fmt.Sprintf("table_id: %d (%s.%s)", in.Table.id, in.Table.DB, in.Table.Name)})
			rows, err := w.writeRowsEvent(in.Table, in.Rows, in.Logged, true)
			if err != nil {
				return fmt.Errorf("commit %s: %w", g, err)
			}
			parts = append(parts, part{rows, "Write_rows", fmt.Sprintf("table_id: %d flags: STMT_END_F", in.Table.id)})
		}
		for _, up := range tx.Updates {
			parts = append(parts, part{w.tableMapEvent(up.Table, strings.EqualFold(p.opts.RowMetadata, "FULL")), "Table_map",
				fmt.Sprintf("table_id: %d (%s.%s)", up.Table.id, up.Table.DB, up.Table.Name)})
			rows, err := w.updateRowsEvent(up, true)
			if err != nil {
				return fmt.Errorf("commit %s: %w", g, err)
			}
			name := "Update_rows"
			if up.PartialJSON {
				name = "Update_rows_partial"
			}
			parts = append(parts, part{rows, name, fmt.Sprintf("table_id: %d flags: STMT_END_F", up.Table.id)})
		}
		switch {
		case tx.XA == nil:
			parts = append(parts, part{event(vtmysql.NewXIDEvent(w.f, w.s).Bytes()), "Xid", "COMMIT /* xid=0 */"})
		case tx.Phase == XAOnePhase:
			query(db, "XA END "+tx.XA.sql())
			parts = append(parts, part{w.xaPrepareEvent(*tx.XA, true), "XA_prepare", "XA COMMIT " + tx.XA.sql() + " ONE PHASE"})
		default:
			query(db, "XA END "+tx.XA.sql())
			parts = append(parts, part{w.xaPrepareEvent(*tx.XA, false), "XA_prepare", "XA PREPARE " + tx.XA.sql()})
		}
	}
	ts := uint32(tx.Time.Unix())
	if compress {
		inner := make([]event, len(parts))
		for i, pt := range parts {
			inner[i] = p.inner.stamp(pt.ev, ts, 0)
		}
		payload, err := p.w.payloadEvent(inner, tx.PayloadPad, tx.PayloadDeclared)
		if err != nil {
			return err
		}
		size := 0
		for _, e := range inner {
			size += len(e)
		}
		parts = []part{{payload, "Transaction_payload", fmt.Sprintf("compression='ZSTD', decompressed_size=%d bytes", size)}}
	}
	f.seq++
	txLen := uint64(0)
	for _, pt := range parts {
		txLen += uint64(len(pt.ev))
	}
	ver := serverVersionNumber(p.opts.Version)
	gev := p.w.gtidEvent(g, f.seq, uint64(tx.Time.UnixMicro()), txLen, ver)
	gev = p.w.gtidEvent(g, f.seq, uint64(tx.Time.UnixMicro()), txLen+uint64(len(gev)), ver)
	gp := &g
	name := "Gtid"
	if g.Tag != "" {
		name = "Gtid_tagged_log_event" // how MySQL 8.3+ names it in SHOW BINLOG EVENTS
	}
	p.append(f, gev, name, fmt.Sprintf("SET @@SESSION.GTID_NEXT= '%s'", g), gp, ts)
	for _, pt := range parts {
		p.append(f, pt.ev, pt.typ, pt.info, gp, ts)
	}
	return nil
}

// Replica starts a second double that holds this one's history under the
// same GTIDs in binlog files of its own (a replica with
// log_replica_updates), for failover tests. Later commits reach it with
// Apply.
func (p *Primary) Replica(opts Options) (*Primary, error) {
	r, err := Start(opts)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	hist := append([]record(nil), p.history...)
	tables := map[string]*Table{}
	for k, t := range p.tables {
		tables[k] = t
	}
	p.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, t := range tables {
		r.tables[k] = t
	}
	for _, h := range hist {
		tx := h.tx
		tx.GTID = h.gtid.String()
		if _, err := r.commitLocked(tx); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Apply replicates the transactions of src that this double lacks, in
// src's order (a replica catching up).
func (p *Primary) Apply(src *Primary) error {
	src.mu.Lock()
	hist := append([]record(nil), src.history...)
	src.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range hist {
		if p.executed.Contains(h.gtid) {
			continue
		}
		tx := h.tx
		tx.GTID = h.gtid.String()
		if _, err := p.commitLocked(tx); err != nil {
			return err
		}
	}
	return nil
}

// AlterTable replaces t's columns and logs ddl (the ALTER TABLE that makes
// them so) as a standalone transaction: later table maps and rows follow
// the new layout.
func (p *Primary) AlterTable(t *Table, cols []Column, ddl string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Columns = cols
	_, err := p.commitLocked(Tx{Statement: ddl, DB: t.DB})
	return err
}
