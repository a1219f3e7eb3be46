package config

import (
	"strings"
	"testing"
)

// Every plaintext or unverified transport is named, MySQL and Kafka; TLS
// with a verified peer, and plaintext to loopback, are not.
func TestTransportWarningsNamePlaintextAndUnverified(t *testing.T) {
	base := func() Config {
		c := defaults()
		c.Source.Hosts = []string{"db.internal:3306"}
		c.Kafka.Brokers = []string{"kafka.internal:9092"}
		return c
	}
	verified := TLS{CAFile: "ca.pem"}
	for _, c := range []struct {
		name string
		edit func(*Config)
		want []string // parts of the warnings' details, in order; none: no warning
	}{
		{"plaintext both", func(*Config) {}, []string{"source connections are plaintext", "Kafka connections are plaintext"}},
		{"verified TLS both", func(c *Config) { c.Source.TLS, c.Kafka.TLS = verified, verified }, nil},
		{"loopback only", func(c *Config) {
			c.Source.Hosts, c.Kafka.Brokers = []string{"127.0.0.1:3306", "localhost:3307"}, []string{"[::1]:9092"}
		}, nil},
		{"skip verify", func(c *Config) {
			c.Source.TLS = TLS{Enabled: true, InsecureSkipVerify: true}
			c.Kafka.TLS = TLS{Enabled: true, InsecureSkipVerify: true}
		}, []string{"source.tls.insecure_skip_verify", "kafka.tls.insecure_skip_verify"}},
		{"SASL PLAIN over plaintext", func(c *Config) {
			c.Source.TLS = verified
			c.Kafka.SASL = SASL{Mechanism: SASLPlain, User: "u", Password: "p"}
		}, []string{"Kafka connections are plaintext", "PLAIN over a plaintext connection"}},
		{"login opt-ins", func(c *Config) {
			c.Kafka.TLS = verified
			c.Source.AllowCleartextPassword, c.Source.AllowPublicKeyRetrieval = true, true
		}, []string{"source connections are plaintext", "allow_cleartext_password", "allow_public_key_retrieval"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := base()
			c.edit(&cfg)
			got := cfg.TransportWarnings()
			if len(got) != len(c.want) {
				t.Fatalf("got %d warnings %+v, want %d", len(got), got, len(c.want))
			}
			for i, w := range c.want {
				if !strings.Contains(got[i].Detail, w) || got[i].Fix == "" {
					t.Errorf("warning %d: %+v, want it to say %q and a fix", i, got[i], w)
				}
			}
		})
	}
}
