//go:build integration

package itest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/schema"
)

// MariaDB's SET STATEMENT var=value FOR <statement> runs one statement
// with a session variable set for it; the binlog logs the whole text. A
// migration that bounds its metadata-lock wait this way
// (SET STATEMENT lock_wait_timeout=5 FOR ALTER TABLE ...) is valid DDL.
// The framer took it for a statement-logged row change ("make the server
// log rows", which it already did) and stopped, and the schema tracker
// classified it by its SET; the fix the stop gave (`checkpoint skip` of
// the DDL) then published 4000000000 as -294967296. Fixed: both read the
// statement after FOR.
func TestAttack25SetStatementForAlter(t *testing.T) {
	k := StartKafka(t)
	db := startServer(t, map[string]string{"binlog-row-metadata": "NO_LOG"})
	if err := db.Exec(signsDDL); err != nil {
		t.Fatal(err)
	}
	cfg := signsConfig(k, db)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	insertSigned(t, db, "1", "1", "1", "1", "1", "5")
	waitOrStopped(t, r, cfg, Head(t, db))
	if err := db.Exec("SET STATEMENT lock_wait_timeout=5, max_statement_time=(60) FOR ALTER TABLE app.ev MODIFY neg INT UNSIGNED NOT NULL"); err != nil {
		t.Fatal(err)
	}
	if got := attack24sColumnType(t, db, "neg"); got != "int(10) unsigned" {
		t.Fatalf("setup: neg is %s", got)
	}
	insertSigned(t, db, "2", "2", "1", "1", "1", "4000000000")
	waitOrStopped(t, r, cfg, Head(t, db))
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	got := attack24sHeaders(t, k, cfg)
	if got["1"] != "neg=5 small=1" || got["2"] != "neg=4000000000 small=1" {
		t.Fatalf("published %v, want 1: neg=5, 2: neg=4000000000", got)
	}
}

// A prepared statement is parsed with the sql_mode of PREPARE, but logged
// with the session's sql_mode at EXECUTE. PREPARE under
// NO_BACKSLASH_ESCAPES (COMMENT 'C:\' ends at its quote, the server makes
// neg UNSIGNED), EXECUTE after going back to the default mode: the event
// says "escapes on", the tracker reads \' as an escaped quote, the MODIFY
// neg is swallowed by the string, neg stays SIGNED: -294967296.
func TestAttack25PreparedUnderOtherSQLMode(t *testing.T) {
	// Fixed as far as it can be: read with the event's mode the statement
	// ends inside a string, which no statement the server ran does, so the
	// tracker gives the layout up (ErrUnparsed: the relay stops with the
	// fix) rather than read it the wrong way.
	k := StartKafka(t)
	db := startServer(t, map[string]string{"binlog-row-metadata": "NO_LOG"})
	if err := db.Exec(signsDDL); err != nil {
		t.Fatal(err)
	}
	cfg := signsConfig(k, db)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if err := db.Exec("SET SESSION sql_mode='NO_BACKSLASH_ESCAPES'",
		`PREPARE s FROM "ALTER TABLE app.ev MODIFY event_type VARCHAR(64) NOT NULL COMMENT 'C:\', MODIFY neg INT UNSIGNED NOT NULL"`,
		"SET SESSION sql_mode=DEFAULT", "EXECUTE s"); err != nil {
		t.Fatal(err)
	}
	if got := attack24sColumnType(t, db, "neg"); got != "int(10) unsigned" {
		t.Fatalf("setup: neg is %s", got)
	}
	if err := db.Exec(fmt.Sprintf(attack24sInsert, "1", "4000000000")); err != nil {
		t.Fatal(err)
	}
	_ = r.StoppedWith(t)
	if !errors.Is(r.Err(), schema.ErrUnparsed) || !strings.Contains(r.Err().Error(), "ends inside quotes") {
		t.Fatalf("error %v, want ErrUnparsed saying the statement ends inside quotes", r.Err())
	}
	if got := attack24sHeaders(t, k, cfg); len(got) != 0 {
		t.Fatalf("published %v, want nothing (the row would read as -294967296)", got)
	}
}

// ANSI_QUOTES (also part of sql_mode ANSI and ORACLE), which the event
// records too: "..." is an identifier, and a backslash in an identifier is
// a plain character in every mode. The tracker lexes "..." with backslash
// escapes unless NO_BACKSLASH_ESCAPES: "note\" swallows the rest of the
// ALTER up to the quote inside the later COMMENT '"'. The server adds
// note\ and makes neg UNSIGNED; the tracker adds one column (the same
// count) and keeps neg SIGNED: -294967296.
func TestAttack25AnsiQuotesBackslashIdentifier(t *testing.T) {
	got := attack24sRun(t, []string{"SET SESSION sql_mode='ANSI_QUOTES'",
		`ALTER TABLE app.ev ADD COLUMN "note\" VARCHAR(10) NULL, MODIFY neg INT UNSIGNED NOT NULL COMMENT '"'`},
		"neg", "int(10) unsigned", fmt.Sprintf(attack24sInsert, "1", "4000000000"))
	if want := "neg=4000000000 small=1"; got != want {
		t.Fatalf("published %q, want %q", got, want)
	}
}

// The same under sql_mode=ORACLE (which includes ANSI_QUOTES): VARCHAR2
// sends the ALTER to the fallback reader, "c\" swallows MODIFY neg ...
// UNSIGNED.
func TestAttack25OracleModeBackslashIdentifier(t *testing.T) {
	got := attack24sRun(t, []string{"SET SESSION sql_mode='ORACLE'",
		`ALTER TABLE app.ev ADD COLUMN "c\" VARCHAR2(10) NULL, MODIFY neg INT UNSIGNED NOT NULL COMMENT '"'`},
		"neg", "int(10) unsigned", fmt.Sprintf(attack24sInsert, "1", "4000000000"))
	if want := "neg=4000000000 small=1"; got != want {
		t.Fatalf("published %q, want %q", got, want)
	}
}

// Held: a stored procedure runs with the sql_mode it was created with, and
// its DDL is logged with that mode: created under NO_BACKSLASH_ESCAPES,
// called from a default-mode session, neg is tracked UNSIGNED.
func TestAttack25HeldProcedureOwnSQLMode(t *testing.T) {
	got := attack24sRun(t, []string{"SET SESSION sql_mode='NO_BACKSLASH_ESCAPES'",
		`CREATE PROCEDURE app.p() ALTER TABLE app.ev MODIFY event_type VARCHAR(64) NOT NULL COMMENT 'C:\', MODIFY neg INT UNSIGNED NOT NULL`,
		"SET SESSION sql_mode=DEFAULT", "CALL app.p()"},
		"neg", "int(10) unsigned", fmt.Sprintf(attack24sInsert, "1", "4000000000"))
	if want := "neg=4000000000 small=1"; got != want {
		t.Fatalf("published %q, want %q", got, want)
	}
}

// Held: sql_mode=ORACLE syntax (double-quoted names, VARCHAR2) without a
// backslash is followed by the fallback reader.
func TestAttack25HeldOracleModeAlter(t *testing.T) {
	got := attack24sRun(t, []string{"SET SESSION sql_mode='ORACLE'",
		`ALTER TABLE "app"."ev" ADD COLUMN "extra" VARCHAR2(10) NULL, MODIFY "neg" INT UNSIGNED NOT NULL`},
		"neg", "int(10) unsigned", fmt.Sprintf(attack24sInsert, "1", "4000000000"))
	if want := "neg=4000000000 small=1"; got != want {
		t.Fatalf("published %q, want %q", got, want)
	}
}

// Held: EXECUTE IMMEDIATE parses and logs with the session's mode.
func TestAttack25HeldExecuteImmediateNoBackslashEscapes(t *testing.T) {
	got := attack24sRun(t, []string{"SET SESSION sql_mode='NO_BACKSLASH_ESCAPES'",
		`EXECUTE IMMEDIATE "ALTER TABLE app.ev MODIFY event_type VARCHAR(64) NOT NULL COMMENT 'C:\', MODIFY neg INT UNSIGNED NOT NULL"`},
		"neg", "int(10) unsigned", fmt.Sprintf(attack24sInsert, "1", "4000000000"))
	if want := "neg=4000000000 small=1"; got != want {
		t.Fatalf("published %q, want %q", got, want)
	}
}
