package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// KafkaClient returns the option that adds franz-go's client metrics
// (plugin/kprom: connections, requests, bytes, produce batches, per broker
// and topic) to the relay's registry, prefixed outbox_relay_kafka_ (config
// kafka.client_metrics). Give it to one live client at a time: kprom
// registers its collectors when the client starts and removes most of them
// when it is closed; the next client's collectors replace any left over.
func (m *Metrics) KafkaClient() kgo.Opt {
	reg := replacing{m.Registry}
	return kgo.WithHooks(kprom.NewMetrics("outbox_relay", kprom.Subsystem("kafka"), kprom.Registerer(reg), kprom.Gatherer(m.Registry)))
}

// replacing registers a collector in place of an equal one already there.
type replacing struct{ *prometheus.Registry }

func (r replacing) Register(c prometheus.Collector) error {
	err := r.Registry.Register(c)
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		r.Registry.Unregister(are.ExistingCollector)
		err = r.Registry.Register(c)
	}
	return err
}

func (r replacing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}
