package binlog

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// Dump is a short replication connection for a look at what a server
// serves (package source: its probe of a position, its try of REPLICATION
// SLAVE), opened as the Reader opens its own: the login guard, and each
// wait bounded by its phase (deadline.go). It decodes no row. Close it.
type Dump struct {
	syncer *replication.BinlogSyncer
	guard  *loginGuard
	repl   atomic.Pointer[sourceConn] // the replication connection, for its phases
}

// NewDump prepares a replication connection to addr, a server of flavor,
// registering as a replica with serverID (not the relay's own: the server
// drops an earlier dump connection with the same server_id) and, when
// heartbeat is not 0, asking for heartbeats that often. The end of ctx
// closes its connections.
func NewDump(ctx context.Context, cfg Config, addr, flavor string, serverID uint32, heartbeat time.Duration) (*Dump, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("address %q: %w", addr, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", portStr, err)
	}
	d := &Dump{guard: newLoginGuard(cfg, addr)}
	d.syncer = replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
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
		// A dump reads no row: skip decoding them.
		RowsEventDecodeFunc: func(*replication.RowsEvent, []byte) error { return nil },
	})
	return d, nil
}

// Start logs in, registers as a replica and asks for the binlog after set.
// Its error is go-mysql's as it came (a *mysql.MyError when the server
// refused): see Failed and Refused for the relay's words.
func (d *Dump) Start(set mysql.GTIDSet) (*replication.BinlogStreamer, error) {
	stream, err := login(d.guard, func() (*replication.BinlogStreamer, error) { return d.syncer.StartSyncGTID(set) })
	if err != nil {
		return nil, err
	}
	setPhase(&d.repl, phaseStream)
	return stream, nil
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

// Close closes the replication connection.
func (d *Dump) Close() { d.syncer.Close() }
