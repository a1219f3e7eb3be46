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
	k, db, cfg := signsPipeline(t, "NO_LOG")
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
	k, db, cfg := signsPipeline(t, "NO_LOG")
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

// DDL under session sql_modes that change how its text reads, each making
// neg INT UNSIGNED on the server; the row after it must publish
// neg=4000000000, not -294967296.
func TestAttack25SQLModes(t *testing.T) {
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
			got := attack24sRun(t, ddl, "neg", "int(10) unsigned", fmt.Sprintf(attack24sInsert, "1", "4000000000"))
			if want := "neg=4000000000 small=1"; got != want {
				t.Fatalf("published %q, want %q", got, want)
			}
		})
	}
}
