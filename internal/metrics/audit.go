package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// auditMetrics are the background audit's (config audit.interval),
// registered the first time it runs.
type auditMetrics struct {
	once     sync.Once
	rows     *prometheus.GaugeVec
	last     prometheus.Gauge
	duration prometheus.Gauge
	errors   prometheus.Counter
}

// AuditResult is what one background audit run found.
type AuditResult struct {
	Published, Missing, Duplicate, Phantom, Pending int
}

func (m *Metrics) auditInit() {
	m.audit.once.Do(func() {
		a := &m.audit
		a.rows = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_audit_rows",
			Help: "The last background audit's outcome (audit.interval, audit.window): rows published once, missing (the checkpoint covers them, no record has their id), pending (not yet covered), duplicate (more records than rows, replays aside), and phantom records (an id no row has). See docs/audit.md.",
		}, []string{"result"})
		a.last = prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_relay_audit_last_run_timestamp_seconds",
			Help: "Unix time the last background audit that completed ended (0: none yet).",
		})
		a.duration = prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_relay_audit_last_run_duration_seconds",
			Help: "How long the last background audit that completed took.",
		})
		a.errors = prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_audit_errors_total",
			Help: "Background audits that failed (source or Kafka unreachable, a table unreadable): logged, never a stop of the relay.",
		})
		m.Registry.MustRegister(a.rows, a.last, a.duration, a.errors)
	})
}

// AuditEnabled registers the background audit's metrics (zero until its
// first run ends), so that a scrape sees them from the start.
func (m *Metrics) AuditEnabled() {
	m.auditInit()
	m.audit.errors.Add(0)
	for _, r := range []string{"published", "missing", "duplicate", "phantom", "pending"} {
		m.audit.rows.WithLabelValues(r)
	}
}

// AuditDone records a background audit run that completed at end after d.
func (m *Metrics) AuditDone(r AuditResult, end time.Time, d time.Duration) {
	m.auditInit()
	a := &m.audit
	a.rows.WithLabelValues("published").Set(float64(r.Published))
	a.rows.WithLabelValues("missing").Set(float64(r.Missing))
	a.rows.WithLabelValues("duplicate").Set(float64(r.Duplicate))
	a.rows.WithLabelValues("phantom").Set(float64(r.Phantom))
	a.rows.WithLabelValues("pending").Set(float64(r.Pending))
	a.last.Set(float64(end.UnixNano()) / 1e9)
	a.duration.Set(d.Seconds())
}

// AuditFailed counts a background audit run that failed; the gauges keep
// the last completed run's outcome.
func (m *Metrics) AuditFailed() {
	m.auditInit()
	m.audit.errors.Inc()
}
