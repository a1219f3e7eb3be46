// Package recordheaders reads and writes a Kafka record's headers as the
// OpenTelemetry propagators do (propagation.TextMapCarrier): the relay's
// spans write the trace context there, the inbox reads it.
package recordheaders

import "github.com/twmb/franz-go/pkg/kgo"

// Carrier is R's headers as a propagation.TextMapCarrier. Set replaces the
// first header of the same key (a record keeps one traceparent).
type Carrier struct{ R *kgo.Record }

// Get returns the value of the first header named key, "" when none is.
func (c Carrier) Get(key string) string {
	for _, h := range c.R.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Set sets header key to value.
func (c Carrier) Set(key, value string) {
	for i, h := range c.R.Headers {
		if h.Key == key {
			c.R.Headers[i].Value = []byte(value)
			return
		}
	}
	c.R.Headers = append(c.R.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

// Keys lists the headers' keys.
func (c Carrier) Keys() []string {
	keys := make([]string, len(c.R.Headers))
	for i, h := range c.R.Headers {
		keys[i] = h.Key
	}
	return keys
}
