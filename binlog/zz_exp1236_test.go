//go:build exp1236

package binlog_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/internal/devdb"
)

func TestExp1236(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := devdb.Start(ctx, devdb.Options{Dir: dir, Settings: map[string]string{"gtid-strict-mode": os.Getenv("STRICT")}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Stop()
	if err := db.Exec("CREATE DATABASE x", "CREATE TABLE x.t (a INT)", "INSERT INTO x.t VALUES (1)", "INSERT INTO x.t VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	_, ps, _ := strings.Cut(db.Addr, ":")
	port, _ := strconv.Atoi(ps)
	newSyncer := func(id uint32) *replication.BinlogSyncer {
		return replication.NewBinlogSyncer(replication.BinlogSyncerConfig{ServerID: id, Flavor: "mariadb", Host: "127.0.0.1", Port: uint16(port),
			User: "root", Password: devdb.RootPassword, DisableRetrySync: true, HeartbeatPeriod: time.Second})
	}
	rows, _ := db.Query("SELECT @@gtid_binlog_pos")
	head := rows[0][0]
	t.Logf("head %s", head)
	try := func(name string, id uint32, pos string, wait time.Duration) {
		s := newSyncer(id)
		defer s.Close()
		set, err := mysql.ParseGTIDSet("mariadb", pos)
		if err != nil {
			t.Fatal(err)
		}
		st, err := s.StartSyncGTID(set)
		if err != nil {
			report(t, name+" start", err)
			return
		}
		c, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		for {
			_, err := st.GetEvent(c)
			if err != nil {
				report(t, name, err)
				return
			}
		}
	}
	// duplicate server id
	a := newSyncer(77)
	set, _ := mysql.ParseGTIDSet("mariadb", head)
	sa, err := a.StartSyncGTID(set)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for {
			_, err := sa.GetEvent(ctx)
			if err != nil {
				done <- err
				return
			}
		}
	}()
	time.Sleep(500 * time.Millisecond)
	b := newSyncer(77)
	sb, err := b.StartSyncGTID(set)
	if err != nil {
		t.Fatal(err)
	}
	_ = sb
	select {
	case err := <-done:
		report(t, "dup server id (old connection)", err)
	case <-time.After(5 * time.Second):
		t.Log("dup server id: no error on old connection")
	}
	a.Close()
	b.Close()
	try("ahead", 78, "0-1-999", 3*time.Second)
	try("diverged", 79, "0-55-1", 3*time.Second)
	try("empty domain", 80, head+",7-1-5", 2*time.Second)
	// purge
	if err := db.Exec("FLUSH BINARY LOGS", "INSERT INTO x.t VALUES (3)", "FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	logs, _ := db.Query("SHOW BINARY LOGS")
	if err := db.Exec("PURGE BINARY LOGS TO '" + logs[len(logs)-1][0] + "'"); err != nil {
		t.Fatal(err)
	}
	try("purged", 81, "0-1-1", 3*time.Second)
	try("hole", 82, "0-1-0", 3*time.Second)
	// big packet
	if err := db.Exec("SET GLOBAL max_allowed_packet=1048576"); err != nil {
		t.Fatal(err)
	}
	rows, _ = db.Query("SELECT @@gtid_binlog_pos")
	head = rows[0][0]
	if err := db.Exec("CREATE TABLE x.b (v LONGBLOB)", "INSERT INTO x.b VALUES (REPEAT('x', 900000))", "INSERT INTO x.b SELECT CONCAT(v, v) FROM x.b"); err != nil {
		t.Log(err)
	}
	try("big", 83, head, 3*time.Second)
}

func report(t *testing.T, name string, err error) {
	var me *mysql.MyError
	if errors.As(err, &me) {
		t.Logf("%s: code %d state %s message %q", name, me.Code, me.State, me.Message)
		return
	}
	t.Logf("%s: %T %v", name, err, fmt.Sprint(err))
}
