//go:build integration

package itest

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/relay"
	"github.com/outbox-relay/outbox-relay/source"
)

// waitPublished runs the relay until the checkpoint covers one new outbox
// row on db, through cfg's own connection settings.
func waitPublished(t *testing.T, cfg config.Config, exec func(...string) error, head func() string) {
	t.Helper()
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if err := exec("INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('" +
		cfg.Name + "', 'alarm', 'd', 'X', '{}')"); err != nil {
		t.Fatal(err)
	}
	cp := WaitCheckpoint(t, cfg, head(), time.Minute)
	if cp.Events != 1 {
		t.Fatalf("checkpoint counts %d events, want 1", cp.Events)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

func TestSourceTLS(t *testing.T) {
	BrokerOnlyAsSink(t)
	certs := NewCerts(t, "mariadb")
	db := startServer(t, map[string]string{"ssl-ca": certs.CAFile, "ssl-cert": certs.CertFile, "ssl-key": certs.KeyFile})
	if err := db.Exec("ALTER USER 'relay'@'%' REQUIRE SSL"); err != nil {
		t.Fatal(err)
	}
	k := StartKafka(t)
	base := func() config.Config {
		cfg := env.RelayConfig(k, "app.outbox")
		cfg.Source.Hosts = []string{db.Addr}
		return cfg
	}
	head := func() string { return Head(t, db) }
	t.Run("verified with the CA", func(t *testing.T) {
		cfg := base()
		cfg.Source.TLS = config.TLS{CAFile: certs.CAFile}
		waitPublished(t, cfg, db.Exec, head)
	})
	t.Run("skip verify, only when asked", func(t *testing.T) {
		cfg := base()
		cfg.Source.TLS = config.TLS{Enabled: true, InsecureSkipVerify: true}
		waitPublished(t, cfg, db.Exec, head)
	})
	t.Run("without TLS the server refuses", func(t *testing.T) {
		runExpectingError(t, k, base(), binlog.ErrAccessDenied, "Access denied")
	})
	t.Run("an event over source.max_packet_bytes stops the relay, over TLS too", func(t *testing.T) {
		cfg := base()
		cfg.Source.TLS = config.TLS{CAFile: certs.CAFile}
		cfg.Source.MaxPacketBytes = config.MinPacketBytes
		r := RunRelay(t, cfg)
		r.WaitReady(t)
		if err := db.Exec("INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) " +
			"VALUES ('big', 'alarm', 'd', 'X', CONCAT('\"', REPEAT('x', 2 * 1024 * 1024), '\"'))"); err != nil {
			t.Fatal(err)
		}
		if err := r.StoppedWith(t); !errors.Is(err, binlog.ErrPacketBound) || !strings.Contains(err.Error(), "source.max_packet_bytes") {
			t.Fatalf("error %v, want one wrapping %v naming source.max_packet_bytes", err, binlog.ErrPacketBound)
		}
	})
	t.Run("a CA that did not sign the server", func(t *testing.T) {
		cfg := base()
		cfg.Source.TLS = config.TLS{CAFile: NewCerts(t, "other").CAFile}
		runExpectingError(t, k, cfg, source.ErrUnreachable, "certificate")
	})
}

func TestKafkaSASLOverTLS(t *testing.T) {
	BrokerOnlyAsSink(t)
	certs := NewCerts(t, "kafka")
	c := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "plain-user", "plain-secret"),
		kfake.Superuser("SCRAM-SHA-256", "scram256", "scram256-secret"),
		kfake.Superuser("SCRAM-SHA-512", "scram512", "scram512-secret"),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{certs.Server}, MinVersion: tls.VersionTLS12}),
		kfake.BrokerConfigs(map[string]string{"group.min.session.timeout.ms": "1000"})) // RelayConfig's short ha.session_timeout
	k := &Kafka{Brokers: c.ListenAddrs()}
	for _, m := range []struct{ mech, user, pass string }{
		{"PLAIN", "plain-user", "plain-secret"},
		{"SCRAM-SHA-256", "scram256", "scram256-secret"},
		{"SCRAM-SHA-512", "scram512", "scram512-secret"},
	} {
		t.Run(m.mech, func(t *testing.T) {
			s := env.NewSchema(t)
			cfg := env.RelayConfig(k, s.Table())
			cfg.Kafka.TLS = config.TLS{CAFile: certs.CAFile}
			cfg.Kafka.SASL = config.SASL{Mechanism: config.SASLMechanism(m.mech), User: m.user, Password: m.pass}
			r := RunRelay(t, cfg)
			r.WaitReady(t)
			if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 10}); err != nil {
				t.Fatal(err)
			}
			if cp := WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute); cp.Events != 10 {
				t.Fatalf("checkpoint counts %d events, want 10", cp.Events)
			}
			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(r.Logs(), m.pass) {
				t.Fatal("the SASL password reached the log")
			}
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		cfg := env.RelayConfig(k, "app.outbox")
		cfg.Kafka.TLS = config.TLS{CAFile: certs.CAFile}
		cfg.Kafka.SASL = config.SASL{Mechanism: "SCRAM-SHA-256", User: "scram256", Password: "not-the-secret"}
		cfg.Kafka.RequestTimeout = 3 * time.Second
		r := RunRelay(t, cfg)
		<-r.Done()
		if !errors.Is(r.Err(), relay.ErrKafkaUnreachable) || !strings.Contains(r.Err().Error(), "kafka.sasl") {
			t.Fatalf("error %v, want ErrKafkaUnreachable naming kafka.sasl", r.Err())
		}
		if strings.Contains(r.Err().Error()+r.Logs(), "not-the-secret") {
			t.Fatal("the password reached the error or the log")
		}
	})
}

// Secrets reach neither the logs (debug level, through start, errors and
// stop) nor --print-config; password files are read.
func TestSecretsNeverLogged(t *testing.T) {
	BrokerOnlyAsSink(t)
	_, s, cfg := env.Pipeline(t)
	pwFile := filepath.Join(t.TempDir(), "mysql-password")
	if err := os.WriteFile(pwFile, []byte(cfg.Source.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secret := cfg.Source.Password
	cfg.Source.Password, cfg.Source.PasswordFile = "", pwFile
	cfg.Log.Level = "debug"
	path := WriteConfig(t, cfg)
	out, errOut, code := env.CLI(t, "run", "--print-config", "--config", path)
	if code != 0 || strings.Contains(out+errOut, secret) || !strings.Contains(out, "REDACTED") {
		t.Fatalf("print-config: exit %d, redacted %v, secret shown %v:\n%s", code, strings.Contains(out, "REDACTED"), strings.Contains(out, secret), out)
	}
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 5}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if code, err := p.Terminate(time.Minute); code != 0 || err != nil {
		t.Fatalf("exit %d %v", code, err)
	}
	outputs := []string{p.Output()}
	// A failing start: wrong password from the file, logged at debug.
	if err := os.WriteFile(pwFile, []byte("wrong-"+secret), 0o600); err != nil {
		t.Fatal(err)
	}
	p = env.StartProc(t, path)
	if code, _ := p.Wait(time.Minute); code != relay.ExitConfig {
		t.Fatalf("exit %d with a wrong password, want %d (configuration error)", code, relay.ExitConfig)
	}
	for _, o := range append(outputs, p.Output()) {
		if strings.Contains(o, secret) {
			t.Fatalf("a password reached the log:\n%s", o)
		}
	}
	if !strings.Contains(p.Output(), "source access denied") {
		t.Fatalf("no clear error:\n%s", p.Output())
	}
}

// TestAccountStatementPasswordsNeverLogged: MariaDB writes account
// statements to the binlog as they were typed, password included (behind
// a comment, in one read without backslash escapes); the relay reads them
// (and logs what it did with them at debug) without a password reaching
// its log.
func TestAccountStatementPasswordsNeverLogged(t *testing.T) {
	BrokerOnlyAsSink(t)
	_, s, cfg := env.Pipeline(t)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	u := env.Unique("acct")
	t.Cleanup(func() {
		var drop []string
		for _, c := range "abcdef" {
			drop = append(drop, "DROP USER IF EXISTS '"+u+string(c)+"'@'%'")
		}
		_ = env.DB.Exec(drop...)
	})
	secrets := []string{"pw-create-1", "pw-grant-2", "pw-alter-3", "pw-set-4", "pw-via-5", "pw-quote-6", "6C8989366EAF75BB670AD8EA7A7FC1176A95CEF4",
		"pw-nbe-7", "pw-comment-8", "pw-versioned-9"}
	// A GRANT on the captured table is logged (the schema tracker says it
	// ignored a statement mentioning it); the others pass through unlogged.
	if err := env.DB.Exec(
		"CREATE USER '"+u+"a'@'%' IDENTIFIED BY 'pw-create-1'",
		"GRANT SELECT ON "+s.Table()+" TO '"+u+"a'@'%' IDENTIFIED BY 'pw-grant-2'",
		"ALTER USER '"+u+"a'@'%' IDENTIFIED BY 'pw-alter-3'",
		"SET PASSWORD FOR '"+u+"a'@'%' = PASSWORD('pw-set-4')",
		"GRANT INSERT ON "+s.Table()+" TO '"+u+"b'@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD(\"pw-via-5\")",
		"GRANT SELECT ON "+s.Table()+" TO '"+u+"c'@'%' IDENTIFIED BY 'it''s \\' pw-quote-6'",
		"GRANT SELECT ON "+s.Table()+" TO '"+u+"c'@'%' IDENTIFIED BY PASSWORD '*6C8989366EAF75BB670AD8EA7A7FC1176A95CEF4'",
		"GRANT SELECT ON "+s.Table()+" TO '"+u+"d'@'%' IDENTIFIED BY 'x' /* the old one: pw-comment-8 */",
		"/*!100000 GRANT SELECT ON "+s.Table()+" TO '"+u+"e'@'%' IDENTIFIED BY 'pw-versioned-9' */",
	); err != nil {
		t.Fatal(err)
	}
	// Without backslash escapes 'a\' is a whole password, and the second
	// user's is the next literal (read with escapes, a bare word).
	if err := env.DB.Exec("SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')",
		"GRANT SELECT ON "+s.Table()+" TO '"+u+"e'@'%' IDENTIFIED BY 'a\\', '"+u+"f'@'%' IDENTIFIED BY 'pw-nbe-7'",
	); err != nil {
		t.Fatal(err)
	}
	if err := env.DB.Exec("INSERT INTO " + s.Table() + " (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('after-accounts', 'alarm', 'd', 'X', '{}')"); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	logs := r.Logs()
	for _, pw := range secrets {
		if strings.Contains(logs, pw) {
			t.Fatalf("the password %q reached the log:\n%s", pw, logs)
		}
	}
	// The statements were read and logged (at debug), redacted.
	if !strings.Contains(logs, "GRANT SELECT ON "+s.Table()+" TO") || !strings.Contains(logs, "<redacted>") {
		t.Fatalf("the account statements were not logged at all, so this test proves nothing:\n%s", logs)
	}
}

// A statement-logged change of the outbox stops the relay with an error
// that shows the statement, and the log says it: a key it passes to
// AES_ENCRYPT (one as a hexadecimal literal glued to an executable
// comment's version, which the server reads as the literal) and a
// comment's text are redacted in both.
func TestStatementLoggedStopShowsNoKey(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	if err := env.DB.Exec("SET SESSION binlog_format = 'STATEMENT'",
		"INSERT INTO "+s.Table()+" /* deploy key pw-comment-11 */ (payload, event_id, aggregate_type, aggregate_id, event_type) "+
			"VALUES (CONCAT('{', LEFT(AES_ENCRYPT('x', /*!1000000x70772d6865782d3132*/), 0), LEFT(AES_ENCRYPT('x', 'pw-aes-10'), 0), '}'), "+
			"'stmt-key', 'alarm', 'dev-k', 'AlarmCreated')"); err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(time.Minute); err != nil || code != relay.ExitData {
		t.Fatalf("relay on a statement-logged outbox insert: exit %d %v\n%s", code, err, p.Output())
	}
	out := p.Output()
	for _, secret := range []string{"pw-aes-10", "pw-comment-11", "70772d6865782d3132"} { // pw-hex-12
		if strings.Contains(out, secret) {
			t.Fatalf("%q reached the relay's output:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, "INSERT INTO "+s.Table()) || !strings.Contains(out, "AES_ENCRYPT('<redacted>', /*!'<redacted>'*/)") {
		t.Fatalf("the stop does not show the statement, so this test proves nothing:\n%s", out)
	}
}
