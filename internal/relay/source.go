package relay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/source"
)

// hostStates are the states of outbox_relay_source_host.
var hostStates = []string{"streaming", string(source.HostBehind), string(source.HostDiverged), string(source.HostPurged),
	string(source.HostUnreachable), string(source.HostRefused), "unchecked"}

// Waiting for a source host to catch up: first pause and longest pause.
var (
	sourceWaitFirst = 500 * time.Millisecond
	sourceWaitMax   = 10 * time.Second
)

// chooseSource returns the source host to stream from: the first of
// source.hosts (the order is the preference) that has every transaction
// the checkpoint covers, whose binlogs from the resume position are still
// there, and whose settings and grants are right (source.Choose). While no
// host is usable but one is behind (it lags, or its replication is
// stopped), it waits and asks every host again, with back-off, until one
// catches up or ctx ends: a behind host is never called purged and never
// ends the relay. Otherwise it returns source.NoneUsable's error:
// unreachable hosts are retried by Run, diverged, purged or refused ones
// need an operator.
func (r *Relay) chooseSource(ctx context.Context, cp *checkpoint.Checkpoint) (*binlog.Server, error) {
	accept := r.acceptHost(ctx, cp)
	wait := sourceWaitFirst
	for {
		srv, checks := source.Choose(ctx, r.source, accept)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if cp != nil && srv != nil {
			// Hosts behind the chosen one may be diverged: errant GTIDs
			// the chosen host's history went past.
			source.MarkErrant(checks, srv, cp.GTIDSet)
		}
		r.noteHosts(checks, srv)
		if srv != nil {
			return srv, nil
		}
		behind, err := source.NoneUsable(checks)
		if !behind {
			return nil, err
		}
		pause := wait/2 + rand.N(wait/2+1)
		r.log.Warn().Err(err).Dur("retry_in", pause).
			Msg("waiting for a source host to catch up with the checkpoint; nothing is skipped meanwhile")
		r.metrics.Progress() // waiting is not a stall: it says so every round
		r.metrics.Connecting()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pause):
		}
		wait = min(2*wait, sourceWaitMax)
	}
}

// acceptHost judges an inspected host against the checkpoint (or, without
// one, source.start): nil when the relay can stream from it. With a
// checkpoint, a host whose GTIDs hold it must also prove that it holds the
// checkpoint's last transaction (prove).
func (r *Relay) acceptHost(ctx context.Context, cp *checkpoint.Checkpoint) func(*binlog.Server) error {
	return func(srv *binlog.Server) error {
		from := r.cfg.Source.Start
		if cp != nil {
			from = cp.From()
		}
		if err := r.refusedBy(srv.Addr, from); err != nil {
			return err
		}
		if cp != nil {
			if cp.Flavor != srv.Flavor {
				return fmt.Errorf("%w: checkpoint of %s was written for %s, the source %s runs %s",
					ErrFlavorMismatch, cp.Name, cp.Flavor, srv.Addr, srv.Flavor)
			}
			if err := setByHand(srv, cp, source.Resumable(srv, cp.GTIDSet, cp.From())); err != nil {
				return err
			}
			return r.prove(ctx, srv, cp)
		}
		switch start := r.cfg.Source.Start; start {
		case "now", "earliest":
			return nil
		default:
			if _, err := binlog.ParseSet(srv.Flavor, start); err != nil {
				return fmt.Errorf("source.start: %w", err)
			}
			return source.Resumable(srv, start, start)
		}
	}
}

// proofLimit bounds the read of the checkpoint's last transaction from a
// host (source.Prove): finding the position in a large binlog file takes
// the server a while. unprovedHold is how long a host that did not show it
// within the bound is passed over when there are other hosts: each attempt
// chooses again (after a broker's error, a reader's), and would otherwise
// wait out the bound on it first every time.
var (
	proofLimit   = 30 * time.Second
	unprovedHold = time.Minute
)

// prove accepts srv only when it proves that it holds the checkpoint's
// last transaction with outbox rows (source.Prove: the same rows read again
// from its binlog), and logs how it was accepted. A host that holds
// another transaction under that GTID is refused as diverged, one that
// cannot show it as purged (unless it is the server the checkpoint was
// read from), one that did not answer in time as unreachable (held
// against it for unprovedHold when there are other hosts).
func (r *Relay) prove(ctx context.Context, srv *binlog.Server, cp *checkpoint.Checkpoint) error {
	p, err := source.Prove(ctx, r.source, srv, cp, proofLimit)
	if err != nil {
		if errors.Is(err, source.ErrUnreachable) && ctx.Err() == nil && len(r.source.Hosts) > 1 {
			r.hold(srv.Addr, hostRefusal{from: cp.From(), err: err, until: time.Now().Add(unprovedHold),
				held: "it did not show the checkpoint's last transaction within the proof's bound; passed over since"})
		}
		return err
	}
	switch p.Kind {
	case source.ProofRead:
		r.log.Info().Str("host", srv.Addr).Str("proof", p.Detail).Msg("source host holds the checkpoint's last transaction")
	case source.ProofSameServer:
		r.log.Warn().Str("host", srv.Addr).Str("proof", p.Detail).
			Msg("source host's binlog no longer holds the checkpoint's last transaction; accepted as the server the checkpoint was read from")
	default:
		r.log.Info().Str("host", srv.Addr).Str("proof", p.Detail).
			Msg("checkpoint without a fingerprint: the source host is not proved; the next checkpoint after a transaction with outbox rows carries one")
	}
	return nil
}

// noteHosts logs each host's verdict and sets outbox_relay_source_host.
func (r *Relay) noteHosts(checks []source.HostCheck, chosen *binlog.Server) {
	seen := map[string]bool{}
	for _, c := range checks {
		seen[c.Addr] = true
		state := string(c.Status)
		switch c.Status {
		case source.HostUsable:
			state = "streaming"
		case source.HostBehind, source.HostUnreachable:
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

// A host's variables can say it has a position that its binlog stream then
// refuses: MariaDB after RESET MASTER on a replica that kept replicating
// (its gtid_binlog_state is past the checkpoint, its oldest binlog's
// Gtid_list is empty, yet the transactions after the checkpoint are gone:
// the server refuses the position as a hole), a replica rebuilt from a
// backup after the checkpoint, or a server that lags by the time it is
// asked. judgeStream records such a refusal and acceptHost holds it against
// the host, so the next attempt tries the other hosts (or waits) instead of
// asking the same host again or stopping for good while another host has
// the transactions.
var (
	// errHostRefused: a source host's binlog stream refused the position
	// it was asked for; the relay tries the other hosts. Not fatal: the
	// next attempt chooses again, and stops only if no host is usable.
	errHostRefused = errclass.New(errclass.Transient, "source_position", "source host refused the position")

	// How long a refusal is held against a host once the relay's position
	// has moved on (at the same position it is held for good: the server
	// would refuse it again), and how long a host found behind by its
	// stream is passed over.
	refusedHold = 5 * time.Minute
	behindHold  = sourceWaitMax
)

// hostRefusal is a host's refusal of a position by its stream.
type hostRefusal struct {
	from   string    // the position it refused
	err    error     // why (wraps binlog.ErrPurged, ErrPositionDiverged or ErrPositionAhead)
	until  time.Time // held until then once the position has moved on
	sticky bool      // held at the same position for good
	held   string    // why it is held, for the error; "" for a refused position
}

// judgeStream passes the error that ended streaming from srv at from,
// recording it when the server refused the position (see hostRefusal), or,
// with other hosts to choose from, did not answer the reader's connection
// before its stream started (a *binlog.NoAnswerError). With
// other hosts to try it returns errHostRefused, which the retry loop
// retries: the next attempt's chooseSource holds the refusal against srv
// and decides from every host's verdict (NoneUsable). With one host the
// refusal is the answer.
func (r *Relay) judgeStream(srv *binlog.Server, from string, err error) error {
	if err == nil {
		return nil
	}
	// (From the loop, these come only from the binlog stream: the host's
	// variables were judged before it started.)
	now := time.Now()
	var ref hostRefusal
	switch {
	case errors.Is(err, binlog.ErrPurged), errors.Is(err, binlog.ErrPositionDiverged):
		ref = hostRefusal{from: from, err: err, until: now.Add(refusedHold), sticky: true}
	case errors.Is(err, binlog.ErrPositionAhead):
		ref = hostRefusal{from: from, err: err, until: now.Add(behindHold)}
	case errors.As(err, new(*binlog.NoAnswerError)) && len(r.source.Hosts) > 1:
		// The host answered Choose's queries, then not the reader's login
		// or registration as a replica (the reader has no bound once it
		// streams): choosing it again would wait on it again, for good.
		ref = hostRefusal{from: from, err: fmt.Errorf("%w: %w", source.ErrUnreachable, err), until: now.Add(behindHold),
			held: "it did not start a binlog stream; passed over since"}
	default:
		return err
	}
	r.hold(srv.Addr, ref)
	r.setHostState(srv.Addr, string(source.StatusOf(ref.err)))
	msg := "source host refused the position; choosing again among source.hosts"
	if ref.held != "" {
		msg = "source host did not start a binlog stream; choosing again among source.hosts"
	}
	r.log.Warn().Err(err).Str("host", srv.Addr).Str("from", from).Msg(msg)
	if len(r.source.Hosts) < 2 && ref.sticky {
		return err
	}
	return fmt.Errorf("%w: %s: %v", errHostRefused, srv.Addr, err)
}

// hold records ref against host: acceptHost refuses it while it holds.
func (r *Relay) hold(host string, ref hostRefusal) {
	if r.refused == nil {
		r.refused = map[string]hostRefusal{}
	}
	r.refused[host] = ref
}

// refusedBy returns the refusal held against host at position from, if any.
func (r *Relay) refusedBy(host, from string) error {
	ref, ok := r.refused[host]
	if !ok {
		return nil
	}
	if (ref.sticky && ref.from == from) || time.Now().Before(ref.until) {
		if ref.held != "" {
			return fmt.Errorf("%w (%s)", ref.err, ref.held)
		}
		return fmt.Errorf("%w (its binlog stream refused %q; held against it since)", ref.err, ref.from)
	}
	delete(r.refused, host)
	return nil
}

// setByHand adds to err, a host refusing the checkpoint cp as ahead of it
// or diverged, that an operator wrote cp (checkpoint set or skip) and
// which of its GTIDs the host has not executed: a position typed by hand
// is likelier a mistake than a server that lost transactions.
func setByHand(srv *binlog.Server, cp *checkpoint.Checkpoint, err error) error {
	op := cp.Operator
	if err == nil || op == nil || !errors.Is(err, binlog.ErrPositionAhead) && !errors.Is(err, binlog.ErrPositionDiverged) {
		return err
	}
	missing, uerr := source.Unexecuted(srv, cp.GTIDSet)
	if uerr != nil || missing == "" {
		return err
	}
	return fmt.Errorf("the checkpoint %q was set by hand (`outbox-relay checkpoint %s` by %s at %s; it was at %q), not written by the relay, "+
		"and %s has not executed %s of it: if that is a mistake (a typo, another server's GTID), set it again with "+
		"`outbox-relay checkpoint set --gtid SET` (SET: the GTID set before the first unpublished event; the one it replaced is above): %w",
		cp.GTIDSet, op.Command, op.User, op.Time.Format(time.RFC3339), op.From, srv.Addr, missing, err)
}
