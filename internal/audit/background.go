package audit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// logIDs is how many ids of each outcome a background run's log line names.
const logIDs = 10

// Background runs the audit of cfg's pipeline at start and then every
// audit.interval over the trailing window [now - delay - window,
// now - delay), until ctx ends; each run's outcome goes to m
// (outbox_relay_audit_rows and the last run's time and duration) and to a
// log line. A run that fails is logged and counted
// (outbox_relay_audit_errors_total), never an end of Background: the audit
// is read-only and the relay goes on whatever it finds. Each run is bounded
// by the interval (at least a minute). The caller starts it on a goroutine
// of its own and waits for it to return after canceling ctx.
func Background(ctx context.Context, cfg config.Config, log zerolog.Logger, m *metrics.Metrics) {
	a := cfg.Audit
	m.AuditEnabled()
	log = log.With().Str("component", "audit").Logger()
	for {
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, max(a.Interval, time.Minute))
		res, err := background(rctx, cfg, start, log)
		cancel()
		end := time.Now()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			m.AuditFailed()
			log.Error().Err(err).Dur("window", a.Window).Msg("background audit failed: the relay goes on; the audit runs again in audit.interval")
		default:
			m.AuditDone(metrics.AuditResult{Published: res.Published, Missing: res.Missing.Count, Duplicate: res.Duplicated.Count,
				Phantom: res.Phantom.Count, Pending: res.Pending.Count}, end, end.Sub(start))
			ev := log.Info()
			if !res.Clean {
				ev = log.Warn()
			}
			phantoms := make([]string, 0, len(res.Phantom.Records))
			for _, p := range res.Phantom.Records {
				phantoms = append(phantoms, p.ID+" "+p.Location())
			}
			ev = ev.Time("since", res.since).Time("until", res.until).Strs("topics", res.Topics).Int("rows", res.Rows).Int("records", res.Records).
				Int("published", res.Published).Bool("checkpoint_covers_rows", res.Covered).
				Int("missing", res.Missing.Count).Strs("missing_ids", res.Missing.IDs).
				Int("duplicate", res.Duplicated.Count).Strs("duplicate_ids", res.Duplicated.IDs).
				Int("phantom", res.Phantom.Count).Strs("phantom_records", phantoms).
				Int("pending", res.Pending.Count).Str("verdict", res.Verdict).Dur("took", end.Sub(start))
			if res.PendingOldest != nil {
				ev = ev.Time("pending_oldest_commit", *res.PendingOldest)
			}
			ev.Msg(summary(res.Result))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(a.Interval))):
		}
	}
}

func summary(r Result) string {
	switch r.Verdict {
	case VerdictClean:
		return "background audit: clean"
	case VerdictPending:
		return "background audit: " + r.PendingSentence()
	}
	s := fmt.Sprintf("background audit: %d missing, %d duplicate, %d phantom: see docs/runbook.md#OutboxRelayAuditMismatch",
		r.Missing.Count, r.Duplicated.Count, r.Phantom.Count)
	if r.Pending.Count > 0 {
		s += "; " + r.PendingSentence()
	}
	return s
}

type backgroundResult struct {
	Result
	since, until time.Time
}

// background is one run at now.
func background(ctx context.Context, cfg config.Config, now time.Time, log zerolog.Logger) (backgroundResult, error) {
	a := cfg.Audit
	until := now.Add(-a.Delay).UTC()
	since := until.Add(-a.Window)
	db, err := connect(ctx, cfg)
	if err != nil {
		return backgroundResult{}, err
	}
	defer db.Conn.Close()
	stop := context.AfterFunc(ctx, func() { db.Conn.Close() }) // a query held past the run's deadline
	defer stop()
	res, err := Run(ctx, cfg, db, Options{Since: since, Until: until, Margin: a.Margin, Wait: a.Wait, MaxIDs: logIDs,
		Warn: func(msg string) { log.Warn().Msg(msg) }})
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("audit window %s to %s: %w", since.Format(time.RFC3339), until.Format(time.RFC3339), context.Cause(ctx))
	}
	return backgroundResult{Result: res, since: since, until: until}, err
}

// connect opens a client connection to the first of source.hosts that
// answers.
func connect(ctx context.Context, cfg config.Config) (Source, error) {
	src, err := clients.Source(cfg)
	if err != nil {
		return Source{}, err
	}
	var errs []error
	for _, h := range src.Hosts {
		conn, err := binlog.Connect(ctx, src, h)
		if err == nil {
			return Source{Conn: conn, Config: src, Addr: h}, nil
		}
		errs = append(errs, fmt.Errorf("connect %s: %w", h, err))
	}
	return Source{}, errors.Join(errs...)
}
