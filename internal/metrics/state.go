package metrics

import (
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// State is the instance's state in outbox_relay_up{state}.
type State string

// States of an instance. Exactly one is 1 in outbox_relay_up.
const (
	// StateStandby: not holding the lease; connected to the lock group only.
	StateStandby State = "standby"
	// StateConnecting: holding the lease, not streaming: an attempt is
	// starting (fencing, loading the checkpoint, choosing and connecting to
	// a source host, waiting for a lagging one) or waiting to start again
	// after a failure. A source or Kafka outage keeps an active instance
	// here (or, when the lock group is lost too, in standby).
	StateConnecting State = "connecting"
	// StateStreaming: holding the lease and streaming (Ready).
	StateStreaming State = "streaming"
	// StateFenced: back to standby after another producer with the same
	// transactional id fenced this one (a `checkpoint set`, or an instance
	// that took over), until this instance holds the lease again. Derived:
	// StateStandby while the Fenced gauge is 1.
	StateFenced State = "fenced"
	// StateStopped: Run has returned (or has not begun); kept for
	// http.exit_grace before a fatal exit, with outbox_relay_exit_code.
	StateStopped State = "stopped"
	// StateKafkaUnreachable: holding no lease because Kafka does not
	// answer: the lock group's coordinator has answered no group request
	// for longer than the lease is trusted (ha.session_timeout - 2 x
	// ha.heartbeat_interval; LeaseUntil), whether the instance was active
	// (its lease lapsed by the clock) or not (rejoining the group).
	// Derived: a broker outage reads as this, never as a standby that
	// another instance could be covering for. Its role is standby.
	StateKafkaUnreachable State = "kafka_unreachable"

	// StateStarting and StateRetrying are the relay's names for the two
	// halves of StateConnecting (an attempt starting, a pause before the
	// next one); both are exported as "connecting".
	StateStarting = StateConnecting
	StateRetrying = StateConnecting
)

// States lists every State, in the order they are exported.
var States = []State{StateStandby, StateConnecting, StateStreaming, StateFenced, StateStopped, StateKafkaUnreachable}

// Role is the instance's role in outbox_relay_role{role}.
type Role string

// Roles. A stopped instance has neither.
const (
	RoleActive  Role = "active"
	RoleStandby Role = "standby"
)

// SetState records the instance's state; it is also a progress mark.
// StateConnecting turns into StateStreaming while Ready is set, and
// StateStandby into StateFenced while the fenced gauge is 1.
func (m *Metrics) SetState(s State) {
	if s == StateConnecting && m.Role() != RoleActive {
		// A new term: the last term's reading says nothing about this one.
		m.lastCommit.Store(0)
		m.atHead.Store(false)
	}
	switch s {
	case StateStandby, StateStopped:
		m.connFrom.Store(0)
	}
	m.state.Store(&s)
	m.Progress()
}

// Connecting marks the start of a wait to stream: the active instance
// begins a term, its stream ended, or a source host answered that it is
// behind (a known wait, logged each round). /healthz fails once the
// instance has been connecting longer than the stall timeout since (see
// ConnectingFor): retries that keep failing (a source host that does not
// answer, Kafka down) are not progress.
func (m *Metrics) Connecting() {
	m.connFrom.Store(time.Now().UnixNano())
	m.connWhy.Store(nil)
}

// ConnectFailed records why the last attempt to start failed, for
// /healthz's answer.
func (m *Metrics) ConnectFailed(err error) {
	if err == nil {
		return
	}
	why := err.Error()
	m.connWhy.Store(&why)
}

// ConnectingFor reports how long the active instance has been connecting
// without streaming, when that exceeds the stall timeout, with the last
// attempt's error; 0 otherwise.
func (m *Metrics) ConnectingFor() (time.Duration, string) {
	limit := time.Duration(m.stall.Load())
	from := m.connFrom.Load()
	if limit <= 0 || from == 0 || m.State() != StateConnecting {
		return 0, ""
	}
	d := since(from)
	if d <= limit {
		return 0, ""
	}
	why := ""
	if p := m.connWhy.Load(); p != nil {
		why = *p
	}
	return d, why
}

// State is the current state.
func (m *Metrics) State() State {
	p := m.state.Load()
	if p == nil {
		return StateStopped
	}
	switch *p {
	case StateStopped:
		return *p
	case StateStandby, StateFenced:
		if value(m.Fenced) == 1 {
			return StateFenced
		}
		if m.kafkaGone() {
			return StateKafkaUnreachable
		}
		return StateStandby
	}
	if m.kafkaGone() {
		// The clock says the lease may be gone: whatever the loop is
		// still winding down, this instance publishes nothing more. Only
		// an answered group request moves leaseEnd: the coordinator has
		// not answered (or the process was paused, for a moment).
		return StateKafkaUnreachable
	}
	if *p == StateConnecting && m.Ready.Load() {
		return StateStreaming
	}
	return *p
}

// LeaseUntil sets until when the lease is trusted (zero time: no lease
// check); past it the state reads as kafka_unreachable (role standby).
func (m *Metrics) LeaseUntil(t time.Time) {
	if t.IsZero() {
		m.leaseEnd.Store(0)
		return
	}
	m.leaseEnd.Store(t.UnixNano())
}

// KafkaBrokers names the lock group's brokers for /readyz.
func (m *Metrics) KafkaBrokers(brokers string) { m.kafkaBrokers.Store(&brokers) }

// kafkaGone: past the time until which the lease is trusted (LeaseUntil),
// which only an answered group request moves: the lock group's coordinator
// has answered nothing for ha.session_timeout - 2 x ha.heartbeat_interval.
func (m *Metrics) kafkaGone() bool {
	end := m.leaseEnd.Load()
	return end != 0 && time.Now().UnixNano() > end
}

// kafkaUnreachable says why the state is StateKafkaUnreachable, for /readyz.
func (m *Metrics) kafkaUnreachable() string {
	why := "kafka unreachable"
	if b := m.kafkaBrokers.Load(); b != nil && *b != "" {
		why += ": " + *b
	}
	if seen := m.kafkaSeen.Load(); seen != 0 {
		why += fmt.Sprintf(" (the lock group's coordinator answered nothing for %s)", since(seen).Round(100*time.Millisecond))
	}
	return why
}

// Role is the role of the current state; "" when stopped. An instance
// that cannot reach Kafka holds no lease: standby.
func (m *Metrics) Role() Role {
	switch m.State() {
	case StateStandby, StateFenced, StateKafkaUnreachable:
		return RoleStandby
	case StateStopped:
		return ""
	}
	return RoleActive
}

// Exiting records the exit status the process is about to end with
// (outbox_relay_exit_code) and sets StateStopped: the caller then keeps
// serving /metrics for http.exit_grace, so that a scrape sees why.
func (m *Metrics) Exiting(code int) {
	m.ExitCode.Set(float64(code))
	m.SetState(StateStopped)
}

// Progress marks that the relay loop moved: an event handled, a checkpoint
// committed, a state change.
func (m *Metrics) Progress() { m.progress.Store(time.Now().UnixNano()) }

// SetStallTimeout sets how long the active instance may go without progress
// before /healthz fails (0: never).
func (m *Metrics) SetStallTimeout(d time.Duration) { m.stall.Store(int64(d)) }

// KafkaSeen records when Kafka last answered the lock group's requests;
// KafkaMaxAge sets how old that may be while /readyz answers 200 (0: not
// checked).
func (m *Metrics) KafkaSeen(t time.Time)       { m.kafkaSeen.Store(t.UnixNano()) }
func (m *Metrics) KafkaMaxAge(d time.Duration) { m.kafkaAge.Store(int64(d)) }
func since(unixNano int64) time.Duration       { return time.Since(time.Unix(0, unixNano)) }

// Stalled reports how long the streaming relay loop has made no progress,
// when that exceeds the stall timeout; 0 otherwise. Only a streaming
// instance stalls this way: a standby waits by design, and a connecting one
// is judged by ConnectingFor.
func (m *Metrics) Stalled() time.Duration {
	limit := time.Duration(m.stall.Load())
	if limit <= 0 || m.State() != StateStreaming {
		return 0
	}
	if d := since(m.progress.Load()); d > limit {
		return d
	}
	return 0
}

// NotReady says why /readyz fails, "" when the instance is active, streaming
// and Kafka answered recently. outbox_relay_ready exports the same verdict.
func (m *Metrics) NotReady() string {
	if s := m.State(); s == StateKafkaUnreachable {
		return m.kafkaUnreachable()
	} else if s != StateStreaming {
		return string(s)
	}
	if limit := time.Duration(m.kafkaAge.Load()); limit > 0 {
		if d := since(m.kafkaSeen.Load()); d > limit {
			return fmt.Sprintf("kafka: no answer for %s", d.Round(100*time.Millisecond))
		}
	}
	return ""
}

// Handler serves /metrics, /healthz (503 when the active relay loop has
// stalled, see Stalled, or the active instance has been connecting too
// long, see ConnectingFor) and /readyz (200 only while active and streaming with
// Kafka answering, see NotReady; the body names the state).
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if d := m.Stalled(); d > 0 {
			http.Error(w, fmt.Sprintf("stalled: no progress for %s (%s)", d.Round(time.Second), m.State()), http.StatusServiceUnavailable)
			return
		}
		if d, why := m.ConnectingFor(); d > 0 {
			msg := fmt.Sprintf("stalled: connecting for %s without streaming", d.Round(time.Second))
			if why != "" {
				msg += " (last attempt: " + why + ")"
			}
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintf(w, "ok: %s\n", m.State())
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := m.NotReady(); why != "" {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready: streaming\n"))
	})
	return mux
}
