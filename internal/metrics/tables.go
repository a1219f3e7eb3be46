package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// tableMetrics is outbox_relay_captured_table_missing, registered the first
// time the relay checks its captured tables.
type tableMetrics struct {
	once    sync.Once
	missing *prometheus.GaugeVec
}

// TableMissing sets outbox_relay_captured_table_missing{table}: 1 while a
// captured table (source.tables) does not exist on the source host in use
// (or the relay's user cannot see it), 0 once it does.
func (m *Metrics) TableMissing(table string, missing bool) {
	m.tables.once.Do(func() {
		m.tables.missing = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_captured_table_missing",
			Help: "1 while a captured table (source.tables) does not exist on the source host in use, or the relay's user cannot see it: nothing of it is published until it is created; 0 once it exists. Checked at each start and every few seconds while one is missing.",
		}, []string{"table"})
		m.Registry.MustRegister(m.tables.missing)
	})
	m.tables.missing.WithLabelValues(table).Set(b2f(missing))
}
