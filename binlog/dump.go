package binlog

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// Dump is a short replication connection for a look at what a server
// serves (package source: its probe of a position, its try of REPLICATION
// SLAVE), opened as the Reader opens its own: the login guard, and each
// wait bounded by its phase (deadline.go). It decodes no row, but those of
// the tables NewRowsDump names, and nothing it is not read for (go-mysql
// runs in raw mode; its DumpStream decodes, parse.go). Close it.
type Dump struct {
	flavor string
	syncer *replication.BinlogSyncer
	guard  *loginGuard
	repl   atomic.Pointer[sourceConn] // the replication connection, for its phases
	// decode: the tables whose rows it decodes (NewRowsDump); nil: none.
	decode func(db, table []byte) bool
}

// NewDump prepares a replication connection to addr, a server of flavor,
// registering as a replica with serverID (not the relay's own: the server
// drops an earlier dump connection with the same server_id) and, when
// heartbeat is not 0, asking for heartbeats that often. The end of ctx
// closes its connections.
func NewDump(ctx context.Context, cfg Config, addr, flavor string, serverID uint32, heartbeat time.Duration) (*Dump, error) {
	return newDump(ctx, cfg, addr, flavor, serverID, heartbeat, nil)
}

// NewRowsDump is NewDump for reading one transaction's digest (Digest):
// it decodes the rows of tables (db.table, in any letter case, as the
// digest counts them) as the Reader decodes captured tables' rows.
func NewRowsDump(ctx context.Context, cfg Config, addr, flavor string, serverID uint32, heartbeat time.Duration, tables []string) (*Dump, error) {
	set := map[string]bool{}
	for _, t := range tables {
		set[strings.ToLower(t)] = true
	}
	return newDump(ctx, cfg, addr, flavor, serverID, heartbeat, func(db, table []byte) bool {
		return set[strings.ToLower(string(db)+"."+string(table))]
	})
}

func newDump(ctx context.Context, cfg Config, addr, flavor string, serverID uint32, heartbeat time.Duration,
	decode func(db, table []byte) bool) (*Dump, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("address %q: %w", addr, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", portStr, err)
	}
	d := &Dump{flavor: flavor, guard: newLoginGuard(cfg, addr), decode: decode}
	scfg := replication.BinlogSyncerConfig{
		ServerID:         serverID,
		Flavor:           flavor,
		Host:             host,
		Port:             uint16(port),
		User:             cfg.User,
		Password:         d.guard.clientPassword(),
		TLSConfig:        tlsFor(cfg.TLS, addr),
		HeartbeatPeriod:  heartbeat,
		DisableRetrySync: true,
		Dialer:           d.guard.dial(syncerDialer(ctx, cfg, func(c *sourceConn) { d.repl.Store(c) })),
		Option:           func(c *client.Conn) error { setPhase(&d.repl, phaseRegister); return d.guard.bound(c) },
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
		// The DumpStream decodes what the dump is read for, within the
		// bounds (a compressed transaction: payload.go), never more.
		RawModeEnabled: true,
	}
	d.syncer = replication.NewBinlogSyncer(scfg)
	return d, nil
}

// probeEvents are the events a Dump without tables decodes: what a probe
// reads.
var probeEvents = map[replication.EventType]bool{
	replication.GTID_EVENT: true, replication.GTID_TAGGED_LOG_EVENT: true, replication.MARIADB_GTID_EVENT: true,
	replication.HEARTBEAT_EVENT: true, replication.HEARTBEAT_LOG_EVENT_V2: true,
}

// DumpStream reads a Dump's events, decoded as the Reader decodes them: a
// Dump of NewDump decodes only GTID events (of both flavors) and
// heartbeats, the others come as go-mysql's raw events
// (*replication.GenericEvent); one of NewRowsDump decodes every event and
// its tables' rows.
type DumpStream struct {
	s *replication.BinlogStreamer
	p *eventParser
}

// GetEvent returns the next event, waiting until ctx ends.
func (s *DumpStream) GetEvent(ctx context.Context) (*replication.BinlogEvent, error) {
	ev, err := s.s.GetEvent(ctx)
	if err != nil {
		return nil, syncerError(err)
	}
	return s.p.parse(ev)
}

// Start logs in, registers as a replica and asks for the binlog after set.
// Its error is go-mysql's as it came (a *mysql.MyError when the server
// refused): see Failed and Refused for the relay's words.
func (d *Dump) Start(set mysql.GTIDSet) (*DumpStream, error) {
	stream, err := login(d.guard, func() (*replication.BinlogStreamer, error) { return d.syncer.StartSyncGTID(set) })
	if err != nil {
		return nil, err
	}
	setPhase(&d.repl, phaseStream)
	p := newEventParser(d.flavor, nil, d.guard.packetBound, d.decode)
	if d.decode == nil {
		p.only = func(t replication.EventType) bool { return probeEvents[t] }
	}
	return &DumpStream{s: stream, p: p}, nil
}

// Failed is err, from Start, as the relay words it: the login guard's
// refusal, or the bound or stop that caused it.
func (d *Dump) Failed(err error) error { return d.guard.or(phaseErr(&d.repl, err)) }

// Refused is err, from Start or from reading the stream, as the Reader
// words a stream's end: what (the operation and position) prefixed, and a
// refusal of the position mapped to the sentinel it means (ErrPurged,
// ErrPositionDiverged, ErrPositionAhead, ErrDuplicateServerID, ...).
func (d *Dump) Refused(what string, err error) error {
	return d.guard.or(mapStreamErr(fmt.Errorf("%s: %w", what, phaseErr(&d.repl, err))))
}

// Close closes the replication connection (closeSyncer).
func (d *Dump) Close() { _ = closeSyncer(d.guard, d.syncer) }

// Digest reads stream until the group gtid has ended and returns the
// digest of its rows of the dump's tables (NewRowsDump), computed as the
// Reader computes Event.Digest: nil when it has none of them. Start's set
// is where the server sends gtid first: MariaDB, the GTID set just before
// it (the server sends each domain's transactions in binlog order); MySQL,
// everything the server executed but gtid (the server sends the
// transactions the set lacks, skipping the others itself: a replica that
// applies in parallel without preserving the commit order may log later
// ones before it). found is false when the stream showed that the binlog
// does not hold gtid where it should: MariaDB, a later transaction of
// gtid's domain and server_id came first, or a heartbeat (the server had
// nothing more to send); MySQL, more than reorderedLimit other
// transactions came first (MySQL also sends heartbeats while it skips
// transactions, so there they say nothing). An error is the stream's, as
// it came (see Refused), or ctx's.
func (d *Dump) Digest(ctx context.Context, stream *DumpStream, gtid string) (dg *TxDigest, found bool, err error) {
	var want *mysql.MariadbGTID
	if !strings.Contains(gtid, ":") {
		if want, err = mysql.ParseMariadbGTID(gtid); err != nil {
			return nil, false, fmt.Errorf("%w: %q: %v", ErrBadPosition, gtid, err)
		}
	}
	var sum rowsDigest
	in, reordered := false, 0
	for {
		ev, err := stream.GetEvent(ctx)
		if err != nil {
			return nil, false, err
		}
		evs := []*replication.BinlogEvent{ev}
		if p, ok := ev.Event.(*replication.TransactionPayloadEvent); ok {
			evs = p.Events // MySQL's compressed transaction
		}
		for _, ev := range evs {
			switch e := ev.Event.(type) {
			case *replication.HeartbeatEvent:
				if !in && want != nil {
					return nil, false, nil
				}
			case *replication.GTIDEvent, *replication.GtidTaggedLogEvent, *replication.MariadbGTIDEvent:
				if in { // the group ended without a marker read here
					return sum.sum(gtid), true, nil
				}
				g, _, _, _, err := gtidOf(ev)
				if err != nil {
					return nil, false, err
				}
				m, mariadb := e.(*replication.MariadbGTIDEvent)
				switch {
				case g == gtid:
					in = true
					sum.reset(gtid)
				case !mariadb:
					if reordered++; reordered > reorderedLimit {
						return nil, false, nil
					}
				case want != nil && m.GTID.DomainID == want.DomainID && m.GTID.ServerID == want.ServerID &&
					m.GTID.SequenceNumber > want.SequenceNumber:
					return nil, false, nil
				}
			case *replication.RowsEvent:
				if !in || e.Table == nil || d.decode == nil || !d.decode(e.Table.Schema, e.Table.Table) || len(e.Rows) == 0 {
					continue
				}
				if op, rows, ok := rowImages(ev.Header.EventType, e); ok {
					if partialInsert(e) {
						rows = nil // as the Reader's (rowsEvent): what a partial image holds is not digested
					}
					sum.add(gtid, e.Table, op, rows)
				}
			case *replication.XIDEvent:
				if in {
					return sum.sum(gtid), true, nil
				}
			case *replication.QueryEvent:
				if in && endsGroup(e.Query) {
					return sum.sum(gtid), true, nil
				}
			case *replication.GenericEvent:
				switch {
				case ev.Header.EventType == replication.HEARTBEAT_LOG_EVENT_V2 && !in && want != nil:
					return nil, false, nil
				case ev.Header.EventType == xaPrepareLogEvent && in:
					return sum.sum(gtid), true, nil
				}
			}
		}
	}
}

// reorderedLimit is how many other transactions Digest lets come before
// the one it reads on MySQL (none should: the start set holds them all).
const reorderedLimit = 1000

// endsGroup reports whether a Query event's statement ends its
// transaction, as the framer reads it.
func endsGroup(q []byte) bool {
	return isWord(string(q), "COMMIT") || isWord(string(q), "ROLLBACK")
}
