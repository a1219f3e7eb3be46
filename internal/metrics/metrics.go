// Package metrics defines the relay's Prometheus metrics (prefix
// outbox_relay_) on a registry of their own, and the HTTP handler that serves
// /metrics, /healthz and /readyz.
package metrics

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// Metrics holds every metric the relay updates.
type Metrics struct {
	Registry *prometheus.Registry

	Events             *prometheus.CounterVec // by topic and outcome: records committed to Kafka
	SourceTransactions prometheus.Counter
	BinlogBytes        prometheus.Counter
	KafkaTransactions  *prometheus.CounterVec // by result: commit | abort
	KafkaTxnSeconds    prometheus.Histogram
	BatchRecords       prometheus.Histogram
	SourceLag          prometheus.Gauge
	CheckpointTime     prometheus.Gauge
	Restarts           *prometheus.CounterVec // by reason
	Errors             *prometheus.CounterVec // by kind
	Fenced             prometheus.Gauge
	InvalidOps         *prometheus.CounterVec // by table and op
	Position           *prometheus.GaugeVec   // info: gtid_set of the last checkpoint
	LeaseEvents        *prometheus.CounterVec // by event: acquired | revoked | lost | fenced
	// SourceHosts: by host and state, 1 for each configured source host's
	// last verdict (streaming, behind, diverged, purged, unreachable,
	// refused, unchecked), 0 for its other states.
	SourceHosts *prometheus.GaugeVec
	// Ready is set by the relay while an attempt streams (connected to the
	// source and Kafka, not stopping).
	Ready atomic.Bool

	position  string
	state     atomic.Pointer[State]
	progress  atomic.Int64 // unix nanoseconds of the last progress mark
	stall     atomic.Int64 // http.stall_timeout; 0: never stalled
	kafkaSeen atomic.Int64 // unix nanoseconds of the last answered group request
	kafkaAge  atomic.Int64 // how old kafkaSeen may be for /readyz; 0: not checked
	leaseEnd  atomic.Int64 // unix nanoseconds until which the lease is trusted; 0: not checked
}

// State is the instance's state in outbox_relay_up{state}.
type State string

// States of an instance. Exactly one is 1 in outbox_relay_up.
const (
	// StateStandby: not holding the lease; connected to the lock group only.
	StateStandby State = "standby"
	// StateStarting: holding the lease, an attempt is starting (fencing,
	// loading the checkpoint, connecting to the source).
	StateStarting State = "starting"
	// StateStreaming: holding the lease and streaming (Ready).
	StateStreaming State = "streaming"
	// StateRetrying: holding the lease, waiting to start a new attempt after
	// a failure.
	StateRetrying State = "retrying"
	// StateStopped: Run has returned (or has not begun).
	StateStopped State = "stopped"
)

// States lists every State, in the order they are exported.
var States = []State{StateStandby, StateStarting, StateStreaming, StateRetrying, StateStopped}

// Role is the instance's role in outbox_relay_role{role}.
type Role string

// Roles. A stopped instance has neither.
const (
	RoleActive  Role = "active"
	RoleStandby Role = "standby"
)

// SetState records the instance's state; it is also a progress mark.
// StateStarting turns into StateStreaming while Ready is set.
func (m *Metrics) SetState(s State) {
	m.state.Store(&s)
	m.Progress()
}

// State is the current state.
func (m *Metrics) State() State {
	p := m.state.Load()
	if p == nil {
		return StateStopped
	}
	switch *p {
	case StateStandby, StateStopped:
		return *p
	}
	if end := m.leaseEnd.Load(); end != 0 && time.Now().UnixNano() > end {
		// The clock says the lease may be gone: whatever the loop is
		// still winding down, this instance publishes nothing more.
		return StateStandby
	}
	if *p == StateStarting && m.Ready.Load() {
		return StateStreaming
	}
	return *p
}

// LeaseUntil sets until when the lease is trusted (zero time: no lease
// check); past it an active state reads as standby.
func (m *Metrics) LeaseUntil(t time.Time) {
	if t.IsZero() {
		m.leaseEnd.Store(0)
		return
	}
	m.leaseEnd.Store(t.UnixNano())
}

// Role is the role of the current state; "" when stopped.
func (m *Metrics) Role() Role {
	switch m.State() {
	case StateStandby:
		return RoleStandby
	case StateStopped:
		return ""
	}
	return RoleActive
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
// instance can stall: a standby waits by design, and starting and retrying
// are bounded by their own timeouts (a start that waits for a source host
// to catch up must not look stuck).
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
// and Kafka answered recently.
func (m *Metrics) NotReady() string {
	if s := m.State(); s != StateStreaming {
		return string(s)
	}
	if limit := time.Duration(m.kafkaAge.Load()); limit > 0 {
		if d := since(m.kafkaSeen.Load()); d > limit {
			return fmt.Sprintf("kafka: no answer for %s", d.Round(100*time.Millisecond))
		}
	}
	return ""
}

// SetPosition makes gtid_set the one series of the position info metric.
// Only the relay loop calls it.
func (m *Metrics) SetPosition(gtidSet string) {
	if gtidSet == m.position {
		return
	}
	m.position = gtidSet
	m.Position.Reset()
	m.Position.WithLabelValues(gtidSet).Set(1)
}

// New registers the metrics on a fresh registry.
func New(version string) *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.Registry.MustRegister(c) }
	m.Events = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_relay_events_total",
		Help: "Records committed to Kafka, by topic and outcome (published, or dead_letter for bad rows).",
	}, []string{"topic", "outcome"})
	m.SourceTransactions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "outbox_relay_source_transactions_total",
		Help: "Source transactions read from the binlog (captured or not).",
	})
	m.BinlogBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "outbox_relay_binlog_bytes_total",
		Help: "Binlog event bytes read.",
	})
	m.KafkaTransactions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_relay_kafka_transactions_total",
		Help: "Kafka transactions (at-least-once: batches) ended, by result.",
	}, []string{"result"})
	m.KafkaTxnSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "outbox_relay_kafka_transaction_duration_seconds",
		Help:    "Time from flushing a batch to its commit (exactly-once).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	})
	m.BatchRecords = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "outbox_relay_batch_records",
		Help:    "Outbox records per Kafka transaction.",
		Buckets: prometheus.ExponentialBuckets(1, 4, 10),
	})
	m.SourceLag = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "outbox_relay_source_lag_seconds",
		Help: "Now minus the commit time of the last source transaction processed.",
	})
	m.CheckpointTime = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "outbox_relay_checkpoint_timestamp_seconds",
		Help: "Unix time of the last committed checkpoint.",
	})
	m.Restarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_relay_restarts_total",
		Help: "Pipeline restarts from the committed checkpoint, by reason.",
	}, []string{"reason"})
	m.Errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_relay_errors_total",
		Help: "Errors, by kind.",
	}, []string{"kind"})
	m.Fenced = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "outbox_relay_fenced",
		Help: "1 from a fence by another producer with the same name until this instance holds the lease again.",
	})
	m.InvalidOps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_relay_invalid_ops_total",
		Help: "Rows updated or deleted in an outbox table (op update, delete, or delete_after_insert for the expected pattern).",
	}, []string{"table", "op"})
	m.Position = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outbox_relay_position_info",
		Help: "The GTID set of the last committed checkpoint, as a label.",
	}, []string{"gtid_set"})
	age := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "outbox_relay_checkpoint_age_seconds",
		Help: "Seconds since the last committed checkpoint (0 before the first).",
	}, func() float64 {
		last := m.lastCheckpoint()
		if last == 0 {
			return 0
		}
		return float64(time.Now().UnixNano())/1e9 - last
	})
	m.LeaseEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_relay_lease_events_total",
		Help: "Lease (active role) changes of this instance, by event: acquired, revoked, lost, fenced.",
	}, []string{"event"})
	var oneHot []prometheus.Collector
	for _, st := range States {
		oneHot = append(oneHot, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "outbox_relay_up",
			Help:        "1 for the instance's current state (standby, starting, streaming, retrying, stopped), 0 for the others.",
			ConstLabels: prometheus.Labels{"state": string(st)},
		}, func() float64 { return b2f(m.State() == st) }))
	}
	for _, r := range []Role{RoleActive, RoleStandby} {
		oneHot = append(oneHot, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "outbox_relay_role",
			Help:        "1 for the instance's role: active (holds the lease) or standby; both 0 once stopped.",
			ConstLabels: prometheus.Labels{"role": string(r)},
		}, func() float64 { return b2f(m.Role() == r) }))
	}
	m.SourceHosts = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outbox_relay_source_host",
		Help: "1 for each source host's state: streaming (the host in use), behind, diverged, purged, unreachable, refused or unchecked; 0 for the others.",
	}, []string{"host", "state"})
	f(m.SourceHosts)
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "outbox_relay_build_info",
		Help:        "Build information.",
		ConstLabels: prometheus.Labels{"version": version},
	})
	build.Set(1)
	for _, c := range []prometheus.Collector{m.Events, m.SourceTransactions, m.BinlogBytes, m.KafkaTransactions,
		m.KafkaTxnSeconds, m.BatchRecords, m.SourceLag, m.CheckpointTime, m.Restarts, m.Errors, m.Fenced, build,
		m.Position, age, m.InvalidOps, m.LeaseEvents,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		f(c)
	}
	for _, c := range oneHot {
		f(c)
	}
	return m
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (m *Metrics) lastCheckpoint() float64 {
	var out dto.Metric
	if err := m.CheckpointTime.Write(&out); err != nil || out.Gauge == nil {
		return 0
	}
	return out.Gauge.GetValue()
}

// Handler serves /metrics, /healthz (503 when the active relay loop has
// stalled, see Stalled) and /readyz (200 only while active and streaming with
// Kafka answering, see NotReady; the body names the state).
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if d := m.Stalled(); d > 0 {
			http.Error(w, fmt.Sprintf("stalled: no progress for %s (%s)", d.Round(time.Second), m.State()), http.StatusServiceUnavailable)
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
