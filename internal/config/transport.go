package config

import (
	"net"
	"strings"
)

// TransportWarning is one connection the configuration makes in plaintext,
// or without verifying its peer: `check` lists them, `run` logs them at
// start.
type TransportWarning struct {
	Target string // source | kafka
	Detail string
	Fix    string
}

// TransportWarnings lists every plaintext or unverified transport cfg uses.
// Plaintext to loopback addresses only is not warned about: it crosses no
// network.
func (c Config) TransportWarnings() []TransportWarning {
	var out []TransportWarning
	warn := func(target, detail, fix string) {
		out = append(out, TransportWarning{Target: target, Detail: detail, Fix: fix})
	}
	s := c.Source
	switch {
	case !s.TLS.On() && !allLoopback(s.Hosts):
		warn("source", "source connections are plaintext: the replication user's login and every row read cross the network "+
			"readable and alterable by anyone in the middle", "enable source.tls with source.tls.ca_file (the production setting)")
	case s.TLS.On() && s.TLS.InsecureSkipVerify:
		warn("source", "source TLS does not verify the server (source.tls.insecure_skip_verify): anyone in the middle can read "+
			"the password and the rows", "set source.tls.ca_file to the CA that signed the server's certificate and remove insecure_skip_verify")
	}
	if !s.TLS.On() && s.AllowCleartextPassword {
		warn("source", "source.allow_cleartext_password: a server that asks gets the password in cleartext over a plaintext connection",
			"enable source.tls and remove allow_cleartext_password")
	}
	if !s.TLS.On() && s.AllowPublicKeyRetrieval {
		warn("source", "source.allow_public_key_retrieval: the password is encrypted with any RSA key the server (or anyone in the middle) sends",
			"enable source.tls, or pin the key with source.server_public_key_file")
	}
	k := c.Kafka
	switch {
	case !k.TLS.On() && !allLoopback(k.Brokers):
		warn("kafka", "Kafka connections are plaintext: every record and checkpoint crosses the network readable and alterable "+
			"by anyone in the middle", "enable kafka.tls (the production setting)")
	case k.TLS.On() && k.TLS.InsecureSkipVerify:
		warn("kafka", "Kafka TLS does not verify the brokers (kafka.tls.insecure_skip_verify): anyone in the middle can read "+
			"the credentials and records", "set kafka.tls.ca_file to the CA that signed the brokers' certificates and remove insecure_skip_verify")
	}
	if !k.TLS.On() {
		switch k.SASL.Mechanism {
		case SASLPlain:
			warn("kafka", "kafka.sasl PLAIN over a plaintext connection sends the Kafka password in cleartext", "enable kafka.tls")
		case SASLOAuthBearer:
			warn("kafka", "kafka.sasl OAUTHBEARER over a plaintext connection sends the token in cleartext", "enable kafka.tls")
		}
	}
	return out
}

// allLoopback reports whether every host:port names a loopback address.
func allLoopback(hosts []string) bool {
	for _, h := range hosts {
		host, _, err := net.SplitHostPort(h)
		if err != nil {
			host = h
		}
		if strings.EqualFold(host, "localhost") {
			continue
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return false
		}
	}
	return true
}
