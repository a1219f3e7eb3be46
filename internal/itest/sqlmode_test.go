//go:build integration

package itest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/relay"
	"github.com/outbox-relay/outbox-relay/schema"
)

// recordHeaders returns the "neg" and "small" headers of the records,
// by event id.
func recordHeaders(t *testing.T, k *Kafka, cfg config.Config) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, r := range Consume(t, k.Brokers, cfg.Router.TopicPrefix) {
		out[r.ID] = "neg=" + r.Headers["neg"] + " small=" + r.Headers["small"]
	}
	return out
}

// serverColumnType is the server's COLUMN_TYPE of app.ev's column c.
func serverColumnType(t *testing.T, db *devdb.Server, c string) string {
	t.Helper()
	rows, err := db.Query("SELECT COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA='app' AND TABLE_NAME='ev' AND COLUMN_NAME='" + c + "'")
	if err != nil || len(rows) != 1 {
		t.Fatalf("column type of %s: %v %v", c, rows, err)
	}
	return rows[0][0]
}

// publishAfterDDL starts the relay on app.ev (signsDDL) of a NO_LOG server,
// runs ddl in one session (so SET SESSION applies to it), inserts the
// row and returns what was published for it.
func publishAfterDDL(t *testing.T, ddl []string, col, wantType string, insert string) string {
	t.Helper()
	k, db, cfg := signsPipeline(t, "NO_LOG")
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if err := db.Exec(ddl...); err != nil {
		t.Fatal(err)
	}
	if got := serverColumnType(t, db, col); got != wantType {
		t.Fatalf("setup: the server has %s %s, want %s", col, got, wantType)
	}
	if err := db.Exec(insert); err != nil {
		t.Fatal(err)
	}
	waitOrStopped(t, r, cfg, Head(t, db))
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	return recordHeaders(t, k, cfg)["1"]
}

// waitOrStopped waits for the checkpoint to cover target, failing at once
// if the relay stops first.
func waitOrStopped(t *testing.T, r *InProcess, cfg config.Config, target string) {
	t.Helper()
	store := Store(t, cfg)
	want, err := binlog.ParseSet("mariadb", target)
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, time.Minute, func() error {
		select {
		case <-r.Done():
			t.Fatalf("the relay stopped before publishing: %v", r.Err())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cp, err := store.Load(ctx, cfg.Name)
		if err != nil || cp == nil {
			return fmt.Errorf("no checkpoint: %v", err)
		}
		have, err := binlog.ParseSet(cp.Flavor, cp.GTIDSet)
		if err != nil {
			return err
		}
		if !have.Contain(want) || cp.Partial != nil {
			return fmt.Errorf("checkpoint at %q, want %q", cp.GTIDSet, target)
		}
		return nil
	})
}

const signsInsert = "INSERT INTO app.ev (event_id, aggregate_type, aggregate_id, event_type, payload, tiny, small, med, neg) " +
	"VALUES (1, 'alarm', 1, 'X', '{}', 1, %s, 1, %s)"

// An ALTER under NO_BACKSLASH_ESCAPES keeps the column's sign. The failure
// guarded against: an application (or a migration tool) whose session runs
// with sql_mode NO_BACKSLASH_ESCAPES alters the outbox: a Windows path in a
// comment ends in a backslash. The server reads COMMENT 'C:\' as a complete
// string and makes neg UNSIGNED; the tracker reads \' as an escaped quote,
// never sees the MODIFY neg, keeps neg SIGNED, and publishes 4000000000 as
// -294967296 (no error, no warning: the column list did not change).
func TestNoBackslashEscapesAlterKeepsSign(t *testing.T) {
	BrokerOnlyAsSink(t)
	got := publishAfterDDL(t, []string{"SET SESSION sql_mode='NO_BACKSLASH_ESCAPES'",
		`ALTER TABLE app.ev MODIFY event_type VARCHAR(64) NOT NULL COMMENT 'C:\', MODIFY neg INT UNSIGNED NOT NULL`},
		"neg", "int(10) unsigned", fmt.Sprintf(signsInsert, "1", "4000000000"))
	if want := "neg=4000000000 small=1"; got != want {
		t.Fatalf("published %q, want %q", got, want)
	}
}

// Under NO_BACKSLASH_ESCAPES the word UNSIGNED inside a comment is not
// taken for an attribute. The failure guarded against: the other direction:
// with NO_BACKSLASH_ESCAPES the tracker reads the word UNSIGNED inside the
// next column's comment as an attribute of the previous column. The server
// makes small SIGNED (it was UNSIGNED); the tracker keeps it UNSIGNED and
// publishes -1 as 65535.
func TestNoBackslashEscapesCommentInventsNoUnsigned(t *testing.T) {
	BrokerOnlyAsSink(t)
	got := publishAfterDDL(t, []string{"SET SESSION sql_mode='NO_BACKSLASH_ESCAPES'",
		`ALTER TABLE app.ev MODIFY small SMALLINT NOT NULL COMMENT 'x\', MODIFY neg INT NOT NULL COMMENT ' UNSIGNED'`},
		"small", "smallint(6)", fmt.Sprintf(signsInsert, "-1", "-5"))
	if want := "neg=-5 small=-1"; got != want {
		t.Fatalf("published %q, want %q", got, want)
	}
}

// A SET STATEMENT ... FOR prefix under NO_BACKSLASH_ESCAPES runs the
// statement after its last FOR: default_master_connection='\' is a whole
// string, and the MODIFY in the next one is a string too. Read with
// escapes, the prefix ended at the FOR inside that string, and the tracker
// made neg UNSIGNED (-5 published as 4294967291).
func TestNoBackslashEscapesSetStatementPrefixKeepsSign(t *testing.T) {
	BrokerOnlyAsSink(t)
	got := publishAfterDDL(t, []string{"SET SESSION sql_mode='NO_BACKSLASH_ESCAPES'",
		`SET STATEMENT default_master_connection='\', default_master_connection=' FOR ALTER TABLE app.ev MODIFY neg INT UNSIGNED NOT NULL -- ' ` +
			`FOR ALTER TABLE app.ev COMMENT 'c'`},
		"neg", "int(11)", fmt.Sprintf(signsInsert, "1", "-5"))
	if want := "neg=-5 small=1"; got != want {
		t.Fatalf("published %q, want %q", got, want)
	}
}

// MariaDB ignores versioned comments of MySQL 5.7+ versions
// (/*!50700 */ to /*!99999 */) and those above its own version, and the
// tracker (lex) would run every executable comment as code, tracking neg
// UNSIGNED. It does not matter end to end because the server patches an
// ignored comment into a plain one before it is logged ("/* 50700
// UNSIGNED */" in the binlog), so -5 stays -5. Guards that reliance.
func TestMySQLVersionedCommentIgnoredByMariaDBKeepsSign(t *testing.T) {
	BrokerOnlyAsSink(t)
	got := publishAfterDDL(t, []string{"ALTER TABLE app.ev MODIFY neg INT NOT NULL /*!50700 UNSIGNED */"},
		"neg", "int(11)", fmt.Sprintf(signsInsert, "1", "-5"))
	if want := "neg=-5 small=1"; got != want {
		t.Fatalf("published %q, want %q", got, want)
	}
}

// SET STATEMENT ... FOR ALTER TABLE is followed as the ALTER it runs. The
// failure guarded against: MariaDB's SET STATEMENT var=value FOR
// <statement> runs one statement with a session variable set for it; the
// binlog logs the whole text. A migration that bounds its metadata-lock
// wait this way (SET STATEMENT lock_wait_timeout=5 FOR ALTER TABLE ...) is
// valid DDL. The framer took it for a statement-logged row change ("make
// the server log rows", which it already did) and stopped, and the schema
// tracker classified it by its SET; the fix the stop gave (`checkpoint
// skip` of the DDL) then published 4000000000 as -294967296. Both must read
// the statement after FOR.
func TestSetStatementForAlterFollowed(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, db, cfg := signsPipeline(t, "NO_LOG")
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	insertSigned(t, db, "1", "1", "1", "1", "1", "5")
	waitOrStopped(t, r, cfg, Head(t, db))
	if err := db.Exec("SET STATEMENT lock_wait_timeout=5, max_statement_time=(60) FOR ALTER TABLE app.ev MODIFY neg INT UNSIGNED NOT NULL"); err != nil {
		t.Fatal(err)
	}
	if got := serverColumnType(t, db, "neg"); got != "int(10) unsigned" {
		t.Fatalf("setup: neg is %s", got)
	}
	insertSigned(t, db, "2", "2", "1", "1", "1", "4000000000")
	waitOrStopped(t, r, cfg, Head(t, db))
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	got := recordHeaders(t, k, cfg)
	if got["1"] != "neg=5 small=1" || got["2"] != "neg=4000000000 small=1" {
		t.Fatalf("published %v, want 1: neg=5, 2: neg=4000000000", got)
	}
}

// DDL prepared under another sql_mode than it executes under keeps the
// column's sign. The failure guarded against: a prepared statement is
// parsed with the sql_mode of PREPARE, but logged with the session's
// sql_mode at EXECUTE. PREPARE under NO_BACKSLASH_ESCAPES (COMMENT 'C:\'
// ends at its quote, the server makes neg UNSIGNED), EXECUTE after going
// back to the default mode: the event says "escapes on", the tracker reads
// \' as an escaped quote, the MODIFY neg is swallowed by the string, neg
// stays SIGNED: -294967296.
func TestPreparedUnderOtherSQLModeKeepsSign(t *testing.T) {
	BrokerOnlyAsSink(t)
	// Fixed as far as it can be: read with the event's mode the statement
	// ends inside a string, which no statement the server ran does, so the
	// tracker gives the layout up (ErrUnparsed: the relay stops with the
	// fix) rather than read it the wrong way.
	k, db, cfg := signsPipeline(t, "NO_LOG")
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if err := db.Exec("SET SESSION sql_mode='NO_BACKSLASH_ESCAPES'",
		`PREPARE s FROM "ALTER TABLE app.ev MODIFY event_type VARCHAR(64) NOT NULL COMMENT 'C:\', MODIFY neg INT UNSIGNED NOT NULL"`,
		"SET SESSION sql_mode=DEFAULT", "EXECUTE s"); err != nil {
		t.Fatal(err)
	}
	if got := serverColumnType(t, db, "neg"); got != "int(10) unsigned" {
		t.Fatalf("setup: neg is %s", got)
	}
	if err := db.Exec(fmt.Sprintf(signsInsert, "1", "4000000000")); err != nil {
		t.Fatal(err)
	}
	_ = r.StoppedWith(t)
	if !errors.Is(r.Err(), schema.ErrUnparsed) || !strings.Contains(r.Err().Error(), "ends inside quotes") {
		t.Fatalf("error %v, want ErrUnparsed saying the statement ends inside quotes", r.Err())
	}
	if got := recordHeaders(t, k, cfg); len(got) != 0 {
		t.Fatalf("published %v, want nothing (the row would read as -294967296)", got)
	}
}

// DDL under session sql_modes that change how its text reads, each making
// neg INT UNSIGNED on the server; the row after it must publish
// neg=4000000000, not -294967296.
func TestDDLUnderSessionSQLModesKeepsSign(t *testing.T) {
	BrokerOnlyAsSink(t)
	for name, ddl := range map[string][]string{
		// ANSI_QUOTES (also part of ANSI and ORACLE), which the event
		// records: "..." is a name, in which a backslash is a plain
		// character. Read with escapes, "note\" swallowed the ALTER up to
		// the quote inside the later COMMENT '"' (the same column count,
		// neg SIGNED).
		"ANSI_QUOTES": {"SET SESSION sql_mode='ANSI_QUOTES'",
			`ALTER TABLE app.ev ADD COLUMN "note\" VARCHAR(10) NULL, MODIFY neg INT UNSIGNED NOT NULL COMMENT '"'`},
		// The same under ORACLE; VARCHAR2 sends it to the fallback reader.
		"ORACLE backslash": {"SET SESSION sql_mode='ORACLE'",
			`ALTER TABLE app.ev ADD COLUMN "c\" VARCHAR2(10) NULL, MODIFY neg INT UNSIGNED NOT NULL COMMENT '"'`},
		// Held: ORACLE syntax without a backslash, by the fallback reader.
		"ORACLE": {"SET SESSION sql_mode='ORACLE'",
			`ALTER TABLE "app"."ev" ADD COLUMN "extra" VARCHAR2(10) NULL, MODIFY "neg" INT UNSIGNED NOT NULL`},
		// Held: a stored procedure runs, and its DDL is logged, with the
		// sql_mode it was created with, whatever the caller's.
		"procedure": {"SET SESSION sql_mode='NO_BACKSLASH_ESCAPES'",
			`CREATE PROCEDURE app.p() ALTER TABLE app.ev MODIFY event_type VARCHAR(64) NOT NULL COMMENT 'C:\', MODIFY neg INT UNSIGNED NOT NULL`,
			"SET SESSION sql_mode=DEFAULT", "CALL app.p()"},
		// Held: EXECUTE IMMEDIATE parses and logs with the session's mode.
		"EXECUTE IMMEDIATE": {"SET SESSION sql_mode='NO_BACKSLASH_ESCAPES'",
			`EXECUTE IMMEDIATE "ALTER TABLE app.ev MODIFY event_type VARCHAR(64) NOT NULL COMMENT 'C:\', MODIFY neg INT UNSIGNED NOT NULL"`},
	} {
		t.Run(name, func(t *testing.T) {
			got := publishAfterDDL(t, ddl, "neg", "int(10) unsigned", fmt.Sprintf(signsInsert, "1", "4000000000"))
			if want := "neg=4000000000 small=1"; got != want {
				t.Fatalf("published %q, want %q", got, want)
			}
		})
	}
}

// A statement-logged outbox insert behind a SET STATEMENT prefix run under
// NO_BACKSLASH_ESCAPES stops the relay, with source.statement_dml: warn
// too. The failure guarded against: the prefix read with escapes ended at
// the FOR inside default_master_connection's second string, the relay took
// the SELECT there for the statement, warned of it and lost the row.
func TestNoBackslashEscapesSetStatementOutboxInsertStops(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	SetStatementDML(&cfg, "warn")
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	if err := env.DB.Exec("SET SESSION binlog_format = 'STATEMENT'", "SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES'",
		`SET STATEMENT default_master_connection='\', default_master_connection=' FOR SELECT 1 -- ' FOR INSERT INTO `+s.Table()+
			` (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('stmt-nbe', 'alarm', 'dev-n', 'AlarmCreated', '{}')`); err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(time.Minute); err != nil || code != relay.ExitData {
		t.Fatalf("relay on a statement-logged outbox insert behind SET STATEMENT: exit %d %v\n%s", code, err, p.Output())
	}
	if out := p.Output(); !strings.Contains(out, s.Table()) {
		t.Fatalf("the stop does not name the outbox:\n%s", out)
	}
}
