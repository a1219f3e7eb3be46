package mysqlsource

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

func startTest(t *testing.T, opts Options) *Primary {
	t.Helper()
	p, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func dump(t *testing.T, p *Primary, password, set string) (*replication.BinlogStreamer, func(), error) {
	t.Helper()
	host, port, _ := net.SplitHostPort(p.Addr())
	n, _ := strconv.Atoi(port)
	s := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{ServerID: 77, Flavor: "mysql", Host: host, Port: uint16(n),
		User: "relay", Password: password, DisableRetrySync: true, HeartbeatPeriod: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	gs, err := mysql.ParseMysqlGTIDSet(set)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.StartSyncGTID(gs)
	return st, s.Close, err
}

// firstError reads the stream until the server's error.
func firstError(st *replication.BinlogStreamer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		if _, err := st.GetEvent(ctx); err != nil {
			return err
		}
	}
}

func TestDumpRefusesAsMySQL(t *testing.T) {
	p := startTest(t, Options{Version: "8.0.40", UUID: "5a5a5a5a-0000-4000-8000-000000000001"})
	tbl, err := p.CreateOutbox("app", "outbox")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := p.Commit(Tx{Inserts: []Insert{{Table: tbl, Rows: [][]any{{int64(i), "e", "a", "d", "t", `{}`, time.Now()}}}}}); err != nil {
			t.Fatal(err)
		}
	}
	p.Rotate()
	if err := p.PurgeTo(p.Files()[1]); err != nil {
		t.Fatal(err)
	}
	// Purged: the replica lacks uuid:1-4.
	st, stop, err := dump(t, p, "relay-pw", p.UUID()+":1-2")
	if err == nil {
		err = firstError(st)
	}
	stop()
	var me *mysql.MyError
	if !errors.As(err, &me) || me.Code != 1236 || !strings.HasPrefix(me.Message, "Cannot replicate because the source purged required binary logs.") ||
		!strings.Contains(me.Message, "the missing transactions are '"+p.UUID()+":3-4'") {
		t.Fatalf("purged: %v", err)
	}
	// More GTIDs of the server's own uuid than it has.
	st, stop, err = dump(t, p, "relay-pw", p.UUID()+":1-9")
	if err == nil {
		err = firstError(st)
	}
	stop()
	if !errors.As(err, &me) || me.Code != 1236 || !strings.HasPrefix(me.Message, "Replica has more GTIDs than the source has") {
		t.Fatalf("ahead: %v", err)
	}
	// Another uuid's GTIDs the server lacks are not checked (as MySQL).
	st, stop, err = dump(t, p, "relay-pw", p.UUID()+":1-4,11111111-1111-1111-1111-111111111111:1-5")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	ev, err := st.GetEvent(ctx)
	cancel()
	stop()
	if err != nil || ev.Header.EventType != replication.ROTATE_EVENT {
		t.Fatalf("dump from a set with a foreign uuid: %v %v", ev, err)
	}
	// A wrong password: MySQL's 1045.
	if _, _, err := dump(t, p, "wrong", p.UUID()+":1-4"); !errors.As(err, &me) || me.Code != mysql.ER_ACCESS_DENIED_ERROR {
		t.Fatalf("wrong password: %v", err)
	}
}

func TestQueriesAsMySQL(t *testing.T) {
	for _, version := range []string{"8.0.40", "8.4.3"} {
		p := startTest(t, Options{Version: version})
		c, err := client.Connect(p.Addr(), "relay", "relay-pw", "")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = c.Execute("SHOW MASTER STATUS")
		var me *mysql.MyError
		if eightFour := version == "8.4.3"; eightFour != (errors.As(err, &me) && me.Code == mysql.ER_PARSE_ERROR) {
			t.Errorf("%s: SHOW MASTER STATUS: %v", version, err)
		}
		if _, err := c.Execute("SHOW REPLICA STATUS"); err != nil {
			t.Errorf("%s: SHOW REPLICA STATUS: %v", version, err)
		}
		r, err := c.Execute("SELECT @@GLOBAL.gtid_executed, @@GLOBAL.gtid_purged")
		if err != nil || r.ColumnNumber() != 2 {
			t.Fatalf("%s: select gtid variables: %v", version, err)
		}
		if _, err := c.Execute("SELECT @@GLOBAL.gtid_binlog_pos"); !errors.As(err, &me) || me.Code != mysql.ER_UNKNOWN_SYSTEM_VARIABLE {
			t.Errorf("%s: MariaDB variable on MySQL: %v", version, err)
		}
		if _, err := p.Commit(Tx{GTID: p.UUID() + ":t:1", Statement: "CREATE DATABASE x"}); (err == nil) != (version == "8.4.3") {
			t.Errorf("%s: tagged GTID commit: %v", version, err)
		}
	}
}

// A gtid_executed longer than 1,024 characters is cut by SHOW VARIABLES
// and whole in SELECT @@GLOBAL.
func TestLongGTIDExecuted(t *testing.T) {
	p := startTest(t, Options{})
	for i := 0; i < 40; i++ {
		if _, err := p.Commit(Tx{GTID: "00000000-0000-0000-0000-0000000000" + strconv.Itoa(10+i) + ":1", Statement: "DO 1"}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.Connect(p.Addr(), "relay", "relay-pw", "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Execute("SHOW GLOBAL VARIABLES LIKE 'gtid_executed'")
	if err != nil {
		t.Fatal(err)
	}
	shown, _ := r.GetString(0, 1)
	r, err = c.Execute("SELECT @@GLOBAL.gtid_executed")
	if err != nil {
		t.Fatal(err)
	}
	full, _ := r.GetString(0, 0)
	if len(shown) != 1024 || len(full) <= 1024 || !strings.HasPrefix(full, shown) {
		t.Fatalf("SHOW VARIABLES %d characters, SELECT %d", len(shown), len(full))
	}
}

// A second replica with the same server_id takes the stream; the first
// gets MySQL's 1236 "same server_uuid/server_id" error.
func TestDuplicateServerIDOtherUUIDGoesOn(t *testing.T) {
	p := startTest(t, Options{Version: "8.4.3"})
	tbl, err := p.CreateOutbox("app", "outbox")
	if err != nil {
		t.Fatal(err)
	}
	first, stop1, err := dump(t, p, "relay-pw", "")
	if err != nil {
		t.Fatal(err)
	}
	defer stop1()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := first.GetEvent(ctx); err != nil { // streaming
		t.Fatal(err)
	}
	_, stop2, err := dump(t, p, "relay-pw", "")
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	// MySQL 8 compares the clients' @replica_uuid (go-mysql sets a new one
	// per connection), not the server_id: the first dump goes on.
	if _, err := p.Commit(Tx{Inserts: []Insert{{Table: tbl, Rows: [][]any{{int64(1), "ev-1", "alarm", "d", "T", "{}", time.Now()}}}}}); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := first.GetEvent(ctx)
		if err != nil {
			t.Fatalf("first dump ended with %v after a second one registered with its server_id and another uuid", err)
		}
		if _, ok := ev.Event.(*replication.GTIDEvent); ok {
			return
		}
	}
}
