// Package metrics defines the relay's Prometheus metrics (prefix
// outbox_relay_) on a registry of their own, and the HTTP handler that serves
// /metrics, /healthz and /readyz.
package metrics

import (
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
	Ready              atomic.Bool

	position string
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
		Help: "1 once another instance with the same name has fenced this one.",
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
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "outbox_relay_build_info",
		Help:        "Build information.",
		ConstLabels: prometheus.Labels{"version": version},
	})
	build.Set(1)
	for _, c := range []prometheus.Collector{m.Events, m.SourceTransactions, m.BinlogBytes, m.KafkaTransactions,
		m.KafkaTxnSeconds, m.BatchRecords, m.SourceLag, m.CheckpointTime, m.Restarts, m.Errors, m.Fenced, build,
		m.Position, age, m.InvalidOps,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		f(c)
	}
	return m
}

func (m *Metrics) lastCheckpoint() float64 {
	var out dto.Metric
	if err := m.CheckpointTime.Write(&out); err != nil || out.Gauge == nil {
		return 0
	}
	return out.Gauge.GetValue()
}

// Handler serves /metrics, /healthz (alive) and /readyz (connected, not
// fenced, not stopping).
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !m.Ready.Load() {
			http.Error(w, "not ready\n", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}
