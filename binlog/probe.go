package binlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// Probe asks srv to stream its binlog after from, the way the relay will,
// and reads until the server has shown that it serves the position: it
// returns (true, nil) once every GTID domain of from (MySQL: the stream at
// all) has sent a transaction after the position, or a heartbeat came (the
// server read to the end of its binlog without refusing anything). A
// server that refuses the position says so with an error, mapped like the
// relay's stream errors: ErrPurged (binlogs purged, or a hole in a binlog
// that was reset or rebuilt after the position), ErrPositionDiverged,
// ErrPositionAhead. Without an answer within limit it returns (false, nil):
// not proved either way.
//
// The variables Relate and CheckNotPurged read cannot prove everything:
// after RESET MASTER on a MariaDB replica that kept replicating, the
// replica's gtid_binlog_state is past the checkpoint and its oldest
// binlog starts with an empty Gtid_list, yet the transactions between the
// checkpoint and the reset are gone. Only the server's own search of its
// binlog finds the hole.
func Probe(ctx context.Context, cfg Config, srv *Server, from string, limit time.Duration) (bool, error) {
	ok, err := probe(ctx, cfg, srv, from, limit)
	if errors.Is(err, ErrDuplicateServerID) {
		// Another probe (a `check` on another host of the fleet) drew the
		// same id: draw again.
		ok, err = probe(ctx, cfg, srv, from, limit)
	}
	return ok, err
}

func probe(ctx context.Context, cfg Config, srv *Server, from string, limit time.Duration) (bool, error) {
	set, err := ParseSet(srv.Flavor, from)
	if err != nil {
		return false, err
	}
	host, portStr, err := net.SplitHostPort(srv.Addr)
	if err != nil {
		return false, fmt.Errorf("probe binlog: address %q: %w", srv.Addr, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return false, fmt.Errorf("probe binlog: port %q: %w", portStr, err)
	}
	heartbeat := min(limit/4, 250*time.Millisecond)
	var repl atomic.Pointer[sourceConn]
	guard := newLoginGuard(cfg, srv.Addr)
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID:         ProbeServerID(),
		Flavor:           srv.Flavor,
		Host:             host,
		Port:             uint16(port),
		User:             cfg.User,
		Password:         cfg.Password,
		TLSConfig:        tlsFor(cfg.TLS, srv.Addr),
		HeartbeatPeriod:  heartbeat,
		DisableRetrySync: true,
		Dialer:           guard.dial(syncerDialer(ctx, cfg, func(c *sourceConn) { repl.Store(c) })),
		Option:           func(c *client.Conn) error { setPhase(&repl, phaseRegister); return guard.bound(c) },
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
		// The probe reads no row: skip decoding them.
		RowsEventDecodeFunc: func(*replication.RowsEvent, []byte) error { return nil },
	})
	defer syncer.Close()
	stream, err := syncer.StartSyncGTID(set)
	if err != nil {
		return false, guard.or(mapStreamErr(fmt.Errorf("probe binlog at %q: %w", from, phaseErr(&repl, err))))
	}
	setPhase(&repl, phaseStream)
	pctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	waiting := map[uint32]bool{} // MariaDB domains not yet reached
	if m, ok := set.(*mysql.MariadbGTIDSet); ok {
		for _, g := range m.Sets {
			waiting[g.DomainID] = true
		}
	}
	for {
		ev, err := stream.GetEvent(pctx)
		if err != nil {
			if pctx.Err() != nil {
				if ctx.Err() != nil {
					return false, ctx.Err()
				}
				return false, nil
			}
			return false, guard.or(mapStreamErr(fmt.Errorf("probe binlog at %q: %w", from, err)))
		}
		switch e := ev.Event.(type) {
		case *replication.HeartbeatEvent:
			return true, nil
		case *replication.MariadbGTIDEvent:
			delete(waiting, e.GTID.DomainID)
			if len(waiting) == 0 {
				return true, nil
			}
		case *replication.GTIDEvent, *replication.GtidTaggedLogEvent:
			return true, nil // MySQL refuses a position when the dump starts
		case *replication.GenericEvent:
			if ev.Header.EventType == replication.HEARTBEAT_LOG_EVENT_V2 {
				return true, nil
			}
		}
	}
}

// ProbeServerID is a server_id for one Probe: not the relay's own
// (source.server_id), since the server drops an earlier dump connection
// with the same server_id when a new one comes, and `check` runs beside a
// running relay; drawn at random from the top of the range (4294901760 and
// up), away from the small numbers replicas are given, so that checks run
// at once on several hosts of a fleet rarely meet (Probe draws again if
// they do).
func ProbeServerID() uint32 { return 0xFFFF0000 | uint32(rand.N(0xFFFF)+1) }
