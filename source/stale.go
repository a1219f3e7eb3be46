package source

import (
	"context"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
)

// A replica the relay streams from can stop receiving transactions while
// its connection stays healthy: its replication was stopped (STOP SLAVE,
// an errant statement under gtid_strict_mode, a broken relay log). The
// stream then only carries heartbeats: the relay looks healthy and
// publishes nothing, while another host of source.hosts has everything.
// WatchStale notices it: every staleEvery it reads each host's binlog
// position, and when the host in use has not moved for staleChecks samples
// in a row while another host holds everything it has and more, it
// returns the verdict (the relay then ends the attempt and holds it
// against the host). A host that only lags while it still receives
// transactions is left alone: it moves between samples.

var (
	staleEvery  = 10 * time.Second
	staleChecks = 2
)

// Stale is WatchStale's verdict: the host Addr has stayed at Head for For
// while Ahead has those transactions and more.
type Stale struct {
	Addr, Head, Ahead string
	For               time.Duration
}

// WatchStale watches addr, the host of cfg.Hosts in use, until ctx ends
// (nil) or it is stale (the verdict). With fewer than two hosts there is
// nothing to compare with: it returns nil at once.
func WatchStale(ctx context.Context, cfg binlog.Config, addr string) *Stale {
	if len(cfg.Hosts) < 2 {
		return nil
	}
	tick := time.NewTicker(staleEvery)
	defer tick.Stop()
	lastHead, still := "", 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		cur, err := Position(ctx, cfg, addr)
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
		for _, h := range cfg.Hosts {
			if h == addr {
				continue
			}
			other, err := Position(ctx, cfg, h)
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
			return &Stale{Addr: addr, Head: cur.Head, Ahead: ahead, For: time.Duration(still) * staleEvery}
		}
	}
}

// aheadOf reports whether other's binlog holds every transaction cur's
// does, and more.
func aheadOf(other, cur *binlog.Server) bool {
	if rel, _, err := Relate(cur.Flavor, cur.Head, other.State, ""); err != nil || rel != Contains {
		return false
	}
	rel, _, err := Relate(cur.Flavor, other.Head, cur.State, "")
	return err == nil && rel != Contains
}
