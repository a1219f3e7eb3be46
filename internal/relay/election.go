package relay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// Kafka API keys of the group requests whose answers keep the session alive.
const (
	keyJoinGroup = 11
	keyHeartbeat = 12
	keySyncGroup = 14
)

// elector is this instance's membership of the lock group.
type elector struct {
	r         *Relay
	group     string
	topic     string
	session   time.Duration
	heartbeat time.Duration
	guard     time.Duration // how long without an answered group request the lease is trusted

	cl       *kgo.Client
	lastOK   atomic.Int64 // unix nanos: when the last answered group request was sent
	assigned chan struct{}
	refused  chan error // the coordinator refuses the membership for good

	// instanceID is the static membership id (ha.instance_id, or the host
	// name): a restart with the same id rejoins without a rebalance.
	instanceID string
	// fencedInstance: another live member took this instance id; leaving
	// must not remove it (a leave names the instance id, not the member).
	fencedInstance atomic.Bool

	mu  sync.Mutex
	own bool // partition 0 is assigned to this member
	// clientID tells this member from the others in the lock group.
	clientID string
	// waited: an assignment gave the lease to another member while this one
	// waited (only acquire's goroutine uses it).
	waited bool
	cur    *lease // the current term; nil in standby
	// watching is the current term's watch goroutine: end joins it.
	watching sync.WaitGroup
	// recordedID is the checkpoint topic id the lock group's record holds
	// (claim; "" when none); read and written on Run's goroutine only.
	recordedID string
}

func (r *Relay) newElector() *elector {
	h := r.cfg.HA
	return &elector{r: r, group: clients.GroupID(r.cfg.Name), topic: h.LockTopic, session: h.SessionTimeout,
		heartbeat: h.HeartbeatInterval, guard: h.SessionTimeout - 2*h.HeartbeatInterval, assigned: make(chan struct{}, 1),
		refused: make(chan error, 1), instanceID: InstanceID(r.cfg)}
}

// current is the term in progress; nil in standby.
func (e *elector) current() *lease {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cur
}

// OnGroupManageError (kgo.HookGroupManageError) logs the lock group's
// errors (franz-go retries them) and reports those that retrying cannot fix:
// a session timeout outside the broker's bounds, a group or topic the
// relay may not use.
func (e *elector) OnGroupManageError(err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	e.r.log.Warn().Err(err).Str("group", e.group).Msg("lock group")
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return
	}
	switch ke.Code {
	case kerr.InvalidSessionTimeout.Code:
		err = fmt.Errorf("%w: ha.session_timeout %s refused by the broker (group.min.session.timeout.ms, group.max.session.timeout.ms): %w",
			config.ErrInvalid, e.session, err)
	case kerr.FencedInstanceID.Code:
		// A newer member joined with this instance's ha.instance_id: two
		// live instances share it (a restart replaces a dead one and never
		// meets this). Each would be handed the other's place.
		err = fmt.Errorf("%w: another instance of pipeline %s joined the lock group with this instance's ha.instance_id %q "+
			"(by default the host name): give every instance its own: %w", config.ErrInvalid, e.r.cfg.Name, e.instanceID, err)
		e.fencedInstance.Store(true)
		if cur := e.current(); cur != nil {
			cur.lose("fenced in the lock group by an instance with the same ha.instance_id")
		}
	case kerr.GroupAuthorizationFailed.Code, kerr.TopicAuthorizationFailed.Code, kerr.InvalidGroupID.Code:
		err = fmt.Errorf("%w: lock group %s on %s: %w", ErrRejected, e.group, e.topic, err)
	default:
		return
	}
	select {
	case e.refused <- err:
	default:
	}
}

// OnBrokerE2E (kgo.HookBrokerE2E) notes answered group requests. The time
// kept is when the request was sent, before the coordinator could have
// received it: the coordinator's session clock restarted no earlier.
func (e *elector) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if e2e.Err() != nil || (key != keyHeartbeat && key != keyJoinGroup && key != keySyncGroup) {
		return
	}
	sent := time.Now().Add(-e2e.DurationE2E() - e2e.WriteWait)
	for {
		old := e.lastOK.Load()
		if sent.UnixNano() <= old {
			return
		}
		if e.lastOK.CompareAndSwap(old, sent.UnixNano()) {
			break
		}
	}
	e.r.metrics.KafkaSeen(time.Now())
	e.r.metrics.LeaseUntil(sent.Add(e.guard))
}

// join checks Kafka, creates the lock topic if missing and joins the group.
// Errors (Kafka unreachable, refused) are returned at once.
func (e *elector) join(ctx context.Context) error {
	if e.clientID == "" {
		// fingerprint-capture.random: an older build checks the prefix
		// only; memberCapture reads the capture tag.
		e.clientID = e.fingerprint() + "-" + e.captureTag() + "." + strconv.FormatUint(rand.Uint64(), 36)
	}
	if err := e.awaitInstanceID(ctx); err != nil {
		return err
	}
	cl, err := kgo.NewClient(e.r.kafka.LockGroup(clients.LockMember{InstanceID: e.instanceID, ClientID: e.clientID, Hooks: e,
		Assigned: e.onAssigned, Revoked: e.onRevoked, Lost: e.onLost})...)
	if err != nil {
		return fmt.Errorf("create kafka group client: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, e.r.cfg.Kafka.RequestTimeout)
	err = cl.Ping(pctx)
	if err == nil {
		err = e.ensureTopic(pctx, kadm.NewClient(cl))
	}
	cancel()
	if err != nil {
		cl.Close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrRejected) {
			return err
		}
		return fmt.Errorf("%w: %v: %w (check kafka.brokers, kafka.tls and kafka.sasl)", ErrKafkaUnreachable, e.r.cfg.Kafka.Brokers, err)
	}
	// Another member already in the group (an active instance, or one
	// whose session has not ended yet): this one starts as a standby, and
	// takes over later like a running instance (no fail-fast start).
	if groups, derr := kadm.NewClient(cl).DescribeGroups(ctx, e.group); derr == nil {
		for _, g := range groups {
			for _, m := range g.Members {
				if m.ClientID != e.clientID {
					e.waited = true
				}
			}
		}
	}
	now := time.Now()
	e.lastOK.Store(now.UnixNano())
	e.r.metrics.KafkaSeen(now)
	e.r.metrics.LeaseUntil(now.Add(e.guard))
	e.cl = cl
	return nil
}

// ensureTopic creates the one-partition lock topic if it is missing.
func (e *elector) ensureTopic(ctx context.Context, adm *kadm.Client) error {
	resp, err := adm.CreateTopic(ctx, 1, e.r.cfg.Kafka.ReplicationFactor, nil, e.topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && adminRefused(err) {
		// least privilege: the lock topic was created beforehand, or the
		// group join names what is missing
		e.r.log.Debug().Str("topic", e.topic).AnErr("refused", err).Msg("kafka refused to create the lock topic: using it as it exists")
		return nil
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create lock topic %s: %w", e.topic, classify(err))
	}
	return nil
}

// leave closes the group client: the group is left (a rebalance hands the
// lease to another member at once) unless the coordinator is unreachable.
func (e *elector) leave() {
	if e.cl == nil {
		return
	}
	// Best effort: without an answer the session ends by itself. A static
	// member's client does not send the leave itself (a restart would take
	// its place back): the relay leaves on purpose, so it sends it for the
	// instance id, and a standby takes over at once.
	lctx, cancel := context.WithTimeout(context.Background(), min(e.r.cfg.Kafka.RequestTimeout, e.session))
	_ = e.cl.LeaveGroupContext(lctx)
	if e.fencedInstance.Load() {
		// The id is another live member's now.
	} else if _, err := kadm.NewClient(e.cl).LeaveGroup(lctx, kadm.LeaveGroup(e.group).InstanceIDs(e.instanceID).
		Reason("outbox-relay instance leaving")); err != nil {
		e.r.log.Debug().Err(err).Str("group", e.group).Msg("leave the lock group")
	}
	cancel()
	e.cl.Close()
	e.cl = nil
	e.mu.Lock()
	e.own = false
	e.mu.Unlock()
	select {
	case <-e.assigned:
	default:
	}
}

func hasLease(m map[string][]int32, topic string) bool {
	for _, p := range m[topic] {
		if p == 0 {
			return true
		}
	}
	return false
}

func (e *elector) onAssigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	if !hasLease(m, e.topic) {
		return
	}
	e.mu.Lock()
	e.own = true
	e.mu.Unlock()
	select {
	case e.assigned <- struct{}{}:
	default:
	}
}

// onRevoked is a clean hand-over: the term's attempt commits what it holds
// and stops; the partition goes to the next member only once this returns,
// and in any case before the session could end (the lease is lost then).
func (e *elector) onRevoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	if !hasLease(m, e.topic) {
		return
	}
	e.mu.Lock()
	e.own = false
	cur := e.cur
	e.mu.Unlock()
	if cur == nil {
		return
	}
	e.r.metrics.LeaseEvents.WithLabelValues("revoked").Inc()
	cur.cancel()
	select {
	case <-cur.done:
	case <-cur.lost:
	}
}

// onLost: the session ended (the coordinator no longer knows this member):
// another member may already hold the lease.
func (e *elector) onLost(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	if !hasLease(m, e.topic) {
		return
	}
	e.mu.Lock()
	e.own = false
	cur := e.cur
	e.mu.Unlock()
	if cur != nil {
		cur.lose("group session lost")
	}
}

// acquire waits until this member holds the lease and returns the new term;
// nil once ctx ends or when the coordinator refuses the membership (then
// with the error).
func (e *elector) acquire(ctx context.Context) (*lease, error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, nil
		case err := <-e.refused:
			return nil, err
		case <-tick.C:
			e.r.metrics.Progress() // the standby loop is alive
			continue
		case <-e.assigned:
		}
		e.mu.Lock()
		own := e.own
		e.mu.Unlock()
		if !own {
			e.waited = true // another member holds the lease: this one is a standby
			continue
		}
		if err := e.agree(ctx); err != nil {
			return nil, err
		}
		if err := e.claim(ctx); err != nil {
			return nil, err
		}
		e.mu.Lock()
		if !e.own {
			e.mu.Unlock()
			continue
		}
		l := newLease(ctx)
		l.expired, l.metrics = e.expired, e.r.metrics
		e.cur = l
		e.mu.Unlock()
		e.r.metrics.LeaseEvents.WithLabelValues("acquired").Inc()
		e.watching.Go(func() { e.watch(l) })
		return l, nil
	}
}

// watch loses the lease when no group request has been answered for guard
// (session timeout - 2 x heartbeat interval): the coordinator cannot have
// ended the session yet, so this instance stops publishing before any other
// member can be given the lease.
func (e *elector) watch(l *lease) {
	tick := time.NewTicker(min(100*time.Millisecond, e.heartbeat/4))
	defer tick.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-l.lost:
			return
		case <-tick.C:
			if why := e.expired(); why != "" {
				l.lose(why)
				return
			}
		}
	}
}

// expired says why the lease can no longer be trusted: no group request
// answered for guard. "" while it can.
func (e *elector) expired() string {
	if d := time.Since(time.Unix(0, e.lastOK.Load())); d > e.guard {
		return fmt.Sprintf("no group request answered for %s (ha.session_timeout %s): the session may end",
			d.Round(time.Millisecond), e.session)
	}
	return ""
}

// end closes the term.
func (e *elector) end(l *lease) {
	e.mu.Lock()
	if e.cur == l {
		e.cur = nil
	}
	e.mu.Unlock()
	close(l.done)
	l.cancel()
	e.watching.Wait()
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
	if err := e.join(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		r.metrics.Errors.WithLabelValues(kind(err)).Inc()
		return err
	}
	defer e.leave()
	started := false
	for term := 0; ; term++ {
		r.metrics.SetState(metrics.StateStandby)
		r.log.Info().Str("group", e.group).Str("lock_topic", e.topic).Msg("standby: waiting for the lease")
		waitFrom := time.Now()
		l, err := e.acquire(ctx)
		if err != nil {
			r.metrics.Errors.WithLabelValues("lock_group").Inc()
			return err
		}
		if l == nil {
			return nil
		}
		r.log.Info().Str("group", e.group).Msg("lease acquired: active")
		r.metrics.Fenced.Set(0)
		if term > 0 || e.waited || time.Since(waitFrom) > e.session {
			// Only a fresh start that took the lease at once fails fast on a
			// passing error (a misconfiguration shows at once); a standby
			// taking over retries, like a running instance: it is the one
			// left to publish.
			started = true
		}
		err = r.lead(l, &started)
		e.end(l)
		if ctx.Err() != nil {
			if errors.Is(err, errRevoked) {
				return nil // stopped: the final checkpoint is written
			}
			return err
		}
		switch {
		case errors.Is(err, ErrLeaseLost):
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
		case rerr := <-e.refused: // e.g. another live instance with this ha.instance_id
			r.metrics.Errors.WithLabelValues("lock_group").Inc()
			return rerr
		default:
		}
		// Leave and join again: whoever holds the lease next (another
		// instance, or this one after a fence) starts from the committed
		// checkpoint, and a lease this member lost track of is given up.
		e.leave()
		pause := 250*time.Millisecond + rand.N(250*time.Millisecond)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
		if err := e.join(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// Kafka went away while rejoining: keep trying as a standby.
			r.metrics.Errors.WithLabelValues(kind(err)).Inc()
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
func (r *Relay) rejoin(ctx context.Context, e *elector) error {
	backoff := time.Second
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff/2 + rand.N(backoff/2+1)):
		}
		r.metrics.Progress()
		err := e.join(ctx)
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
func (r *Relay) lead(l *lease, started *bool) error {
	backoff := 250 * time.Millisecond
	r.metrics.Connecting() // /healthz fails if this term never streams (metrics.ConnectingFor)
	for {
		r.metrics.SetState(metrics.StateStarting)
		began := time.Now()
		err := r.attempt(l.ctx, started)
		r.metrics.Ready.Store(false)
		r.metrics.ConnectFailed(err)
		if lerr := l.err(); lerr != nil {
			return lerr // nothing more was published once lost
		}
		if l.ctx.Err() != nil {
			if err != nil && !errors.Is(err, context.Canceled) {
				// Stopping, and the final commit (or what preceded it)
				// failed: say so, never as a clean stop.
				r.metrics.Errors.WithLabelValues(kind(err)).Inc()
				return err
			}
			return errRevoked // the caller tells a stop from a revoke by its own ctx
		}
		if err == nil {
			return nil
		}
		r.metrics.Errors.WithLabelValues(kind(err)).Inc()
		if errors.Is(err, ErrFenced) {
			return err
		}
		// A checkpoint topic held back by another pipeline's open transaction
		// is waited out even at the first start: the broker ends it within
		// that pipeline's transaction timeout.
		if (!*started && !errors.Is(err, checkpoint.ErrCheckpointHeldBack)) || fatal(err) {
			return err
		}
		r.metrics.Restarts.WithLabelValues(kind(err)).Inc()
		if time.Since(began) > time.Minute { // it ran well for a while: start over
			backoff = 250 * time.Millisecond
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		r.log.Warn().Err(err).Str("kind", kind(err)).Dur("retry_in", wait).Msg("pipeline stopped; resuming from the committed checkpoint")
		r.metrics.SetState(metrics.StateRetrying)
		select {
		case <-l.ctx.Done():
			if lerr := l.err(); lerr != nil {
				return lerr
			}
			return errRevoked
		case <-time.After(wait):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}
