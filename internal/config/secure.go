package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
)

// TLS configures a TLS client connection. Unset (enabled false and no
// files) means plain TCP.
type TLS struct {
	Enabled            bool   `yaml:"enabled"`
	CAFile             string `yaml:"ca_file"`   // PEM; empty: the system roots
	CertFile           string `yaml:"cert_file"` // client certificate (PEM), with key_file
	KeyFile            string `yaml:"key_file"`
	ServerName         string `yaml:"server_name"`          // default: the host dialed
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"` // only when asked: no verification at all
}

// On reports whether TLS is used: enabled, or any file given.
func (t TLS) On() bool {
	return t.Enabled || t.CAFile != "" || t.CertFile != "" || t.KeyFile != ""
}

func (t TLS) validate(where string) error {
	if (t.CertFile == "") != (t.KeyFile == "") {
		return fmt.Errorf("%s.cert_file and %s.key_file go together", where, where)
	}
	for _, f := range []string{t.CAFile, t.CertFile, t.KeyFile} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%s: %v", where, err)
		}
	}
	return nil
}

// Config builds the *tls.Config, or nil when TLS is off.
func (t TLS) Config() (*tls.Config, error) {
	if !t.On() {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // skip-verify only when configured
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read tls ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("read tls ca_file %s: no PEM certificate in it", t.CAFile)
		}
		c.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load tls client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// SASL authenticates to Kafka.
type SASL struct {
	Mechanism    string `yaml:"mechanism"` // PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512; empty: none
	User         string `yaml:"user"`
	Password     string `yaml:"password"`
	PasswordFile string `yaml:"password_file"`
}

func (s SASL) validate() error {
	switch s.Mechanism {
	case "":
		if s.User != "" || s.Password != "" || s.PasswordFile != "" {
			return fmt.Errorf("kafka.sasl.mechanism is empty but a user or password is set: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		}
		return nil
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
	default:
		return fmt.Errorf("kafka.sasl.mechanism %q must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.Mechanism)
	}
	if s.User == "" {
		return fmt.Errorf("kafka.sasl.user is empty")
	}
	if s.Password != "" && s.PasswordFile != "" {
		return fmt.Errorf("kafka.sasl: set password or password_file, not both")
	}
	return nil
}

// readSecret returns the file's content without the trailing newline.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
