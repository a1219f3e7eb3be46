// Package metrics defines the relay's Prometheus metrics (prefix
// outbox_relay_) on a registry of their own, and the HTTP handler that serves
// /metrics, /healthz and /readyz.
//
// Contract: no label carries a value that grows without bound (no GTID set,
// no event id); outbox_relay_up and outbox_relay_role are one-hot and always
// exported; outbox_relay_source_lag_seconds is 0 once the relay has read
// everything the source has, whatever the age of the last commit; values that
// are not known yet are NaN, never a made-up number. docs/monitoring.md
// describes every family.
package metrics

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// Metrics holds every metric the relay updates.
type Metrics struct {
	Registry *prometheus.Registry
	Version  string // the relay's version, as outbox_relay_build_info says

	Events             *prometheus.CounterVec // by topic and outcome: records committed to Kafka
	SourceTransactions prometheus.Counter
	BinlogBytes        prometheus.Counter
	KafkaTransactions  *prometheus.CounterVec // by result: commit | abort
	KafkaTxnSeconds    prometheus.Histogram
	BatchRecords       prometheus.Histogram
	// SourceLag follows SourceRead and SourceAtHead.
	SourceLag prometheus.GaugeFunc
	// SourceBehindBytes: binlog bytes on the source after the reader's
	// position, sampled (NaN until the first sample).
	SourceBehindBytes prometheus.Gauge
	CheckpointTime    prometheus.Gauge
	Restarts          *prometheus.CounterVec // by reason
	Errors            *prometheus.CounterVec // by kind
	Fenced            prometheus.Gauge
	InvalidOps        *prometheus.CounterVec // by table and op
	// TracingInvalid: rows published without trace headers because their
	// router.tracing_column value is not a valid trace context, by table.
	TracingInvalid *prometheus.CounterVec
	// tables: outbox_relay_captured_table_missing (tables.go).
	tables tableMetrics
	audit  auditMetrics
	// Position: the checkpoint's sequence number per GTID source (see
	// SetPosition).
	Position    *prometheus.GaugeVec
	LeaseEvents *prometheus.CounterVec // by event: acquired | revoked | lost | fenced
	// SourceHosts: by host and state, 1 for each configured source host's
	// last verdict (streaming, behind, diverged, purged, unreachable,
	// refused, unchecked), 0 for its other states.
	SourceHosts *prometheus.GaugeVec
	// ExitCode: the exit status the process is about to end with (see
	// Exiting); -1 while it runs.
	ExitCode prometheus.Gauge
	// Ready is set by the relay while an attempt streams (connected to the
	// source and Kafka, not stopping).
	Ready atomic.Bool

	position     string
	sources      map[string]uint64
	state        atomic.Pointer[State]
	progress     atomic.Int64           // unix nanoseconds of the last progress mark
	stall        atomic.Int64           // http.stall_timeout; 0: never stalled
	connFrom     atomic.Int64           // unix nanoseconds: since when the active instance connects without streaming; 0 not
	connWhy      atomic.Pointer[string] // why its last attempt to start failed
	kafkaSeen    atomic.Int64           // unix nanoseconds of the last answered group request
	kafkaAge     atomic.Int64           // how old kafkaSeen may be for /readyz; 0: not checked
	kafkaBrokers atomic.Pointer[string] // the lock group's brokers, for /readyz
	leaseEnd     atomic.Int64           // unix nanoseconds until which the lease is trusted; 0: not checked
	lastCommit   atomic.Int64           // unix nanoseconds: commit time of the last source transaction handled
	atHead       atomic.Bool            // a heartbeat was handled after it
	cpCommit     atomic.Int64           // unix nanoseconds: commit time of the last known checkpoint's last transaction; 0 unknown
	clearAt      atomic.Int64           // unix nanoseconds: last time at the head with everything read checkpointed
	retention    atomic.Int64           // binlog retention (ns); 0 unknown, -1 never purged by age
}

// New registers the metrics on a fresh registry.
func New(version string) *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry(), Version: version}
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
	m.SourceLag = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "outbox_relay_source_lag_seconds",
		Help: "While behind the source's head: now minus the commit time of the last source transaction handled. 0 once the relay has read everything the source has (a server heartbeat arrived after it), however old the last commit.",
	}, m.sourceLag)
	m.SourceBehindBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "outbox_relay_source_behind_bytes",
		Help: "Binlog bytes on the source after the reader's position (SHOW BINARY LOGS, sampled every few seconds while streaming); NaN until sampled.",
	})
	m.SourceBehindBytes.Set(math.NaN())
	m.CheckpointTime = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "outbox_relay_checkpoint_timestamp_seconds",
		Help: "Unix time at which the last committed checkpoint known to this instance was written (see CheckpointKnown).",
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
	m.TracingInvalid = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_relay_tracing_context_invalid_total",
		Help: "Rows published without traceparent/tracestate headers because their router.tracing_column value is not a valid W3C trace context, by table.",
	}, []string{"table"})
	m.Position = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outbox_relay_checkpoint_gtid_sequence",
		Help: "Sequence number of the last committed checkpoint per GTID source: MariaDB domain id, MySQL server_uuid (or uuid:tag). The GTID set itself is in the progress log line and `checkpoint show`.",
	}, []string{"gtid_source"})
	age := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "outbox_relay_checkpoint_age_seconds",
		Help: "Seconds since the pipeline's last committed checkpoint known to this instance (loaded at the start of an attempt or written since), whatever its role; NaN before one is known. An instance that knows a later checkpoint shows a lower age: aggregate with min.",
	}, func() float64 {
		last := m.lastCheckpoint()
		if last == 0 {
			return math.NaN()
		}
		return float64(time.Now().UnixNano())/1e9 - last
	})
	margin := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "outbox_relay_checkpoint_purge_margin_seconds",
		Help: "The source's binlog retention (its expire settings) minus the age of the binlogs after the checkpoint (the commit time of the checkpoint's last transaction, or the last time the relay was at the head with everything checkpointed): how long until they may be purged if the checkpoint does not move. Kept from the last known checkpoint whatever the role; +Inf when the source never purges by age, NaN until known. Aggregate with max.",
	}, m.purgeMargin)
	ready := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "outbox_relay_ready",
		Help: "1 while /readyz answers 200: active, streaming, Kafka answering.",
	}, func() float64 { return b2f(m.NotReady() == "") })
	m.LeaseEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_relay_lease_events_total",
		Help: "Lease (active role) changes of this instance, by event: acquired, revoked, lost, fenced.",
	}, []string{"event"})
	m.ExitCode = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "outbox_relay_exit_code",
		Help: "The exit status the process is about to end with, exported for http.exit_grace before it exits (65 data stop, 66 purged, 78 configuration, ...); -1 while running.",
	})
	m.ExitCode.Set(-1)
	for _, e := range []string{"acquired", "revoked", "lost", "fenced"} {
		m.LeaseEvents.WithLabelValues(e) // from 0, so that increase() sees the first one
	}
	var oneHot []prometheus.Collector
	for _, st := range States {
		oneHot = append(oneHot, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "outbox_relay_up",
			Help:        "1 for the instance's current state (standby, connecting, streaming, fenced, stopped, kafka_unreachable), 0 for the others.",
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
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "outbox_relay_build_info",
		Help:        "Build information.",
		ConstLabels: prometheus.Labels{"version": version},
	})
	build.Set(1)
	for _, c := range []prometheus.Collector{m.Events, m.SourceTransactions, m.BinlogBytes, m.KafkaTransactions,
		m.KafkaTxnSeconds, m.BatchRecords, m.SourceLag, m.SourceBehindBytes, m.CheckpointTime, m.Restarts, m.Errors,
		m.Fenced, build, m.Position, age, margin, ready, m.InvalidOps, m.TracingInvalid, m.LeaseEvents, m.SourceHosts, m.ExitCode,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		m.Registry.MustRegister(c)
	}
	for _, c := range oneHot {
		m.Registry.MustRegister(c)
	}
	return m
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// value reads a gauge's current value.
func value(g prometheus.Gauge) float64 {
	var out dto.Metric
	if err := g.Write(&out); err != nil || out.Gauge == nil {
		return 0
	}
	return out.Gauge.GetValue()
}

func (m *Metrics) lastCheckpoint() float64 { return value(m.CheckpointTime) }
