package relay

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
)

// A replica the relay streams from can stop receiving transactions while
// its connection stays healthy: its replication was stopped (STOP SLAVE,
// an errant statement under gtid_strict_mode, a broken relay log). The
// stream then only carries heartbeats: the relay looks healthy and
// publishes nothing, while another host of source.hosts has everything.
// watchStale notices it: with several hosts, every staleEvery it reads
// each host's binlog position, and when the host in use has not moved for
// staleChecks samples in a row while another host holds everything it has
// and more, it ends the attempt; the next one holds the verdict against
// the host (staleHold) and chooses another. A host that only lags while it
// still receives transactions is left alone: it moves between samples.

// errHostStale: the source host in use stopped receiving transactions that
// another host has.
var errHostStale = newError(Transient, "source_position", "source host in use stopped receiving transactions")

var (
	staleEvery  = 10 * time.Second
	staleChecks = 2
	staleHold   = time.Minute
)

// watchStale runs beside an attempt streaming from srv until ctx ends; on
// a stale verdict it stores the reason in stale and calls stop.
func (r *Relay) watchStale(ctx context.Context, srv *binlog.Server, stale *atomic.Pointer[error], stop func()) {
	if len(r.source.Hosts) < 2 {
		return
	}
	tick := time.NewTicker(staleEvery)
	defer tick.Stop()
	lastHead, still := "", 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cur, err := binlog.Position(ctx, r.source, srv.Addr)
		if err != nil {
			lastHead, still = "", 0 // the stream notices a dead host by itself
			continue
		}
		if cur.Head != lastHead {
			lastHead, still = cur.Head, 0
			continue
		}
		still++
		ahead := ""
		for _, h := range r.source.Hosts {
			if h == srv.Addr {
				continue
			}
			other, err := binlog.Position(ctx, r.source, h)
			if err != nil || other.Flavor != cur.Flavor {
				continue
			}
			if aheadOf(other, cur) {
				ahead = h
				break
			}
		}
		if ahead == "" {
			still = 0 // nobody has more: an idle source, not a stale host
			continue
		}
		if still >= staleChecks {
			err := fmt.Errorf("%w: %s has stayed at %s for %s while %s has those transactions and more "+
				"(its replication stopped?): choosing another host", errHostStale, srv.Addr, cur.Head,
				time.Duration(still)*staleEvery, ahead)
			stale.Store(&err)
			stop()
			return
		}
	}
}

// aheadOf reports whether other's binlog holds every transaction cur's
// does, and more.
func aheadOf(other, cur *binlog.Server) bool {
	if rel, _, err := binlog.Relate(cur.Flavor, cur.Head, other.State, ""); err != nil || rel != binlog.Contains {
		return false
	}
	rel, _, err := binlog.Relate(cur.Flavor, other.Head, cur.State, "")
	return err == nil && rel != binlog.Contains
}

// judgeStale records a stale verdict (see watchStale) against srv: the
// next choice passes over it for staleHold.
func (r *Relay) judgeStale(srv *binlog.Server, from string, err error) error {
	if r.refused == nil {
		r.refused = map[string]hostRefusal{}
	}
	r.refused[srv.Addr] = hostRefusal{from: from, err: fmt.Errorf("%w: %w", binlog.ErrPositionAhead, err), until: time.Now().Add(staleHold)}
	r.setHostState(srv.Addr, string(binlog.HostBehind))
	r.log.Warn().Err(err).Str("host", srv.Addr).Msg("source host in use is stale; choosing again among source.hosts")
	return fmt.Errorf("%w: %w", errHostRefused, err)
}
