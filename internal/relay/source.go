package relay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// hostStates are the states of outbox_relay_source_host.
var hostStates = []string{"streaming", string(binlog.HostBehind), string(binlog.HostDiverged), string(binlog.HostPurged),
	string(binlog.HostUnreachable), string(binlog.HostRefused), "unchecked"}

// Waiting for a source host to catch up: first pause and longest pause.
var (
	sourceWaitFirst = 500 * time.Millisecond
	sourceWaitMax   = 10 * time.Second
)

// chooseSource returns the source host to stream from: the first of
// source.hosts (the order is the preference) that has every transaction
// the checkpoint covers, whose binlogs from the resume position are still
// there, and whose settings and grants are right (binlog.Choose). While no
// host is usable but one is behind (it lags, or its replication is
// stopped), it waits and asks every host again, with back-off, until one
// catches up or ctx ends: a behind host is never called purged and never
// ends the relay. Otherwise it returns binlog.NoneUsable's error:
// unreachable hosts are retried by Run, diverged, purged or refused ones
// need an operator.
func (r *Relay) chooseSource(ctx context.Context, cp *checkpoint.Checkpoint) (*binlog.Server, error) {
	accept := r.acceptHost(cp)
	wait := sourceWaitFirst
	for {
		srv, checks := binlog.Choose(ctx, r.source, accept)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if cp != nil && srv != nil {
			// Hosts behind the chosen one may be diverged: errant GTIDs
			// the chosen host's history went past.
			binlog.MarkErrant(checks, srv, cp.GTIDSet)
		}
		r.noteHosts(checks, srv)
		if srv != nil {
			return srv, nil
		}
		behind, err := binlog.NoneUsable(checks)
		if !behind {
			return nil, err
		}
		pause := wait/2 + rand.N(wait/2+1)
		r.log.Warn().Err(err).Dur("retry_in", pause).
			Msg("waiting for a source host to catch up with the checkpoint; nothing is skipped meanwhile")
		r.metrics.Progress() // waiting is not a stall: it says so every round
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pause):
		}
		wait = min(2*wait, sourceWaitMax)
	}
}

// acceptHost judges an inspected host against the checkpoint (or, without
// one, source.start): nil when the relay can stream from it.
func (r *Relay) acceptHost(cp *checkpoint.Checkpoint) func(*binlog.Server) error {
	return func(srv *binlog.Server) error {
		if cp != nil {
			if cp.Flavor != srv.Flavor {
				return fmt.Errorf("%w: checkpoint of %s was written for %s, the source %s runs %s",
					ErrFlavorMismatch, cp.Name, cp.Flavor, srv.Addr, srv.Flavor)
			}
			return srv.Resumable(cp.GTIDSet, cp.From())
		}
		switch start := r.cfg.Source.Start; start {
		case "now", "earliest":
			return nil
		default:
			if _, err := binlog.ParseSet(srv.Flavor, start); err != nil {
				return fmt.Errorf("source.start: %w", err)
			}
			return srv.Resumable(start, start)
		}
	}
}

// noteHosts logs each host's verdict and sets outbox_relay_source_host.
func (r *Relay) noteHosts(checks []binlog.HostCheck, chosen *binlog.Server) {
	seen := map[string]bool{}
	for _, c := range checks {
		seen[c.Addr] = true
		state := string(c.Status)
		switch c.Status {
		case binlog.HostUsable:
			state = "streaming"
		case binlog.HostBehind, binlog.HostUnreachable:
			r.log.Warn().Err(c.Err).Str("host", c.Addr).Str("state", state).Msg("source host not usable now")
		default:
			r.log.Error().Err(c.Err).Str("host", c.Addr).Str("state", state).Msg("source host refused")
		}
		r.setHostState(c.Addr, state)
	}
	for _, h := range r.source.Hosts {
		if !seen[h] {
			r.setHostState(h, "unchecked")
		}
	}
	if chosen != nil {
		pref := len(checks)
		ev := r.log.Info()
		if pref > 1 {
			ev = r.log.Warn()
		}
		ev.Str("host", chosen.Addr).Int("preference", pref).Int("hosts", len(r.source.Hosts)).
			Msg("source host in use")
	}
}

func (r *Relay) setHostState(host, state string) {
	if r.metrics.SourceHosts == nil {
		return
	}
	for _, s := range hostStates {
		v := 0.0
		if s == state {
			v = 1
		}
		r.metrics.SourceHosts.WithLabelValues(host, s).Set(v)
	}
}
