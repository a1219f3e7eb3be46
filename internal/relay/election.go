package relay

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/ha"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// The relay's side of the election (internal/ha): the standby loop, and
// the terms it runs attempts in, each under the term's lease.

// errRevoked: the lease was handed over cleanly (a rebalance moved it); the
// attempt committed what it held. The instance goes back to standby.
var errRevoked = errclass.New(errclass.Transient, "lease_revoked", "lease revoked")

// newElector is the relay's membership of its lock group.
func (r *Relay) newElector() *ha.Elector {
	return ha.New(ha.Config{Relay: r.cfg, Log: r.log, Metrics: r.metrics, Kafka: r.kafka})
}

// Run relays while this instance holds the lease, and waits as a standby
// otherwise, until ctx is canceled (then the active instance commits what
// it has, writes the final checkpoint and returns nil) or a fatal error
// occurs. A standby connects to the lock group only.
func (r *Relay) elect(ctx context.Context) error {
	r.metrics.SetStallTimeout(r.cfg.EffectiveStallTimeout())
	r.metrics.KafkaMaxAge(2*r.cfg.HA.HeartbeatInterval + time.Second)
	r.metrics.KafkaBrokers(strings.Join(r.cfg.Kafka.Brokers, ","))
	r.metrics.SetState(metrics.StateStandby)
	defer r.metrics.SetState(metrics.StateStopped)
	e := r.newElector()
	r.elector = e
	if err := e.Join(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		r.metrics.Errors.WithLabelValues(errclass.Kind(err)).Inc()
		return err
	}
	defer e.Leave()
	started := false
	for term := 0; ; term++ {
		r.metrics.SetState(metrics.StateStandby)
		r.log.Info().Str("group", e.Group()).Str("lock_topic", e.Topic()).Msg("standby: waiting for the lease")
		waitFrom := time.Now()
		l, err := e.Acquire(ctx)
		if err != nil {
			r.metrics.Errors.WithLabelValues("lock_group").Inc()
			return err
		}
		if l == nil {
			return nil
		}
		r.log.Info().Str("group", e.Group()).Msg("lease acquired: active")
		r.metrics.Fenced.Set(0)
		if term > 0 || e.Waited() || time.Since(waitFrom) > e.Session() {
			// Only a fresh start that took the lease at once fails fast on a
			// passing error (a misconfiguration shows at once); a standby
			// taking over retries, like a running instance: it is the one
			// left to publish.
			started = true
		}
		err = r.lead(l, &started)
		e.End(l)
		if ctx.Err() != nil {
			if errors.Is(err, errRevoked) {
				return nil // stopped: the final checkpoint is written
			}
			return err
		}
		switch {
		case errors.Is(err, ha.ErrLeaseLost):
			r.metrics.LeaseEvents.WithLabelValues("lost").Inc()
			r.log.Warn().Err(err).Msg("lease lost: stopped publishing, back to standby")
		case errors.Is(err, errRevoked):
			r.log.Info().Msg("lease handed over: back to standby")
		case errors.Is(err, ErrFenced):
			r.metrics.LeaseEvents.WithLabelValues("fenced").Inc()
			r.metrics.Fenced.Set(1)
			r.log.Warn().Err(err).Msg("fenced: another producer with the same name took over; back to standby")
		default:
			return err
		}
		select {
		case rerr := <-e.Refused(): // e.g. another live instance with this ha.instance_id
			r.metrics.Errors.WithLabelValues("lock_group").Inc()
			return rerr
		default:
		}
		// Leave and join again: whoever holds the lease next (another
		// instance, or this one after a fence) starts from the committed
		// checkpoint, and a lease this member lost track of is given up.
		e.Leave()
		pause := 250*time.Millisecond + rand.N(250*time.Millisecond)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
		if err := e.Join(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// Kafka went away while rejoining: keep trying as a standby.
			r.metrics.Errors.WithLabelValues(errclass.Kind(err)).Inc()
			r.log.Warn().Err(err).Msg("rejoin the lock group")
			if err := r.rejoin(ctx, e); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
	}
}

// rejoin retries joining the lock group with back-off until it succeeds,
// ctx ends (then it returns ctx's error) or the join is refused for good
// (a configuration error: another live instance has this one's id).
func (r *Relay) rejoin(ctx context.Context, e *ha.Elector) error {
	backoff := time.Second
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff/2 + rand.N(backoff/2+1)):
		}
		r.metrics.Progress()
		err := e.Join(ctx)
		if err == nil || ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, config.ErrInvalid) {
			return err
		}
		r.log.Warn().Err(err).Msg("rejoin the lock group")
		backoff = min(backoff*2, 30*time.Second)
	}
}

// lead runs attempts while l holds: the retry loop of one term. It returns
// nil when the process stops cleanly, errRevoked or ErrLeaseLost when the
// term ends, ErrFenced when another producer took the transactional id,
// and fatal errors (or, before the first start, any error).
func (r *Relay) lead(l *ha.Lease, started *bool) error {
	backoff := 250 * time.Millisecond
	r.metrics.Connecting() // /healthz fails if this term never streams (metrics.ConnectingFor)
	for {
		r.metrics.SetState(metrics.StateStarting)
		began := time.Now()
		err := r.attempt(l.Context(), l, started)
		r.metrics.Ready.Store(false)
		r.metrics.ConnectFailed(err)
		if lerr := l.Err(); lerr != nil {
			return lerr // nothing more was published once lost
		}
		if l.Context().Err() != nil {
			if err != nil && !errors.Is(err, context.Canceled) {
				// Stopping, and the final commit (or what preceded it)
				// failed: say so, never as a clean stop.
				r.metrics.Errors.WithLabelValues(errclass.Kind(err)).Inc()
				return err
			}
			return errRevoked // the caller tells a stop from a revoke by its own ctx
		}
		if err == nil {
			return nil
		}
		r.metrics.Errors.WithLabelValues(errclass.Kind(err)).Inc()
		if errors.Is(err, ErrFenced) {
			return err
		}
		// A checkpoint topic held back by another pipeline's open transaction
		// is waited out even at the first start: the broker ends it within
		// that pipeline's transaction timeout.
		if (!*started && !errors.Is(err, checkpoint.ErrCheckpointHeldBack)) || errclass.Fatal(err) {
			return err
		}
		r.metrics.Restarts.WithLabelValues(errclass.Kind(err)).Inc()
		if time.Since(began) > time.Minute { // it ran well for a while: start over
			backoff = 250 * time.Millisecond
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		r.log.Warn().Err(err).Str("kind", errclass.Kind(err)).Dur("retry_in", wait).Msg("pipeline stopped; resuming from the committed checkpoint")
		r.metrics.SetState(metrics.StateRetrying)
		select {
		case <-l.Context().Done():
			if lerr := l.Err(); lerr != nil {
				return lerr
			}
			return errRevoked
		case <-time.After(wait):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}
