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

// SASLMechanism is kafka.sasl.mechanism.
type SASLMechanism string

// Values of kafka.sasl.mechanism; empty: no SASL.
const (
	SASLPlain       SASLMechanism = "PLAIN"
	SASLScramSHA256 SASLMechanism = "SCRAM-SHA-256"
	SASLScramSHA512 SASLMechanism = "SCRAM-SHA-512"
	// SASLOAuthBearer sends a token (token, or token_file re-read at each
	// authentication so a rotated token is picked up).
	SASLOAuthBearer SASLMechanism = "OAUTHBEARER"
	// SASLAWSMSKIAM signs with AWS credentials (Amazon MSK IAM access
	// control): the keys set here, else AWS_ACCESS_KEY_ID,
	// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN at each authentication.
	SASLAWSMSKIAM SASLMechanism = "AWS_MSK_IAM"
)

// SASL authenticates to Kafka. Every secret has a *_file form, for secrets
// mounted as files.
type SASL struct {
	Mechanism    SASLMechanism `yaml:"mechanism"` // PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 | OAUTHBEARER | AWS_MSK_IAM; empty: none
	User         string        `yaml:"user"`
	Password     string        `yaml:"password" secret:"true"`
	PasswordFile string        `yaml:"password_file"`
	// OAUTHBEARER
	Token      string            `yaml:"token" secret:"true"`
	TokenFile  string            `yaml:"token_file"`
	Extensions map[string]string `yaml:"extensions"`
	// AWS_MSK_IAM
	AccessKeyID         string `yaml:"access_key_id"`
	SecretAccessKey     string `yaml:"secret_access_key" secret:"true"`
	SecretAccessKeyFile string `yaml:"secret_access_key_file"`
	SessionToken        string `yaml:"session_token" secret:"true"`
	SessionTokenFile    string `yaml:"session_token_file"`
}

func (s SASL) validate() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	userPass := s.User != "" || s.Password != "" || s.PasswordFile != ""
	token := s.Token != "" || s.TokenFile != "" || len(s.Extensions) > 0
	aws := s.AccessKeyID != "" || s.SecretAccessKey != "" || s.SecretAccessKeyFile != "" || s.SessionToken != "" || s.SessionTokenFile != ""
	const all = "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM"
	switch s.Mechanism {
	case "":
		if userPass || token || aws {
			bad("kafka.sasl.mechanism: empty but credentials are set: write %s", all)
		}
		return errs
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if s.User == "" {
			bad("kafka.sasl.user: empty: write the SASL user name")
		}
		if s.Password != "" && s.PasswordFile != "" {
			bad("kafka.sasl.password_file: set password or password_file, not both")
		}
		if token || aws {
			bad("kafka.sasl: %s takes user and password (or password_file) only: remove the token or AWS keys", s.Mechanism)
		}
	case SASLOAuthBearer:
		if (s.Token == "") == (s.TokenFile == "") {
			bad("kafka.sasl.token: OAUTHBEARER needs exactly one of token and token_file")
		}
		if userPass || aws {
			bad("kafka.sasl: OAUTHBEARER takes token or token_file (and extensions) only: remove user, password and AWS keys")
		}
	case SASLAWSMSKIAM:
		if s.SecretAccessKey != "" && s.SecretAccessKeyFile != "" {
			bad("kafka.sasl.secret_access_key_file: set secret_access_key or secret_access_key_file, not both")
		}
		if s.SessionToken != "" && s.SessionTokenFile != "" {
			bad("kafka.sasl.session_token_file: set session_token or session_token_file, not both")
		}
		if (s.AccessKeyID == "") != (s.SecretAccessKey == "" && s.SecretAccessKeyFile == "") {
			bad("kafka.sasl.access_key_id: set access_key_id with secret_access_key (or its file), or neither to use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
		}
		if userPass || token {
			bad("kafka.sasl: AWS_MSK_IAM takes AWS keys only: remove user, password and token")
		}
	default:
		bad("kafka.sasl.mechanism: %q: write %s", s.Mechanism, all)
	}
	return errs
}

// readSecret returns the file's content without the trailing newline.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
