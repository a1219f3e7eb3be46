// Package binlog is the relay's replication stream. Reader streams the
// row-based binlog of one source host from a GTID set as Events: decoded
// rows of captured tables and one Commit per source transaction, in binlog
// order. It also owns every connection to a source (Connect, Dump, the
// Reader's own): each wait bounded by its phase (deadline.go) and the login
// guarded (loginguard.go), so that package source, which inspects and
// chooses hosts (settings, grants, failover, retention), builds none of its
// own.
//
// Errors wrap the sentinels below so callers (and operators) can tell a
// misconfigured server from a passing network fault.
package binlog

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/internal/membudget"
	"github.com/outbox-relay/outbox-relay/schema"
)

// Sentinel errors; each names what to fix in its message.
var (
	// ErrAccessDenied: the server refused the user or password.
	ErrAccessDenied = errors.New("source access denied")
	// ErrPurged: the binlogs needed to resume from a position are gone
	// from the server: purged, or its binlog was reset (RESET MASTER) or
	// rebuilt after the position while replication went on (MariaDB then
	// refuses the position as a hole in its binlog).
	ErrPurged = errors.New("binlog position purged")
	// ErrBadPosition: a GTID set that cannot be parsed for this flavor.
	ErrBadPosition = errors.New("bad gtid set")
)

// Config is how to reach and read the source.
type Config struct {
	Hosts           []string
	User            string
	Password        string
	ServerID        uint32
	Flavor          string // auto | mysql | mariadb
	Tables          []string
	TLS             *tls.Config
	ConnectTimeout  time.Duration // the TCP connect, and each wait of the login (deadline.go)
	QueryTimeout    time.Duration // each wait for an answer after the login (deadline.go)
	HeartbeatPeriod time.Duration
	// AllowStatementDML: a statement-logged change of a table that is not
	// captured is a warning (KindWarning), not a stop. A statement-logged
	// change of a captured table always stops.
	AllowStatementDML bool
	// Login and packet bounds of every source connection (loginguard.go).
	// AllowCleartextPassword lets a plaintext connection send the password
	// as it is when the server asks (mysql_clear_password); ServerPublicKey
	// (DER) pins the RSA key caching_sha2_password / sha256_password may
	// encrypt the password with on a plaintext connection;
	// AllowPublicKeyRetrieval takes any key the server sends.
	AllowCleartextPassword  bool
	AllowPublicKeyRetrieval bool
	ServerPublicKey         []byte
	// MaxPacketBytes bounds one packet (an event, a result row) read from
	// the source; 0: what MemoryBudget allows, lowered to twice the
	// server's max_allowed_packet plus 1 MiB when that is less
	// (packetbound.go).
	MaxPacketBytes int64
	// MemoryBudget is the memory the process may use (the cgroup limit,
	// GOMEMLIMIT); zero: the shipped 256 MiB.
	MemoryBudget membudget.Budget
}

// Server is a source host as source.Inspect found it: the address, flavor
// and column names a Reader needs, and the positions package source judges.
type Server struct {
	Addr     string
	Flavor   string // mysql | mariadb
	Version  string
	ServerID string // MySQL server_uuid, MariaDB server_id
	// UID identifies this server among all others, where the server says:
	// MySQL's server_uuid, MariaDB's server_uid (a hash of its host's MAC
	// address and its port; it changes when either does). MariaDB's
	// server_id and GTIDs repeat across independent servers (each is
	// 0-1-N by default); its server_uid does not.
	UID string
	// Head is the GTID set of everything in the binlog now (MariaDB:
	// gtid_binlog_pos, the last GTID of each domain; MySQL: gtid_executed).
	Head string
	// State is what the binlog holds, for comparing with a checkpoint (see
	// source.Relate): MariaDB's gtid_binlog_state (the last GTID of every domain
	// and server_id), MySQL's gtid_executed.
	State string
	// SlavePos is what a MariaDB server applied as a replica
	// (gtid_slave_pos), whether or not its binlog holds it; empty on MySQL.
	SlavePos string
	// LogsReplicated: the server writes what it replicates to its own
	// binlog (log_slave_updates).
	LogsReplicated bool
	// Earliest is the GTID set before the oldest binlog still on the server:
	// starting there replays everything the server still has.
	Earliest string
	// ColumnNames: binlog_row_metadata is FULL, so table maps carry column
	// names and those, not the layout tracked from DDL, are the truth.
	ColumnNames bool
	// Names is how the server compares database and table names (its
	// lower_case_table_names): the reader and the schema tracker compare
	// them so.
	Names schema.NameCase
}

// Connect opens a plain client connection to addr with cfg's credentials.
// Every wait on it is bounded (deadline.go): the connect and the login by
// cfg.ConnectTimeout, each answer after it by cfg.QueryTimeout; the end of
// ctx closes it.
func Connect(ctx context.Context, cfg Config, addr string) (*Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, cfg.connectLimit())
	defer cancel()
	var opts []client.Option
	if tlsCfg := tlsFor(cfg.TLS, addr); tlsCfg != nil {
		opts = append(opts, func(c *client.Conn) error { c.SetTLSConfig(tlsCfg); return nil })
	}
	var sc *sourceConn
	var dialErr error
	dial := func(dctx context.Context, network, addr string) (net.Conn, error) {
		sc, dialErr = dialSource(ctx, dctx, cfg, network, addr)
		if dialErr != nil {
			return nil, dialErr
		}
		return sc, nil
	}
	guard := newLoginGuard(cfg, addr)
	conn, err := login(guard, func() (*client.Conn, error) {
		return client.ConnectWithDialer(dctx, "tcp", addr, cfg.User, guard.clientPassword(), "", guard.dial(dial), opts...)
	})
	if err == nil {
		sc.setPhase(phaseQuery)
		c := &Conn{c: conn, addr: addr, guard: guard}
		if err = c.do("query max_allowed_packet", func() error { return guard.bound(conn) }); err != nil {
			conn.Close()
		}
	}
	if err != nil {
		if sc != nil {
			sc.Close()
		}
		if gerr := guard.err(); gerr != nil {
			return nil, gerr
		}
		var me *mysql.MyError
		var na *NoAnswerError
		switch {
		case errors.Is(err, ErrBrokenAnswer):
			return nil, err
		case errors.As(err, &me) && (me.Code == mysql.ER_ACCESS_DENIED_ERROR || me.Code == mysql.ER_DBACCESS_DENIED_ERROR):
			return nil, fmt.Errorf("%w: %s at %s: %s (check source.user and source.password)", ErrAccessDenied, cfg.User, addr, me.Message)
		case errors.As(dialErr, &na):
			return nil, na
		case dialErr != nil && ctx.Err() == nil:
			return nil, fmt.Errorf("connect %s: %v", addr, dialErr)
		case sc != nil && sc.timedOut.Load() != nil:
			return nil, sc.timedOut.Load()
		case ctx.Err() != nil:
			return nil, fmt.Errorf("connect %s: %w", addr, context.Cause(ctx))
		}
		return nil, fmt.Errorf("connect %s: %v", addr, err)
	}
	return &Conn{c: conn, addr: addr, guard: guard}, nil
}

// tlsFor returns c for dialing addr: ServerName defaults to addr's host.
func tlsFor(c *tls.Config, addr string) *tls.Config {
	if c == nil || c.ServerName != "" {
		return c
	}
	c = c.Clone()
	c.ServerName, _, _ = net.SplitHostPort(addr)
	return c
}

// Query runs q and returns its rows as strings.
func Query(conn *Conn, q string) (rows [][]string, err error) {
	err = conn.do("query "+clipQuery(q), func() error {
		rows, err = query(conn.c, q)
		return err
	})
	return rows, err
}

// query is Query on go-mysql's connection: its caller recovers from
// go-mysql's panics (Conn.do, login).
func query(conn *client.Conn, q string) ([][]string, error) {
	res, err := conn.Execute(q)
	if err != nil {
		if na := noAnswer(conn); na != nil {
			return nil, na
		}
		return nil, err
	}
	defer res.Close()
	if res.Resultset == nil {
		return nil, nil
	}
	rows := make([][]string, res.RowNumber())
	for i := range rows {
		rows[i] = make([]string, res.ColumnNumber())
		for j := range rows[i] {
			v, err := res.GetString(i, j)
			if err != nil {
				return nil, fmt.Errorf("read %.60q row %d column %d: %w", q, i, j, err)
			}
			rows[i][j] = strings.Clone(v) // go-mysql reuses result buffers after Close
		}
	}
	return rows, nil
}

// ParseSet parses a GTID set in flavor's notation.
func ParseSet(flavor, s string) (mysql.GTIDSet, error) {
	set, err := mysql.ParseGTIDSet(flavor, strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("%w: %q for %s: %v", ErrBadPosition, s, flavor, err)
	}
	return set, nil
}

// NoAnswer is what a connection's bound or its caller's end did to conn
// (a *NoAnswerError, or the caller's end naming the host), nil when
// neither: go-mysql words socket errors its own way ("connection was
// bad"), so callers ask the connection.
func NoAnswer(conn *Conn) error { return noAnswer(conn.c) }
