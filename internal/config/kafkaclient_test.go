package config

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSASLValidation(t *testing.T) {
	tests := []struct {
		name string
		sasl SASL
		want string // "" valid
	}{
		{"none", SASL{}, ""},
		{"scram", SASL{Mechanism: SASLScramSHA512, User: "u", PasswordFile: "f"}, ""},
		{"oauth token", SASL{Mechanism: SASLOAuthBearer, Token: "t"}, ""},
		{"oauth file", SASL{Mechanism: SASLOAuthBearer, TokenFile: "f", Extensions: map[string]string{"logicalCluster": "lkc-1"}}, ""},
		{"aws env", SASL{Mechanism: SASLAWSMSKIAM}, ""},
		{"aws keys", SASL{Mechanism: SASLAWSMSKIAM, AccessKeyID: "AKIA", SecretAccessKeyFile: "f", SessionTokenFile: "g"}, ""},
		{"credentials without mechanism", SASL{Token: "t"},
			"kafka.sasl.mechanism: empty but credentials are set: write PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM"},
		{"unknown", SASL{Mechanism: "GSSAPI"},
			`kafka.sasl.mechanism: "GSSAPI": write PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM`},
		{"lower case", SASL{Mechanism: "plain", User: "u"},
			`kafka.sasl.mechanism: "plain": write PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM`},
		{"plain without user", SASL{Mechanism: SASLPlain}, "kafka.sasl.user: empty: write the SASL user name"},
		{"plain with token", SASL{Mechanism: SASLPlain, User: "u", Token: "t"},
			"kafka.sasl: PLAIN takes user and password (or password_file) only: remove the token or AWS keys"},
		{"oauth without token", SASL{Mechanism: SASLOAuthBearer}, "kafka.sasl.token: OAUTHBEARER needs exactly one of token and token_file"},
		{"oauth both", SASL{Mechanism: SASLOAuthBearer, Token: "t", TokenFile: "f"}, "kafka.sasl.token: OAUTHBEARER needs exactly one of token and token_file"},
		{"oauth with user", SASL{Mechanism: SASLOAuthBearer, Token: "t", User: "u"},
			"kafka.sasl: OAUTHBEARER takes token or token_file (and extensions) only: remove user, password and AWS keys"},
		{"aws key without secret", SASL{Mechanism: SASLAWSMSKIAM, AccessKeyID: "AKIA"},
			"kafka.sasl.access_key_id: set access_key_id with secret_access_key (or its file), or neither to use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"},
		{"aws secret twice", SASL{Mechanism: SASLAWSMSKIAM, AccessKeyID: "AKIA", SecretAccessKey: "s", SecretAccessKeyFile: "f"},
			"kafka.sasl.secret_access_key_file: set secret_access_key or secret_access_key_file, not both"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.sasl.validate()
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if strings.Join(got, "\n") != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// The OAUTHBEARER token file is read at each authentication: a rotated
// token is sent on the next connection.
func TestOAuthTokenFileRotation(t *testing.T) {
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte("first-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mech, err := SASL{Mechanism: SASLOAuthBearer, TokenFile: f}.Auth()
	if err != nil || mech.Name() != "OAUTHBEARER" {
		t.Fatalf("mechanism %v: %v", mech, err)
	}
	first := func() string {
		_, msg, err := mech.Authenticate(context.Background(), "broker:9092")
		if err != nil {
			t.Fatal(err)
		}
		return string(msg)
	}
	if msg := first(); !strings.Contains(msg, "auth=Bearer first-token\x01") {
		t.Fatalf("first message %q", msg)
	}
	if err := os.WriteFile(f, []byte("second-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if msg := first(); !strings.Contains(msg, "auth=Bearer second-token\x01") {
		t.Fatalf("after rotation %q", msg)
	}
	os.Remove(f)
	if _, _, err := mech.Authenticate(context.Background(), "broker:9092"); err == nil || !strings.Contains(err.Error(), "read kafka.sasl.token_file") {
		t.Fatalf("missing token file: %v", err)
	}
}

func TestAWSCredentials(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("from-file\n"), 0o600)
	a, err := SASL{Mechanism: SASLAWSMSKIAM, AccessKeyID: "AKIA1", SecretAccessKeyFile: secret}.awsAuth()
	if err != nil || a.AccessKey != "AKIA1" || a.SecretKey != "from-file" {
		t.Fatalf("%+v %v", a, err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	if _, err := (SASL{Mechanism: SASLAWSMSKIAM}).awsAuth(); err == nil {
		t.Fatal("no credentials anywhere: want an error")
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
	t.Setenv("AWS_SESSION_TOKEN", "env-session")
	a, err = SASL{Mechanism: SASLAWSMSKIAM}.awsAuth()
	if err != nil || a.AccessKey != "AKIAENV" || a.SecretKey != "env-secret" || a.SessionToken != "env-session" {
		t.Fatalf("%+v %v", a, err)
	}
	mech, err := SASL{Mechanism: SASLAWSMSKIAM}.Auth()
	if err != nil || mech.Name() != "AWS_MSK_IAM" {
		t.Fatalf("%v %v", mech, err)
	}
	if _, msg, err := mech.Authenticate(context.Background(), "b-1.cluster.abc123.c2.kafka.eu-west-1.amazonaws.com:9098"); err != nil || !strings.Contains(string(msg), "AKIAENV") {
		t.Fatalf("first message %q: %v", msg, err)
	}
}

func TestSecretsRedactedAndFromFiles(t *testing.T) {
	c := Default()
	c.Kafka.SASL = SASL{Mechanism: SASLAWSMSKIAM, AccessKeyID: "AKIA", SecretAccessKey: "aws-secret", SessionToken: "aws-session"}
	c.Source.Password = "db-secret"
	out := c.Redacted().YAML()
	for _, s := range []string{"aws-secret", "aws-session", "db-secret"} {
		if strings.Contains(out, s) {
			t.Fatalf("%s in the redacted config:\n%s", s, out)
		}
	}
	c.Kafka.SASL = SASL{Mechanism: SASLOAuthBearer, Token: "oauth-secret"}
	if strings.Contains(c.Redacted().YAML(), "oauth-secret") {
		t.Fatal("token in the redacted config")
	}
}

// Every compression validates (internal/clients builds a client with each:
// TestProducerCompressions); the defaults are snappy without linger.
func TestProducerSettings(t *testing.T) {
	for _, c := range []Compression{CompressNone, CompressGzip, CompressSnappy, CompressLZ4, CompressZstd} {
		k := Default().Kafka
		k.Compression = c
		if errs := k.validateProducer(); len(errs) != 0 {
			t.Fatalf("%s: %v", c, errs)
		}
	}
	k := Default().Kafka
	if k.Compression != CompressSnappy || k.Linger != 0 {
		t.Fatalf("defaults: compression %s linger %s", k.Compression, k.Linger)
	}
}
