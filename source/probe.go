package source

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/binlog"
)

// Probe asks srv to stream its binlog after from, the way the relay will,
// and reads until the server has shown that it serves the position: it
// returns (true, nil) once every GTID domain of from (MySQL: the stream at
// all) has sent a transaction after the position, or a heartbeat came (the
// server read to the end of its binlog without refusing anything). A
// server that refuses the position says so with an error, mapped like the
// relay's stream errors: binlog.ErrPurged (binlogs purged, or a hole in a binlog
// that was reset or rebuilt after the position), binlog.ErrPositionDiverged,
// binlog.ErrPositionAhead. Without an answer within limit it returns (false, nil):
// not proved either way.
//
// The variables Relate and CheckNotPurged read cannot prove everything:
// after RESET MASTER on a MariaDB replica that kept replicating, the
// replica's gtid_binlog_state is past the checkpoint and its oldest
// binlog starts with an empty Gtid_list, yet the transactions between the
// checkpoint and the reset are gone. Only the server's own search of its
// binlog finds the hole.
func Probe(ctx context.Context, cfg binlog.Config, srv *binlog.Server, from string, limit time.Duration) (bool, error) {
	ok, err := probe(ctx, cfg, srv, from, limit)
	if errors.Is(err, binlog.ErrDuplicateServerID) {
		// Another probe (a `check` on another host of the fleet) drew the
		// same id: draw again.
		ok, err = probe(ctx, cfg, srv, from, limit)
	}
	return ok, err
}

func probe(ctx context.Context, cfg binlog.Config, srv *binlog.Server, from string, limit time.Duration) (bool, error) {
	set, err := binlog.ParseSet(srv.Flavor, from)
	if err != nil {
		return false, err
	}
	heartbeat := min(limit/4, 250*time.Millisecond)
	dump, err := binlog.NewDump(ctx, cfg, srv.Addr, srv.Flavor, ProbeServerID(), heartbeat)
	if err != nil {
		return false, fmt.Errorf("probe binlog: %w", err)
	}
	defer dump.Close()
	stream, err := dump.Start(set)
	if err != nil {
		return false, dump.Refused(fmt.Sprintf("probe binlog at %q", from), err)
	}
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
			return false, dump.Refused(fmt.Sprintf("probe binlog at %q", from), err)
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
