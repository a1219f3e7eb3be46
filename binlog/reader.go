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
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"
)

// ErrNoColumnNames: a captured table's rows arrived without column names.
var ErrNoColumnNames = errors.New("binlog has no column names")

// Kind tells an Event's meaning.
type Kind uint8

const (
	// KindRows carries rows of one captured table from one binlog rows event.
	KindRows Kind = iota + 1
	// KindCommit ends a source transaction: everything before it is committed.
	KindCommit
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
}

// String is db.table.
func (t *Table) String() string { return t.Schema + "." + t.Name }

// Event is one item of the stream.
type Event struct {
	Kind Kind
	// GTID of the source transaction the event belongs to.
	GTID string
	// Rows: the table, the operation and the row images (for updates, the
	// after images).
	Table *Table
	Op    Op
	Rows  [][]any
	// Commit: the GTID set including this transaction.
	Set mysql.GTIDSet
	// Time is the transaction's commit time (on rows and commits).
	Time time.Time
	// Size is the number of binlog bytes the event accounts for.
	Size int
}

// Reader streams one server's binlog. Use it once: Run, then discard.
type Reader struct {
	cfg    Config
	srv    *Server
	tables map[string]map[string]bool
	logger *slog.Logger
}

// NewReader returns a reader of srv (from Inspect) for cfg.Tables.
func NewReader(cfg Config, srv *Server, logger *slog.Logger) *Reader {
	tables := make(map[string]map[string]bool)
	for _, t := range cfg.Tables {
		db, tbl, _ := strings.Cut(t, ".")
		if tables[db] == nil {
			tables[db] = make(map[string]bool)
		}
		tables[db][tbl] = true
	}
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Reader{cfg: cfg, srv: srv, tables: tables, logger: logger}
}

func (r *Reader) captured(schema, table []byte) bool {
	return r.tables[string(schema)][string(table)]
}

// Run streams every transaction after from into out until ctx ends or the
// connection fails; it never reconnects by itself (the caller resumes from
// its committed checkpoint). It returns ctx.Err() after cancellation.
func (r *Reader) Run(ctx context.Context, from string, out chan<- Event) error {
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
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID:         r.cfg.ServerID,
		Flavor:           r.srv.Flavor,
		Host:             host,
		Port:             uint16(port),
		User:             r.cfg.User,
		Password:         r.cfg.Password,
		TLSConfig:        tlsFor(r.cfg.TLS, r.srv.Addr),
		HeartbeatPeriod:  r.cfg.HeartbeatPeriod,
		ReadTimeout:      3 * r.cfg.HeartbeatPeriod,
		DisableRetrySync: true, // resume from the Kafka checkpoint, never from memory
		UseDecimal:       false,
		Logger:           r.logger,
		RowsEventDecodeFunc: func(e *replication.RowsEvent, data []byte) error {
			pos, err := e.DecodeHeader(data)
			if err != nil {
				return err
			}
			if !r.captured(e.Table.Schema, e.Table.Table) {
				return nil // not ours: skip decoding the row images
			}
			return e.DecodeData(pos, data)
		},
	})
	defer syncer.Close()
	stream, err := syncer.StartSyncGTID(set)
	if err != nil {
		return mapStreamErr(fmt.Errorf("start binlog at %q: %w", from, err))
	}
	var (
		gtid       string
		commitTime time.Time
		size       int
		tableCache = map[*replication.TableMapEvent]*Table{}
	)
	for {
		ev, err := stream.GetEvent(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return mapStreamErr(fmt.Errorf("read binlog: %w", err))
		}
		size += int(ev.Header.EventSize)
		switch e := ev.Event.(type) {
		case *replication.GTIDEvent:
			u, err := uuid.FromBytes(e.SID)
			if err != nil {
				return fmt.Errorf("read binlog: gtid event: %w", err)
			}
			gtid = u.String() + ":" + strconv.FormatInt(e.GNO, 10)
			commitTime = time.Unix(int64(ev.Header.Timestamp), 0)
			if e.ImmediateCommitTimestamp > 0 {
				commitTime = time.UnixMicro(int64(e.ImmediateCommitTimestamp))
			}
		case *replication.GtidTaggedLogEvent:
			u, err := uuid.FromBytes(e.SID)
			if err != nil {
				return fmt.Errorf("read binlog: gtid event: %w", err)
			}
			gtid = u.String() + ":" + e.Tag.String() + ":" + strconv.FormatInt(e.GNO, 10)
			commitTime = time.UnixMicro(int64(e.ImmediateCommitTimestamp))
		case *replication.MariadbGTIDEvent:
			gtid = e.GTID.String()
			commitTime = time.Unix(int64(ev.Header.Timestamp), 0)
		case *replication.RowsEvent:
			if e.Table == nil || len(e.Rows) == 0 || !r.captured(e.Table.Schema, e.Table.Table) {
				continue
			}
			t := tableCache[e.Table]
			if t == nil {
				cols := e.Table.ColumnNameString()
				if len(cols) == 0 {
					return fmt.Errorf("%w: table %s.%s at %s: set binlog_row_metadata=FULL on the server",
						ErrNoColumnNames, e.Table.Schema, e.Table.Table, gtid)
				}
				t = &Table{Schema: string(e.Table.Schema), Name: string(e.Table.Table), Columns: cols}
				tableCache[e.Table] = t
			}
			out2 := Event{Kind: KindRows, GTID: gtid, Table: t, Time: commitTime, Size: size}
			size = 0
			switch e.Type() {
			case replication.EnumRowsEventTypeInsert:
				out2.Op, out2.Rows = OpInsert, e.Rows
			case replication.EnumRowsEventTypeDelete:
				out2.Op, out2.Rows = OpDelete, e.Rows
			case replication.EnumRowsEventTypeUpdate:
				out2.Op = OpUpdate
				for i := 1; i < len(e.Rows); i += 2 {
					out2.Rows = append(out2.Rows, e.Rows[i])
				}
			default:
				continue
			}
			if err := send(ctx, out, out2); err != nil {
				return err
			}
		case *replication.XIDEvent:
			if err := r.commit(ctx, out, gtid, e.GSet, commitTime, &size); err != nil {
				return err
			}
			clear(tableCache)
		case *replication.QueryEvent:
			q := strings.TrimSpace(string(e.Query))
			if strings.EqualFold(q, "BEGIN") {
				continue
			}
			// COMMIT of a non-transactional change, or a DDL statement: both
			// end their transaction.
			if err := r.commit(ctx, out, gtid, e.GSet, commitTime, &size); err != nil {
				return err
			}
			clear(tableCache)
		}
	}
}

func (r *Reader) commit(ctx context.Context, out chan<- Event, gtid string, set mysql.GTIDSet, t time.Time, size *int) error {
	if set == nil {
		return fmt.Errorf("read binlog: commit of %s without a gtid set", gtid)
	}
	ev := Event{Kind: KindCommit, GTID: gtid, Set: set, Time: t, Size: *size}
	*size = 0
	return send(ctx, out, ev)
}

func send(ctx context.Context, out chan<- Event, ev Event) error {
	select {
	case out <- ev:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// mapStreamErr turns the server's "binlog purged" answer into ErrPurged.
func mapStreamErr(err error) error {
	var me *mysql.MyError
	if errors.As(err, &me) && me.Code == mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG {
		return fmt.Errorf("%w: %s: the server no longer has the binlogs needed; set a new position with `outbox-relay checkpoint set` knowing the events in between are skipped", ErrPurged, me.Message)
	}
	return err
}
