//go:build integration

package source_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/schema"
	"github.com/outbox-relay/outbox-relay/source"
)

// proofTable has a column of most types, UNSIGNED integers among them
// (their signedness is not in a NO_LOG binlog's table maps).
const proofTable = `CREATE TABLE app.outbox (id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
	ti TINYINT UNSIGNED, si SMALLINT, mi MEDIUMINT UNSIGNED, i INT UNSIGNED, n INT,
	d DECIMAL(20,6), f FLOAT, db DOUBLE, dt DATETIME(6), ts TIMESTAMP(3) NULL, dd DATE, tm TIME(3), y YEAR,
	bt BIT(10), e ENUM('a','b'), st SET('x','y'), js JSON, tx TEXT, bl BLOB, vc VARCHAR(300), c CHAR(10) CHARACTER SET latin1)`

// proofRows are the statements of the transactions the test proves: a
// multi-row INSERT of extremes, an INSERT and an UPDATE beside a table that
// is not captured, a DELETE (not fingerprinted: no row inserted).
func proofRows(salt int) []string {
	return []string{
		fmt.Sprintf(`INSERT INTO app.outbox VALUES
			(18446744073709551615, 255, -32768, 16777215, 4294967295, -2147483648, -12345678901234.123456, 1.5, -2.25e300,
			 '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999', '2024-02-29', '-838:59:59.000', 2155, b'1010101010', 'b', 'x,y',
			 '{"a": [1, 2.50, "ü"]}', REPEAT('t', 3000), REPEAT('b', 70), '日本 %d', 'é'),
			(%d, 0, 0, 0, 0, 0, 0, 0, 0, '1000-01-01 00:00:00', NULL, '0000-00-00', '00:00:00', 0, NULL, NULL, '', 'null', '', NULL, '', ' ')`, salt, salt),
		"BEGIN", "CREATE TABLE IF NOT EXISTS app.business (id INT PRIMARY KEY, v INT)", "COMMIT",
		"BEGIN", fmt.Sprintf("INSERT INTO app.business VALUES (%d, 1)", salt),
		fmt.Sprintf("INSERT INTO app.outbox (id, vc) VALUES (%d, 'second')", salt+100),
		fmt.Sprintf("UPDATE app.outbox SET ti = 128, vc = 'after %d' WHERE id = %d", salt, salt), "COMMIT",
		fmt.Sprintf("DELETE FROM app.outbox WHERE id = %d", salt),
	}
}

func startDB(t *testing.T, ctx context.Context, id int, settings map[string]string) *devdb.Server {
	t.Helper()
	srv, err := devdb.Start(ctx, devdb.Options{Dir: filepath.Join(t.TempDir(), "db"), ServerID: id, Settings: settings})
	if errors.Is(err, devdb.ErrNotInstalled) {
		t.Skip("MariaDB not installed")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// committed reads srv's binlog from its start and returns the
// fingerprint of each transaction with captured rows, as the relay loop
// writes it into checkpoints.
func committed(t *testing.T, ctx context.Context, cfg binlog.Config, srv *binlog.Server) []*checkpoint.Fingerprint {
	t.Helper()
	r := binlog.NewReader(cfg, srv, schema.New(cfg.Tables, nil, nil), nil)
	rctx, cancel := context.WithCancel(ctx)
	out := make(chan []binlog.Event, 4)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx, "", out) }()
	defer func() { cancel(); <-done }()
	head, err := binlog.ParseSet(srv.Flavor, srv.Head)
	if err != nil {
		t.Fatal(err)
	}
	var fps []*checkpoint.Fingerprint
	before := ""
	for {
		select {
		case batch := <-out:
			for _, ev := range batch {
				if ev.Kind != binlog.KindCommit {
					continue
				}
				if ev.Digest != nil {
					fps = append(fps, &checkpoint.Fingerprint{GTID: ev.GTID, Before: before, Tables: ev.Digest.Tables,
						Rows: int64(ev.Digest.Rows), Digest: ev.Digest.Sum})
				}
				before = ev.Set.String()
				if ev.Set.Contain(head) {
					return fps
				}
			}
		case err := <-done:
			t.Fatalf("reader stopped: %v", err)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
}

// Every transaction with captured rows, read from the primary as the
// relay reads it, is proved on the primary and on a replica whose binlog
// holds it in other bytes (no column metadata, so no signedness in its
// table maps; compressed row events); an unrelated server with the same
// server_id, the same statements and other values is another history.
func TestProveHoldsOnReplicaRefusesStranger(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	primary := startDB(t, ctx, 1, nil)
	replica := startDB(t, ctx, 2, map[string]string{"log-slave-updates": "", "binlog-row-metadata": "NO_LOG",
		"log-bin-compress": "ON", "log-bin-compress-min-len": "10"})
	stranger := startDB(t, ctx, 1, nil)
	setup := []string{"SET SESSION time_zone = '+00:00'", "SET SESSION sql_mode = ''",
		"CREATE USER 'relay'@'%' IDENTIFIED BY 'relay-pw'", "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'relay'@'%'",
		"CREATE DATABASE app", proofTable}
	if err := primary.Exec(append(setup, proofRows(7)...)...); err != nil {
		t.Fatal(err)
	}
	if err := stranger.Exec(append(setup, proofRows(8)...)...); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(primary.Addr)
	if err := replica.Exec("STOP SLAVE", "RESET MASTER", "SET GLOBAL gtid_slave_pos = ''",
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%s, MASTER_USER='relay', MASTER_PASSWORD='relay-pw', "+
			"MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1", host, port), "START SLAVE"); err != nil {
		t.Fatal(err)
	}
	cfg := binlog.Config{User: "relay", Password: "relay-pw", ServerID: 4242, Tables: []string{"app.outbox"},
		ConnectTimeout: 5 * time.Second, QueryTimeout: 10 * time.Second, HeartbeatPeriod: time.Second}
	inspect := func(addr string) *binlog.Server {
		t.Helper()
		c := cfg
		c.Hosts = []string{addr}
		srv, err := source.Inspect(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		return srv
	}
	p := inspect(primary.Addr)
	deadline := time.Now().Add(time.Minute)
	for {
		rows, err := replica.Query("SELECT @@GLOBAL.gtid_binlog_state")
		if err != nil {
			t.Fatal(err)
		}
		if rel, _, err := source.Relate(p.Flavor, p.Head, rows[0][0], ""); err == nil && rel == source.Contains {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica at %s, primary at %s", rows[0][0], p.Head)
		}
		time.Sleep(50 * time.Millisecond)
	}
	fps := committed(t, ctx, cfg, p)
	if len(fps) != 2 || fps[1].Rows != 1 {
		t.Fatalf("%d transactions with inserted captured rows (%+v), want 2 (the INSERT; the INSERT and UPDATE: one row)", len(fps), fps)
	}
	hosts := map[string]*binlog.Server{"primary": p, "replica": inspect(replica.Addr), "stranger": inspect(stranger.Addr)}
	for _, fp := range fps {
		cp := &checkpoint.Checkpoint{Flavor: p.Flavor, GTIDSet: fp.GTID, Fingerprint: fp, SourceUID: p.UID, ServerID: p.ServerID}
		for _, name := range []string{"primary", "replica"} {
			proof, err := source.Prove(ctx, cfg, hosts[name], cp, 10*time.Second)
			if err != nil || proof.Kind != source.ProofRead {
				t.Fatalf("%s, %s (%d rows): proof %+v, %v; want read", name, fp.GTID, fp.Rows, proof, err)
			}
		}
		_, err := source.Prove(ctx, cfg, hosts["stranger"], cp, 10*time.Second)
		if !errors.Is(err, source.ErrForeignHistory) || !errors.Is(err, binlog.ErrPositionDiverged) {
			t.Fatalf("stranger, %s: %v; want ErrForeignHistory", fp.GTID, err)
		}
		t.Logf("%s (%d rows of %v): proved on the primary and the replica; stranger: %v", fp.GTID, fp.Rows, fp.Tables, err)
	}
}
