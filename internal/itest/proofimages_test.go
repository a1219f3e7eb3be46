//go:build integration

package itest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/devdb"
)

// A replica re-logs the transactions it applies with its own
// binlog_row_image: a DELETE or UPDATE the primary logged with a session's
// MINIMAL image (the primary key alone) is FULL in the replica's binlog.
// The relay accepts such images of captured tables (it publishes only
// INSERTs), so the checkpoint's last transaction with outbox rows may be
// one, and the proof must still hold on the replica.

// The last transaction with outbox rows the relay read from the primary is
// a clean-up DELETE its session logged with binlog_row_image=MINIMAL; the
// replica (FULL) logged it with whole rows. Failing over, the replica
// proves it holds the checkpoint's last transaction and the relay goes on
// there.
func TestFailoverToReplicaAfterMinimalImageDeleteProvesLastTransaction(t *testing.T) {
	BrokerOnlyAsSink(t)
	pr := startPairRelay(t, nil)
	c, primary, replica, s, cfg, p := pr.c, pr.primary, pr.replica, pr.s, pr.cfg, pr.p
	waitHostState(t, p, primary.Addr, "streaming")
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 20, Tag: "p"}); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, p, cfg, primary)
	if err := primary.Exec("SET SESSION binlog_row_image=MINIMAL",
		fmt.Sprintf("DELETE FROM %s ORDER BY id LIMIT 5", s.Table())); err != nil {
		t.Fatal(err)
	}
	if cp := waitCaughtUp(t, p, cfg, primary); cp.Fingerprint == nil {
		t.Fatalf("checkpoint %s past the DELETE carries no fingerprint", cp.GTIDSet)
	}
	c.WaitReplicated(t, time.Minute, replica)
	failOverAndPromote(t, p, cfg, primary, replica, s, 10)
}

// requireProvedBy fails unless p logged that host proved, by reading it
// again, that it holds the checkpoint's last transaction.
func requireProvedBy(t *testing.T, p *InProcess, host string) {
	t.Helper()
	for _, line := range strings.Split(p.Logs(), "\n") {
		if strings.Contains(line, `"host":"`+host+`"`) && strings.Contains(line, "source host holds the checkpoint's last transaction") {
			return
		}
	}
	t.Fatalf("no log line says %s proved it holds the checkpoint's last transaction:\n%s", host, tailLines(p.Logs(), 20))
}

// richOutboxDDL is a second captured table: the router's columns and a
// column of most other types, whose values a replica re-logs from its own
// copy of the row.
const richOutboxDDL = `CREATE TABLE %s.outbox_rich (
	id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	event_id VARCHAR(64) NOT NULL, aggregate_type VARCHAR(64) NOT NULL, aggregate_id VARCHAR(64) NOT NULL,
	event_type VARCHAR(64) NOT NULL, payload TEXT NOT NULL, created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
	d DECIMAL(20,6), f FLOAT, dbl DOUBLE, dt DATETIME(6), ts TIMESTAMP(3) NULL, dd DATE, tm TIME(3), y YEAR,
	bt BIT(10), e ENUM('a','b'), st SET('x','y'), js JSON, u INT UNSIGNED, ti TINYINT UNSIGNED, c CHAR(10) CHARACTER SET latin1)`

// A replica applying in parallel (slave_parallel_threads, optimistic or
// aggressive), with other binlog_row_metadata, compressed binlogs
// (log_bin_compress), gtid_strict_mode off, another time zone and
// sql_mode, its binlog rotated after it applied everything, while a
// second GTID domain is written (a parallel replica commits the domains
// independently, in another order than the primary): the checkpoint's last
// transaction has rows in two captured tables, of most column types
// (written in a session with another time zone), is larger than a batch
// (published in parts), and the checkpoint goes past it in the other
// domain. Failing over, the replica
// proves it holds it and the relay goes on there.
func TestFailoverToParallelReplicaProvesLastTransaction(t *testing.T) {
	BrokerOnlyAsSink(t)
	for _, tc := range []struct {
		name     string
		settings map[string]string
	}{
		{"optimistic", map[string]string{"slave-parallel-threads": "4", "slave-parallel-mode": "optimistic",
			"binlog-row-metadata": "MINIMAL", "log-bin-compress": "ON", "log-bin-compress-min-len": "10",
			"default-time-zone": "+05:00"}},
		{"aggressive", map[string]string{"slave-parallel-threads": "8", "slave-parallel-mode": "aggressive",
			"binlog-row-metadata": "NO_LOG", "gtid-strict-mode": "OFF", "sql-mode": "ANSI,NO_BACKSLASH_ESCAPES",
			"default-time-zone": "-07:00"}},
	} {
		t.Run(tc.name, func(t *testing.T) { proveParallelReplica(t, tc.settings) })
	}
}

func proveParallelReplica(t *testing.T, replicaSettings map[string]string) {
	c := startPair(t, replicaSettings)
	primary, replica := c.Primary, c.Replicas[0]
	s := c.NewSchema(t, env)
	if err := primary.Exec(fmt.Sprintf(richOutboxDDL, s.Name)); err != nil {
		t.Fatal(err)
	}
	k := StartKafka(t)
	cfg := env.RelayConfig(k, s.Table())
	cfg.Source.Tables = append(cfg.Source.Tables, s.Name+".outbox_rich")
	cfg.Source.Hosts = []string{primary.Addr, replica.Addr}
	cfg.Kafka.Batch.MaxRecords = 16
	p := RunRelay(t, cfg)
	p.WaitReady(t)
	waitHostState(t, p, primary.Addr, "streaming")
	// Concurrent writers, so that the replica applies in parallel, and a
	// second GTID domain, whose transactions a parallel replica commits
	// independently of domain 0's (in another order than the primary).
	other := make(chan error, 1)
	go func() { other <- writeDomain(primary, s, 1, 0, 60, true) }()
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 8, Transactions: 40, Tag: "p"}); err != nil {
		t.Fatal(err)
	}
	if err := <-other; err != nil {
		t.Fatal(err)
	}
	last := []string{"SET SESSION time_zone = '+09:30'", "SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION'", "BEGIN"}
	for i := 0; i < 40; i++ {
		last = append(last, fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) "+
			"VALUES ('last-%d', 'alarm', 'dev-%d', 'Created', '{\"n\": %d}')", s.Table(), i, i%3, i))
	}
	last = append(last, fmt.Sprintf(`INSERT INTO %s.outbox_rich (event_id, aggregate_type, aggregate_id, event_type, payload,
		d, f, dbl, dt, ts, dd, tm, y, bt, e, st, js, u, ti, c) VALUES
		('rich-1', 'rich', 'r-1', 'Created', REPEAT('é', 2000), -12345678901234.123456, 1.5, -2.25e300, '9999-12-31 23:59:59.999999',
		 '2030-06-01 12:00:00.125', '2024-02-29', '-838:59:59.000', 2155, b'1010101010', 'b', 'x,y', '{"a": [1, 2.50, "ü"]}',
		 4294967295, 255, 'é'),
		('rich-2', 'rich', 'r-2', 'Created', '', 0, 0, 0, '1000-01-01 00:00:00', NULL, '1000-01-01', '00:00:00', 1901, b'0', 'a', '',
		 'null', 0, 0, ' ')`, s.Name), "COMMIT")
	if err := primary.Exec(last...); err != nil {
		t.Fatal(err)
	}
	lastGTID := lastOfDomain(t, primary, 0)
	if err := writeDomain(primary, s, 1, 60, 10, false); err != nil { // past it, without outbox rows
		t.Fatal(err)
	}
	cp := waitCaughtUp(t, p, cfg, primary)
	if fp := cp.Fingerprint; fp == nil || fp.GTID != lastGTID || fp.Rows != 42 || len(fp.Tables) != 2 {
		t.Fatalf("checkpoint %s carries fingerprint %+v, want one of the last transaction %s (42 rows of 2 tables)", cp.GTIDSet, fp, lastGTID)
	}
	c.WaitReplicated(t, time.Minute, replica)
	if err := replica.Exec("FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	failOverAndPromote(t, p, cfg, primary, replica, s, 10)
}

// writeDomain commits transactions from to from+n-1 in GTID domain domain
// on db: business rows, and (outbox) every fourth an outbox row too.
func writeDomain(db *devdb.Server, s *Schema, domain, from, n int, outbox bool) error {
	stmts := []string{fmt.Sprintf("SET SESSION gtid_domain_id = %d", domain)}
	for i := from; i < from+n; i++ {
		stmts = append(stmts, "BEGIN", fmt.Sprintf("INSERT INTO %s.alarm_record (device_id, level, temp, seq) VALUES ('d%d', 'LOW', %d, %d)",
			s.Name, domain, i, i))
		if outbox && i%4 == 0 {
			stmts = append(stmts, fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) "+
				"VALUES ('domain%d-%d', 'alarm', 'd%d', 'Created', '{}')", s.Table(), domain, i, domain))
		}
		stmts = append(stmts, "COMMIT")
	}
	return db.Exec(stmts...)
}

// lastOfDomain is the GTID db last logged in domain.
func lastOfDomain(t *testing.T, db *devdb.Server, domain int) string {
	t.Helper()
	for _, g := range strings.Split(Head(t, db), ",") {
		if strings.HasPrefix(g, fmt.Sprintf("%d-", domain)) {
			return g
		}
	}
	t.Fatalf("%s logged nothing in domain %d", db.Addr, domain)
	return ""
}
