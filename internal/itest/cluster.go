package itest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/source"
)

// Cluster is a MariaDB primary with GTID replicas, each a scratch server
// in its own directory and on its own port: binlog on, gtid_strict_mode
// on, and on the replicas log_slave_updates, so each replica's binlog holds
// the primary's transactions under their original GTIDs.
type Cluster struct {
	Primary  *devdb.Server
	Replicas []*devdb.Server
}

// Replication account the replicas use on the primary.
const (
	replUser     = "repl"
	replPassword = "repl-pw"
)

// StartCluster starts a primary (server_id 1) and n replicas (server_id
// 2, 3, ...) replicating it with MASTER_USE_GTID=slave_pos; all are
// stopped at the end of the test.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	servers := make([]*devdb.Server, 0, n+1)
	t.Cleanup(func() {
		for _, s := range servers {
			s.Stop()
		}
	})
	// One after the other: concurrent mariadb-install-db runs collide on
	// their temporary tables in /tmp.
	for i := 0; i <= n; i++ {
		opts := devdb.Options{Dir: filepath.Join(dir, fmt.Sprintf("db%d", i+1)), ServerID: i + 1,
			Settings: map[string]string{"innodb-buffer-pool-size": "32M"}}
		if i > 0 {
			opts.Settings["log-slave-updates"] = ""
		}
		srv, err := devdb.Start(ctx, opts)
		if err != nil {
			t.Fatalf("start server %d of the cluster: %v", i+1, err)
		}
		servers = append(servers, srv)
	}
	c := &Cluster{Primary: servers[0], Replicas: servers[1:]}
	if err := c.Primary.Exec(
		"CREATE USER '"+replUser+"'@'%' IDENTIFIED BY '"+replPassword+"'",
		"GRANT REPLICATION SLAVE ON *.* TO '"+replUser+"'@'%'"); err != nil {
		t.Fatalf("create the replication user: %v", err)
	}
	for _, r := range c.Replicas {
		if err := r.Replicate(c.Primary, replUser, replPassword); err != nil {
			t.Fatalf("start replication on %s: %v", r.Addr, err)
		}
	}
	c.WaitReplicated(t, time.Minute, c.Replicas...)
	return c
}

// NewSchema creates a fresh outbox schema and the relay user on the
// primary, as Env.NewSchema does on the shared server, and waits until
// every replica has it.
func (c *Cluster) NewSchema(t testing.TB, e *Env) *Schema {
	t.Helper()
	name := e.Unique("app")
	err := c.Primary.Exec(
		"CREATE DATABASE "+name,
		fmt.Sprintf(OutboxDDL, name),
		fmt.Sprintf(AlarmDDL, name),
		fmt.Sprintf(SeqDDL, name),
		"CREATE USER IF NOT EXISTS 'relay'@'%' IDENTIFIED BY 'relay-pw'",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'relay'@'%'",
	)
	if err != nil {
		t.Fatalf("create schema: %v", err)
	}
	c.WaitReplicated(t, time.Minute, c.Replicas...)
	return &Schema{DB: c.Primary, Name: name}
}

// Addrs are the replicas' addresses, in order.
func (c *Cluster) Addrs(replicas ...*devdb.Server) []string {
	out := make([]string, len(replicas))
	for i, r := range replicas {
		out[i] = r.Addr
	}
	return out
}

// WaitReplicated waits until each replica's binlog holds every transaction
// of the primary's binlog at call time.
func (c *Cluster) WaitReplicated(t testing.TB, timeout time.Duration, replicas ...*devdb.Server) {
	t.Helper()
	head := Head(t, c.Primary)
	for _, r := range replicas {
		Eventually(t, timeout, func() error {
			rows, err := r.Query("SELECT @@GLOBAL.gtid_binlog_state")
			if err != nil {
				return err
			}
			rel, why, err := source.Relate("mariadb", head, rows[0][0], "")
			if err != nil {
				return err
			}
			if rel != source.Contains {
				return fmt.Errorf("replica %s %s: %s", r.Addr, rel, why)
			}
			return nil
		})
	}
}
