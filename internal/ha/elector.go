package ha

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// Kafka API keys of the group requests whose answers keep the session alive.
const (
	keyJoinGroup = 11
	keyHeartbeat = 12
	keySyncGroup = 14
)

// Config is what an Elector needs from the relay.
type Config struct {
	Relay   config.Config // the pipeline's validated configuration (name, ha, kafka, source.tables, router)
	Log     zerolog.Logger
	Metrics *metrics.Metrics
	Kafka   clients.Kafka // builds the lock group's client and the admin clients
}

// Elector is this instance's membership of the lock group. One goroutine
// (the relay's Run) calls its methods; franz-go's group goroutines call its
// hooks, and each term's watcher is its own (joined by End).
type Elector struct {
	c Config
	// id names this member, its group and lock topic; times are its
	// session's.
	id    memberID
	times sessionTimes

	cl       *kgo.Client
	clCancel context.CancelFunc // cl's context (kgo.WithContext): ends its requests in flight
	lastOK   atomic.Int64       // unix nanos: when the last answered group request was sent
	assigned chan struct{}
	refused  chan error // the coordinator refuses the membership for good

	// fencedInstance: another live member took this instance id; leaving
	// must not remove it (a leave names the instance id, not the member).
	fencedInstance atomic.Bool

	mu  sync.Mutex
	own bool // partition 0 is assigned to this member
	// waited: an assignment gave the lease to another member while this one
	// waited (only Acquire's goroutine uses it).
	waited bool
	cur    *Lease // the current term; nil in standby
	// watching is the current term's watch goroutine: End joins it.
	watching sync.WaitGroup
	// recordedID is the checkpoint topic id the lock group's record holds
	// (claim; "" when none); read and written on Run's goroutine only.
	recordedID string
}

// memberID names a member of the lock group.
type memberID struct {
	group string // clients.GroupID
	topic string // ha.lock_topic
	// instance is the static membership id (ha.instance_id, or the host
	// name): a restart with the same id rejoins without a rebalance.
	instance string
	// client tells this member from the others in the lock group.
	client string
}

// sessionTimes are a member's session timing: ha.session_timeout,
// ha.heartbeat_interval, and guard, how long without an answered group
// request the lease is trusted.
type sessionTimes struct {
	session, heartbeat, guard time.Duration
}

// New returns the elector of c.Relay's pipeline; Join joins the group.
func New(c Config) *Elector {
	h := c.Relay.HA
	return &Elector{c: c, id: memberID{group: clients.GroupID(c.Relay.Name), topic: h.LockTopic, instance: instanceIDOf(c.Relay)},
		times:    sessionTimes{session: h.SessionTimeout, heartbeat: h.HeartbeatInterval, guard: h.SessionTimeout - 2*h.HeartbeatInterval},
		assigned: make(chan struct{}, 1), refused: make(chan error, 1)}
}

// Group is the lock group's id (clients.GroupID).
func (e *Elector) Group() string { return e.id.group }

// Topic is the lock topic (ha.lock_topic).
func (e *Elector) Topic() string { return e.id.topic }

// Session is ha.session_timeout.
func (e *Elector) Session() time.Duration { return e.times.session }

// Waited reports whether another member was in the group or held the
// lease while this one waited, at any time since it first joined: a
// standby that takes over, not a fresh start.
func (e *Elector) Waited() bool { return e.waited }

// MemberID is this member's id in the lock group ("" before it joined).
func (e *Elector) MemberID() string {
	if e.cl == nil {
		return ""
	}
	m, _ := e.cl.GroupMetadata()
	return m
}

// Refused delivers, once, an error with which the coordinator refuses this
// membership for good (a configuration error, or Kafka refusing the group).
func (e *Elector) Refused() <-chan error { return e.refused }

// current is the term in progress; nil in standby.
func (e *Elector) current() *Lease {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cur
}

// OnGroupManageError (kgo.HookGroupManageError) logs the lock group's
// errors (franz-go retries them) and reports those that retrying cannot fix:
// a session timeout outside the broker's bounds, a group or topic the
// relay may not use.
func (e *Elector) OnGroupManageError(err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	e.c.Log.Warn().Err(err).Str("group", e.id.group).Msg("lock group")
	switch kafkaerr.MembershipOf(err) {
	case kafkaerr.MemberBadSession:
		err = fmt.Errorf("%w: ha.session_timeout %s refused by the broker (group.min.session.timeout.ms, group.max.session.timeout.ms): %w",
			config.ErrInvalid, e.times.session, err)
	case kafkaerr.MemberReplaced:
		// A newer member joined with this instance's ha.instance_id: two
		// live instances share it (a restart replaces a dead one and never
		// meets this). Each would be handed the other's place.
		err = fmt.Errorf("%w: another instance of pipeline %s joined the lock group with this instance's ha.instance_id %q "+
			"(by default the host name): give every instance its own: %w", config.ErrInvalid, e.c.Relay.Name, e.id.instance, err)
		e.fencedInstance.Store(true)
		if cur := e.current(); cur != nil {
			cur.Lose("fenced in the lock group by an instance with the same ha.instance_id")
		}
	case kafkaerr.MemberRefused:
		err = fmt.Errorf("%w: lock group %s on %s: %w", errclass.ErrRejected, e.id.group, e.id.topic, err)
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
func (e *Elector) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
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
	e.c.Metrics.KafkaSeen(time.Now())
	e.c.Metrics.LeaseUntil(sent.Add(e.times.guard))
}

// Join checks Kafka, creates the lock topic if missing and joins the group.
// Errors (Kafka unreachable, refused) are returned at once.
func (e *Elector) Join(ctx context.Context) error {
	if e.id.client == "" {
		// fingerprint-capture.random: an older build checks the prefix
		// only; memberCapture reads the capture tag.
		e.id.client = e.fingerprint() + "-" + e.captureTag() + "." + strconv.FormatUint(rand.Uint64(), 36)
	}
	if err := e.awaitInstanceID(ctx); err != nil {
		return err
	}
	opts := e.c.Kafka.LockGroup(clients.LockMember{InstanceID: e.id.instance, ClientID: e.id.client, Hooks: e,
		Assigned: e.onAssigned, Revoked: e.onRevoked, Lost: e.onLost})
	cctx, ccancel := context.WithCancel(context.Background())
	cl, err := kgo.NewClient(append(opts, kgo.WithContext(cctx))...)
	if err != nil {
		ccancel()
		return fmt.Errorf("create kafka group client: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, e.c.Relay.Kafka.RequestTimeout)
	err = cl.Ping(pctx)
	if err == nil {
		err = e.ensureTopic(pctx, kadm.NewClient(cl))
	}
	cancel()
	if err != nil {
		ccancel()
		cl.Close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, errclass.ErrRejected) {
			return err
		}
		return fmt.Errorf("%w: %v: %w (check kafka.brokers, kafka.tls and kafka.sasl)", errclass.ErrKafkaUnreachable, e.c.Relay.Kafka.Brokers, err)
	}
	// Another member already in the group (an active instance, or one
	// whose session has not ended yet): this one starts as a standby, and
	// takes over later like a running instance (no fail-fast start).
	if groups, derr := kadm.NewClient(cl).DescribeGroups(ctx, e.id.group); derr == nil {
		for _, g := range groups {
			for _, m := range g.Members {
				if m.ClientID != e.id.client {
					e.waited = true
				}
			}
		}
	}
	now := time.Now()
	e.lastOK.Store(now.UnixNano())
	e.c.Metrics.KafkaSeen(now)
	e.c.Metrics.LeaseUntil(now.Add(e.times.guard))
	e.cl, e.clCancel = cl, ccancel
	return nil
}

// ensureTopic creates the one-partition lock topic if it is missing.
func (e *Elector) ensureTopic(ctx context.Context, adm *kadm.Client) error {
	resp, err := adm.CreateTopic(ctx, 1, e.c.Relay.Kafka.ReplicationFactor, nil, e.id.topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && kafkaerr.AdminRefused(err) {
		// least privilege: the lock topic was created beforehand, or the
		// group join names what is missing
		e.c.Log.Debug().Str("topic", e.id.topic).AnErr("refused", err).Msg("kafka refused to create the lock topic: using it as it exists")
		return nil
	}
	if err != nil && !kafkaerr.TopicExists(err) {
		return fmt.Errorf("create lock topic %s: %w", e.id.topic, errclass.Kafka(err))
	}
	return nil
}

// Leave closes the group client: the group is left (a rebalance hands the
// lease to another member at once) unless the coordinator is unreachable.
func (e *Elector) Leave() {
	if e.cl == nil {
		return
	}
	// Best effort: without an answer the session ends by itself. A static
	// member's client does not send the leave itself (a restart would take
	// its place back): the relay leaves on purpose, so it sends it for the
	// instance id, and a standby takes over at once.
	lctx, cancel := context.WithTimeout(context.Background(), min(e.c.Relay.Kafka.RequestTimeout, e.times.session))
	_ = e.cl.LeaveGroupContext(lctx)
	if e.fencedInstance.Load() {
		// The id is another live member's now.
	} else if _, err := kadm.NewClient(e.cl).LeaveGroup(lctx, kadm.LeaveGroup(e.id.group).InstanceIDs(e.id.instance).
		Reason("outbox-relay instance leaving")); err != nil {
		e.c.Log.Debug().Err(err).Str("group", e.id.group).Msg("leave the lock group")
	}
	cancel()
	// Close waits for the group's management loop, which may wait in a
	// JoinGroup the coordinator never answers (a frozen broker) for the
	// rebalance timeout plus kafka.request_timeout: minutes after SIGTERM.
	// The leave above had its bound; what is still in flight is given up.
	e.clCancel()
	e.cl.Close()
	e.cl, e.clCancel = nil, nil
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

func (e *Elector) onAssigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	if !hasLease(m, e.id.topic) {
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
func (e *Elector) onRevoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	if !hasLease(m, e.id.topic) {
		return
	}
	e.mu.Lock()
	e.own = false
	cur := e.cur
	e.mu.Unlock()
	if cur == nil {
		return
	}
	e.c.Metrics.LeaseEvents.WithLabelValues("revoked").Inc()
	cur.cancel()
	select {
	case <-cur.done:
	case <-cur.lost:
	}
}

// onLost: the session ended (the coordinator no longer knows this member):
// another member may already hold the lease.
func (e *Elector) onLost(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	if !hasLease(m, e.id.topic) {
		return
	}
	e.mu.Lock()
	e.own = false
	cur := e.cur
	e.mu.Unlock()
	if cur == nil {
		return
	}
	if silent := time.Since(time.Unix(0, e.lastOK.Load())); silent > e.times.heartbeat+e.times.heartbeat/2 {
		// The coordinator stopped answering before the session ended: Kafka,
		// not another instance, took the lease. The state reads
		// kafka_unreachable until a group request is answered again, never
		// standby (which says another instance covers).
		e.c.Metrics.LeaseUntil(time.Now())
	}
	cur.Lose("group session lost")
}

// standbyCheckInterval is how often a standby compares its settings with
// the lease holder's (agreeWithHolder): one DescribeGroups request; the
// first within a second of Acquire.
const standbyCheckInterval = 10 * time.Second

// Acquire waits until this member holds the lease and returns the new term;
// nil once ctx ends or when the coordinator refuses the membership (then
// with the error). Waiting, a standby checks every standbyCheckInterval that
// it could take the lease over from its holder, and returns the
// configuration error when it could not (agreeWithHolder).
func (e *Elector) Acquire(ctx context.Context) (*Lease, error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var checked time.Time // the standby's last check of the lease holder
	for {
		select {
		case <-ctx.Done():
			return nil, nil
		case err := <-e.refused:
			return nil, err
		case <-tick.C:
			e.c.Metrics.Progress() // the standby loop is alive
			e.mu.Lock()
			own := e.own
			e.mu.Unlock()
			if !own && time.Since(checked) >= standbyCheckInterval {
				checked = time.Now()
				if err := e.agreeWithHolder(ctx); err != nil && ctx.Err() == nil {
					return nil, err
				}
			}
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
		l := NewLease(ctx)
		l.expired, l.metrics = e.expired, e.c.Metrics
		e.cur = l
		e.mu.Unlock()
		e.c.Metrics.LeaseEvents.WithLabelValues("acquired").Inc()
		e.watching.Go(func() { e.watch(l) })
		return l, nil
	}
}

// watch loses the lease when no group request has been answered for guard
// (session timeout - 2 x heartbeat interval): the coordinator cannot have
// ended the session yet, so this instance stops publishing before any other
// member can be given the lease.
func (e *Elector) watch(l *Lease) {
	tick := time.NewTicker(min(100*time.Millisecond, e.times.heartbeat/4))
	defer tick.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-l.lost:
			return
		case <-tick.C:
			if why := e.expired(); why != "" {
				l.Lose(why)
				return
			}
		}
	}
}

// expired says why the lease can no longer be trusted: no group request
// answered for guard. "" while it can.
func (e *Elector) expired() string {
	if d := time.Since(time.Unix(0, e.lastOK.Load())); d > e.times.guard {
		return fmt.Sprintf("no group request answered for %s (ha.session_timeout %s): the session may end",
			d.Round(time.Millisecond), e.times.session)
	}
	return ""
}

// End closes the term l: its watcher is joined before End returns.
func (e *Elector) End(l *Lease) {
	e.mu.Lock()
	if e.cur == l {
		e.cur = nil
	}
	e.mu.Unlock()
	close(l.done)
	l.cancel()
	e.watching.Wait()
}
