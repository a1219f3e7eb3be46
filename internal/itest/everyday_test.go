//go:build integration

package itest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/schema"
	"github.com/outbox-relay/outbox-relay/source"
)

// everydaySetup is one everyday way to run the relay: the server's
// binlog_row_metadata, source.start, when the outbox table is created (before
// the relay starts or while it runs) and how (CREATE TABLE or CREATE TABLE IF
// NOT EXISTS, as migration tools write it), and whether source.hosts lists
// more than one host.
type everydaySetup struct {
	metadata    string // MINIMAL (MySQL's default), FULL, NO_LOG (MariaDB's default)
	start       string // now | earliest
	createAfter bool   // the table is created after the relay started
	ifNotExists bool
	hosts       bool // source.hosts: an unreachable host first, then the server
	// sessionMinimal: after the rows, a session with binlog_row_image=MINIMAL
	// writes one transaction giving every column (published) and one
	// leaving event_type to its default (the relay stops there, named).
	sessionMinimal bool
	// unrelated: once rows are published, source.hosts puts first an
	// unrelated server with the same server_id (1) and domain whose GTIDs
	// hold the checkpoint's, its own transactions under them.
	unrelated bool
}

func (s everydaySetup) String() string {
	when := "before"
	if s.createAfter {
		when = "after"
	}
	form := "create"
	if s.ifNotExists {
		form = "if_not_exists"
	}
	name := fmt.Sprintf("%s/%s/table_%s_start/%s", s.metadata, s.start, when, form)
	if s.hosts {
		name += "/several_hosts"
	}
	if s.sessionMinimal {
		name += "/session_row_image_minimal"
	}
	if s.unrelated {
		name += "/unrelated_server_same_server_id"
	}
	return name
}

// everydayOutbox is the article's outbox table, created with form (CREATE
// TABLE or CREATE TABLE IF NOT EXISTS) in database db; event_type has a
// default ('Created') when defaulted.
func everydayOutbox(form, db string, defaulted bool) string {
	ddl := strings.Replace(fmt.Sprintf(OutboxDDL, db), "CREATE TABLE", form, 1)
	if defaulted {
		ddl = strings.Replace(ddl, "event_type     VARCHAR(64)  NOT NULL,", "event_type     VARCHAR(64)  NOT NULL DEFAULT 'Created',", 1)
	}
	return ddl
}

// writeEveryday commits txs transactions of three outbox rows each, for the
// aggregates a, b and c in turn, each row's payload carrying its aggregate's
// sequence number (from seq on), so order per aggregate can be checked.
func writeEveryday(t *testing.T, db *devdb.Server, s *Schema, tag string, txs int, seq *int) {
	t.Helper()
	for i := 0; i < txs; i++ {
		*seq++
		stmts := []string{"BEGIN"}
		for _, agg := range []string{"a", "b", "c"} {
			stmts = append(stmts, fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) "+
				"VALUES ('%s-%s-%d', 'order', '%s', 'Placed', '{\"seq\":%d}')", s.Table(), tag, agg, *seq, agg, *seq))
		}
		if err := db.Exec(append(stmts, "COMMIT")...); err != nil {
			t.Fatal(err)
		}
	}
}

// waitCaughtUp waits until r's committed checkpoint covers the server's head,
// failing at once if the relay stops, and returns that checkpoint.
func waitCaughtUp(t *testing.T, r *InProcess, cfg config.Config, db *devdb.Server) *checkpoint.Checkpoint {
	t.Helper()
	target := Head(t, db)
	want, err := binlog.ParseSet("mariadb", target)
	if err != nil {
		t.Fatal(err)
	}
	store := Store(t, cfg)
	var got *checkpoint.Checkpoint
	Eventually(t, time.Minute, func() error {
		select {
		case <-r.Done():
			t.Fatalf("relay stopped: %v", r.Err())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cp, err := store.Load(ctx, cfg.Name)
		if err != nil || cp == nil {
			return fmt.Errorf("no checkpoint yet (%v)", err)
		}
		have, err := binlog.ParseSet(cp.Flavor, cp.GTIDSet)
		if err != nil {
			return err
		}
		if !have.Contain(want) || cp.Partial != nil {
			return fmt.Errorf("checkpoint at %q, want %q", cp.GTIDSet, target)
		}
		got = cp
		return nil
	})
	return got
}

// The everyday setups publish every outbox row exactly once, in order per
// aggregate: binlog_row_metadata MINIMAL (MySQL's default), FULL and NO_LOG
// (MariaDB's default), with source.start now (the table created before the
// relay starts, or a brand-new table created while it runs) or earliest,
// the table created with CREATE TABLE or CREATE TABLE IF NOT EXISTS (what
// migration tools write), and with several source.hosts. Each setup also
// restarts the relay right after the table's creation, so a restart takes
// the layout from the checkpoint. One server serves every setup:
// binlog_row_metadata is a dynamic global variable.
func TestEverydaySetupsPublishEveryRowOnce(t *testing.T) {
	BrokerOnlyAsSink(t)
	k := StartKafka(t)
	db := startServer(t, nil)
	var setups []everydaySetup
	for _, md := range []string{"MINIMAL", "FULL", "NO_LOG"} {
		for _, start := range []string{"now", "earliest"} {
			for _, after := range []bool{false, true} {
				if start == "earliest" && after {
					continue // from earliest, before and after the start are the same binlog
				}
				for _, ine := range []bool{false, true} {
					setups = append(setups, everydaySetup{metadata: md, start: start, createAfter: after, ifNotExists: ine})
				}
			}
		}
	}
	setups = append(setups, everydaySetup{metadata: "NO_LOG", start: "now", createAfter: true, ifNotExists: true, hosts: true})
	for _, md := range []string{"MINIMAL", "FULL", "NO_LOG"} {
		setups = append(setups, everydaySetup{metadata: md, start: "now", sessionMinimal: true})
	}
	setups = append(setups, everydaySetup{metadata: "NO_LOG", start: "now", createAfter: true, ifNotExists: true, unrelated: true})
	for _, s := range setups {
		t.Run(s.String(), func(t *testing.T) {
			if err := db.Exec("SET GLOBAL binlog_row_metadata=" + s.metadata); err != nil {
				t.Fatal(err)
			}
			sch := &Schema{DB: db, Name: env.Unique("every")}
			form := "CREATE TABLE"
			if s.ifNotExists {
				form = "CREATE TABLE IF NOT EXISTS"
			}
			if err := db.Exec("CREATE DATABASE " + sch.Name); err != nil {
				t.Fatal(err)
			}
			seq := 0
			if !s.createAfter {
				if err := db.Exec(everydayOutbox(form, sch.Name, s.sessionMinimal)); err != nil {
					t.Fatal(err)
				}
				if s.start == "earliest" {
					writeEveryday(t, db, sch, "early", 3, &seq)
				}
			}
			cfg := env.RelayConfig(k, sch.Table())
			cfg.Source.Hosts = []string{db.Addr}
			if s.hosts {
				cfg.Source.Hosts = []string{freeAddr(t), db.Addr}
			}
			cfg.Source.Start = s.start
			r := RunRelay(t, cfg)
			r.WaitReady(t)
			if s.createAfter {
				if err := db.Exec(everydayOutbox(form, sch.Name, s.sessionMinimal)); err != nil {
					t.Fatal(err)
				}
			}
			// A restart after the table's creation: the layout comes from
			// the checkpoint. A layout taken from CREATE TABLE IF NOT EXISTS
			// of a table not seen before is there still to be checked
			// against the table's first rows.
			cp := waitCaughtUp(t, r, cfg, db)
			_, provisional := cp.Provisional[sch.Table()]
			if want := s.ifNotExists && s.createAfter; provisional != want {
				t.Fatalf("checkpoint: layout %v provisional %v, want %v", cp.Schema[sch.Table()], provisional, want)
			}
			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
			r = RunRelay(t, cfg)
			r.WaitReady(t)
			writeEveryday(t, db, sch, "late", 4, &seq)
			if s.sessionMinimal {
				sessionMinimalStops(t, r, k, cfg, db, sch, &seq)
				return
			}
			if cp := waitCaughtUp(t, r, cfg, db); len(cp.Provisional) != 0 {
				t.Fatalf("checkpoint after rows: layouts still to be checked %v", cp.Provisional)
			}
			if s.unrelated {
				r = switchToUnrelated(t, r, cfg, db, startServer(t, nil), sch, &seq)
			}
			rep := Compare(t, sch, Consume(t, k.Brokers, cfg.Router.TopicPrefix))
			if !rep.OK() || rep.Received != rep.Expected || rep.Expected == 0 {
				t.Fatalf("%s", rep)
			}
			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// sessionMinimalStops: a session with binlog_row_image=MINIMAL commits a
// transaction that gives every column (its image is whole: published) and
// one that leaves event_type to its default (the image lacks it); the
// relay stops at the second, named, every row before it published once
// and nothing of it or after it.
func sessionMinimalStops(t *testing.T, r *InProcess, k *Kafka, cfg config.Config, db *devdb.Server, sch *Schema, seq *int) {
	t.Helper()
	*seq++
	whole := fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) "+
		"VALUES ('minimal-whole', 'order', 'a', 'Placed', '{\"seq\":%d}')", sch.Table(), *seq)
	before := sessionTx(t, db, "MINIMAL", whole)
	*seq++
	stopped := sessionTx(t, db, "MINIMAL", fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, payload) "+
		"VALUES ('minimal-defaulted', 'order', 'a', '{\"seq\":%d}')", sch.Table(), *seq))
	writeEveryday(t, db, sch, "after", 1, seq)
	checkPartialImageStop(t, r, r.StoppedWith(t), stopped, sch.Table(), "lacks column(s) event_type:")
	checkpointBefore(t, cfg, before, stopped)
	rep := Compare(t, sch, Consume(t, k.Brokers, cfg.Router.TopicPrefix))
	slices.Sort(rep.Missing)
	if len(rep.Duplicates)+len(rep.Unexpected)+len(rep.OutOfOrder)+len(rep.WrongKey) > 0 || rep.Received == 0 ||
		!slices.Equal(rep.Missing, []string{"after-a-" + strconv.Itoa(*seq), "after-b-" + strconv.Itoa(*seq), "after-c-" + strconv.Itoa(*seq), "minimal-defaulted"}) {
		t.Fatalf("want every row before the stop once, nothing of the stopped transaction or after it: %s", rep)
	}
}

// switchToUnrelated stops r, gives stranger (another server with the same
// server_id and domain as db) its own transactions with outbox rows of the
// same table under the GTIDs of r's checkpoint and past it, and starts the
// relay again with stranger first in source.hosts: stranger is refused,
// the relay goes on with db. It returns the new relay, caught up with db.
func switchToUnrelated(t *testing.T, r *InProcess, cfg config.Config, db, stranger *devdb.Server, sch *Schema, seq *int) *InProcess {
	t.Helper()
	cp := waitCaughtUp(t, r, cfg, db)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	at, err := binlog.ParseSet("mariadb", cp.GTIDSet)
	if err != nil {
		t.Fatal(err)
	}
	last := at.(*gomysql.MariadbGTIDSet).Sets[0].SequenceNumber
	own, err := binlog.ParseSet("mariadb", Head(t, stranger))
	if err != nil {
		t.Fatal(err)
	}
	from := max(own.(*gomysql.MariadbGTIDSet).Sets[0].SequenceNumber+1, last-30)
	other := &Schema{DB: stranger, Name: sch.Name}
	if err := stranger.Exec("SET SESSION sql_log_bin = 0", "CREATE DATABASE IF NOT EXISTS "+sch.Name, everydayOutbox("CREATE TABLE IF NOT EXISTS", sch.Name, false)); err != nil {
		t.Fatal(err)
	}
	c, err := stranger.Root()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Execute(fmt.Sprintf("SET SESSION gtid_seq_no = %d", from)); err != nil {
		t.Fatal(err)
	}
	for n := from; n <= last+20; n++ {
		if _, err := c.Execute(fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) "+
			"VALUES ('stranger-%d', 'order', 'a', 'Placed', '{\"seq\":%d}')", other.Table(), n, n)); err != nil {
			t.Fatal(err)
		}
	}
	if rel, why, err := source.Relate("mariadb", cp.GTIDSet, binlogState(t, stranger), "1"); err != nil || rel != source.Contains {
		t.Fatalf("the unrelated server's GTIDs do not hold the checkpoint %s: %v %s %v", cp.GTIDSet, rel, why, err)
	}
	cfg.Source.Hosts = []string{stranger.Addr, db.Addr}
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	writeEveryday(t, db, sch, "after", 2, seq)
	waitCaughtUp(t, r, cfg, db)
	if st := hostState(r, stranger.Addr); st != "diverged" {
		t.Fatalf("the unrelated server %s is %q, want diverged", stranger.Addr, st)
	}
	return r
}

// legacyOutbox is the outbox with its columns in another order.
const legacyOutbox = `CREATE TABLE app.outbox (
	id             BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
	created_at     DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
	event_id       VARCHAR(64)  NOT NULL,
	aggregate_type VARCHAR(64)  NOT NULL,
	aggregate_id   VARCHAR(64)  NOT NULL,
	event_type     VARCHAR(64)  NOT NULL,
	payload        JSON         NOT NULL,
	UNIQUE KEY uk_event_id (event_id)
) ENGINE=InnoDB`

// A CREATE TABLE IF NOT EXISTS of a table the relay has not seen, whose rows
// then have another layout, read without column names in the binlog: the
// layout the statement defines is checked against the table's rows, and the
// disagreement stops the relay before anything is published, naming the
// table, the GTID and the fix; the fix it names (`checkpoint set --schema
// server`) then publishes the row with its own columns. The relay restarts
// in between, so the check comes from its checkpoint. MySQL logs CREATE
// TABLE IF NOT EXISTS of a table that exists (it does nothing); MariaDB does
// not, so here the table is replaced outside the binlog (sql_log_bin=0) after
// the statement, which leaves the relay with the same wrong belief.
func TestCreateTableIfNotExistsOfAnotherLayoutStops(t *testing.T) {
	BrokerOnlyAsSink(t)
	k := StartKafka(t)
	db := startServer(t, map[string]string{"binlog-row-metadata": "NO_LOG"})
	if err := db.Exec("DROP TABLE app.outbox"); err != nil {
		t.Fatal(err)
	}
	cfg := env.RelayConfig(k, "app.outbox")
	cfg.Source.Hosts = []string{db.Addr}
	cfg.Source.Start = Head(t, db) // no layout known: the relay has not seen the table
	path := WriteConfig(t, cfg)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if err := db.Exec(everydayOutbox("CREATE TABLE IF NOT EXISTS", "app", false)); err != nil {
		t.Fatal(err)
	}
	// Down with the layout in its checkpoint, still to be checked.
	waitCaughtUp(t, r, cfg, db)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("SET SESSION sql_log_bin=0", "DROP TABLE app.outbox", legacyOutbox); err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) " +
		"VALUES ('e-1', 'order', 'agg-1', 'Placed', '{\"seq\":1}')"); err != nil {
		t.Fatal(err)
	}
	head := Head(t, db)
	r = RunRelay(t, cfg)
	err := r.StoppedWith(t)
	if !errors.Is(err, binlog.ErrSchemaMismatch) || !errors.Is(err, schema.ErrProvisional) {
		t.Fatalf("relay stopped with %v, want ErrSchemaMismatch wrapping ErrProvisional", err)
	}
	for _, want := range []string{"app.outbox", head, "column 2 (event_id)", "binlog_row_metadata=FULL", "checkpoint set"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %q", err, want)
		}
	}
	if n := len(Consume(t, k.Brokers, cfg.Router.TopicPrefix)); n != 0 {
		t.Fatalf("%d records published", n)
	}
	cp, err := Store(t, cfg).Load(context.Background(), cfg.Name)
	if err != nil || cp == nil {
		t.Fatalf("checkpoint: %v %v", cp, err)
	}
	_, errOut, code := env.CLI(t, "checkpoint", "set", "--gtid", cp.GTIDSet, "--schema", "server", "--force", "--yes", "--config", path)
	if code != 0 {
		t.Fatalf("checkpoint set: exit %d: %s", code, errOut)
	}
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	waitCaughtUp(t, r, cfg, db)
	rep := Compare(t, &Schema{DB: db, Name: "app"}, Consume(t, k.Brokers, cfg.Router.TopicPrefix))
	if !rep.OK() || rep.Received != 1 {
		t.Fatalf("%s", rep)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}
