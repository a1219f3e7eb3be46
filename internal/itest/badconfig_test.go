//go:build integration

package itest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/relay"
	"github.com/outbox-relay/outbox-relay/source"
)

// startServer starts an extra scratch server with settings and an outbox
// schema "app" and the relay user.
func startServer(t *testing.T, settings map[string]string) *devdb.Server {
	t.Helper()
	return startServerAt(t, filepath.Join(t.TempDir(), "db"), settings)
}

// startServerAt is startServer with its directory at dir.
func startServerAt(t *testing.T, dir string, settings map[string]string) *devdb.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := devdb.Start(ctx, devdb.Options{Dir: dir, Settings: settings, ServerID: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	err = srv.Exec("CREATE DATABASE app", fmt.Sprintf(OutboxDDL, "app"),
		"CREATE USER 'relay'@'%' IDENTIFIED BY 'relay-pw'",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'relay'@'%'",
		"CREATE USER 'weak'@'%' IDENTIFIED BY 'weak-pw'",
		"GRANT SELECT ON *.* TO 'weak'@'%'")
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// purgeOldBinlogs purges every binlog of db but the newest. The server keeps
// a binlog while crash recovery or a dump thread may still need it: retry
// until only the newest one is left.
func purgeOldBinlogs(t *testing.T, db *devdb.Server) {
	t.Helper()
	Eventually(t, 30*time.Second, func() error {
		logs, err := db.Query("SHOW BINARY LOGS")
		if err != nil {
			return err
		}
		if len(logs) == 1 {
			return nil
		}
		if err := db.Exec("PURGE BINARY LOGS TO '" + logs[len(logs)-1][0] + "'"); err != nil {
			return err
		}
		return fmt.Errorf("%d binlogs left", len(logs))
	})
}

// freeAddr is a local address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := devdb.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// runExpectingError runs the relay and wants it to stop by itself with an
// error wrapping want whose text contains hint, having published nothing.
func runExpectingError(t *testing.T, k *Kafka, cfg config.Config, want error, hint string) {
	t.Helper()
	r := RunRelay(t, cfg)
	err := r.StoppedWith(t)
	if !errors.Is(err, want) {
		t.Fatalf("error %v, want one wrapping %v", err, want)
	}
	if !strings.Contains(err.Error(), hint) {
		t.Fatalf("error %q does not say %q", err, hint)
	}
	if strings.Contains(err.Error(), cfg.Source.Password) {
		t.Fatalf("error %q shows the password", err)
	}
	if recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix); len(recs) != 0 {
		t.Fatalf("published %d records despite the error", len(recs))
	}
	t.Logf("got the expected error: %v", err)
}

func TestBadConfiguration(t *testing.T) {
	BrokerOnlyAsSink(t)
	k := StartKafka(t)
	good := startServer(t, nil)
	noBinlog := startServer(t, map[string]string{"log-bin": "-"})
	base := func(srv *devdb.Server) config.Config {
		cfg := env.RelayConfig(k, "app.outbox")
		cfg.Source.Hosts = []string{srv.Addr}
		cfg.Source.ConnectTimeout = 2 * time.Second
		return cfg
	}
	setGlobal := func(t *testing.T, name, value, restore string) {
		if err := good.Exec("SET GLOBAL " + name + " = '" + value + "'"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := good.Exec("SET GLOBAL " + name + " = '" + restore + "'"); err != nil {
				t.Error(err)
			}
		})
	}

	t.Run("unreachable source", func(t *testing.T) {
		cfg := base(good)
		cfg.Source.Hosts = []string{freeAddr(t)}
		runExpectingError(t, k, cfg, source.ErrUnreachable, cfg.Source.Hosts[0])
	})
	t.Run("wrong password", func(t *testing.T) {
		cfg := base(good)
		cfg.Source.Password = "not-the-password"
		runExpectingError(t, k, cfg, binlog.ErrAccessDenied, "source.password")
	})
	t.Run("binary log off", func(t *testing.T) {
		runExpectingError(t, k, base(noBinlog), source.ErrServerConfig, "log_bin")
	})
	t.Run("binlog_format not ROW", func(t *testing.T) {
		setGlobal(t, "binlog_format", "STATEMENT", "ROW")
		runExpectingError(t, k, base(good), source.ErrServerConfig, "binlog_format=ROW")
	})
	t.Run("binlog_row_image not FULL", func(t *testing.T) {
		setGlobal(t, "binlog_row_image", "MINIMAL", "FULL")
		runExpectingError(t, k, base(good), source.ErrServerConfig, "binlog_row_image=FULL")
	})
	t.Run("missing replication grants", func(t *testing.T) {
		cfg := base(good)
		cfg.Source.User, cfg.Source.Password = "weak", "weak-pw"
		runExpectingError(t, k, cfg, source.ErrGrants, "GRANT REPLICATION SLAVE, REPLICATION CLIENT")
	})
	t.Run("unreachable kafka", func(t *testing.T) {
		cfg := base(good)
		cfg.Kafka.Brokers = []string{freeAddr(t)}
		cfg.Kafka.RequestTimeout = 2 * time.Second
		runExpectingError(t, k, cfg, relay.ErrKafkaUnreachable, cfg.Kafka.Brokers[0])
	})
	t.Run("checkpoint purged", func(t *testing.T) {
		cfg := base(good)
		r := RunRelay(t, cfg)
		r.WaitReady(t)
		if err := good.Exec("INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('p1', 'alarm', 'd', 'X', '{}')"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Log(r.Logs())
			}
		})
		WaitCheckpoint(t, cfg, Head(t, good), 20*time.Second)
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
		before := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
		// Rows the relay has not read, then their binlog purged.
		err := good.Exec(
			"INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('p2', 'alarm', 'd', 'X', '{}')",
			"FLUSH BINARY LOGS")
		if err != nil {
			t.Fatal(err)
		}
		purgeOldBinlogs(t, good)
		r = RunRelay(t, cfg)
		runErr := r.StoppedWith(t)
		if !errors.Is(runErr, binlog.ErrPurged) || !strings.Contains(runErr.Error(), "checkpoint set") {
			t.Fatalf("error %v, want ErrPurged naming `checkpoint set`", runErr)
		}
		after := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
		if len(after) != len(before) || len(before) != 1 {
			t.Fatalf("records %d before, %d after the purge error; want 1 and 1", len(before), len(after))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cp, err := Store(t, cfg).Load(ctx, cfg.Name)
		if err != nil || cp == nil {
			t.Fatalf("checkpoint %v, %v", cp, err)
		}
	})
}
