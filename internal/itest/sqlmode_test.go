//go:build integration

package itest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
)

// attack24sHeaders returns the "neg" and "small" headers of the records,
// by event id.
func attack24sHeaders(t *testing.T, k *Kafka, cfg config.Config) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, r := range Consume(t, k.Brokers, cfg.Router.TopicPrefix) {
		out[r.ID] = "neg=" + r.Headers["neg"] + " small=" + r.Headers["small"]
	}
	return out
}

// attack24sColumnType is the server's COLUMN_TYPE of app.ev's column c.
func attack24sColumnType(t *testing.T, db *devdb.Server, c string) string {
	t.Helper()
	rows, err := db.Query("SELECT COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA='app' AND TABLE_NAME='ev' AND COLUMN_NAME='" + c + "'")
	if err != nil || len(rows) != 1 {
		t.Fatalf("column type of %s: %v %v", c, rows, err)
	}
	return rows[0][0]
}

// attack24sRun starts the relay on app.ev (signsDDL) of a NO_LOG server,
// runs ddl in one session (so SET SESSION applies to it), inserts the
// row and returns what was published for it.
func attack24sRun(t *testing.T, ddl []string, col, wantType string, insert string) string {
	t.Helper()
	k, db, cfg := signsPipeline(t, "NO_LOG")
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if err := db.Exec(ddl...); err != nil {
		t.Fatal(err)
	}
	if got := attack24sColumnType(t, db, col); got != wantType {
		t.Fatalf("setup: the server has %s %s, want %s", col, got, wantType)
	}
	if err := db.Exec(insert); err != nil {
		t.Fatal(err)
	}
	waitOrStopped(t, r, cfg, Head(t, db))
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	return attack24sHeaders(t, k, cfg)["1"]
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

const attack24sInsert = "INSERT INTO app.ev (event_id, aggregate_type, aggregate_id, event_type, payload, tiny, small, med, neg) " +
	"VALUES (1, 'alarm', 1, 'X', '{}', 1, %s, 1, %s)"

// An application (or a migration tool) whose session runs with sql_mode
// NO_BACKSLASH_ESCAPES alters the outbox: a Windows path in a comment ends
// in a backslash. The server reads COMMENT 'C:\' as a complete string and
// makes neg UNSIGNED; the tracker reads \' as an escaped quote, never sees
// the MODIFY neg, keeps neg SIGNED, and publishes 4000000000 as
// -294967296 (no error, no warning: the column list did not change).
func TestAttack24sNoBackslashEscapesAlterPublishesWrongSign(t *testing.T) {
	got := attack24sRun(t, []string{"SET SESSION sql_mode='NO_BACKSLASH_ESCAPES'",
		`ALTER TABLE app.ev MODIFY event_type VARCHAR(64) NOT NULL COMMENT 'C:\', MODIFY neg INT UNSIGNED NOT NULL`},
		"neg", "int(10) unsigned", fmt.Sprintf(attack24sInsert, "1", "4000000000"))
	if want := "neg=4000000000 small=1"; got != want {
		t.Fatalf("published %q, want %q", got, want)
	}
}

// The other direction: with NO_BACKSLASH_ESCAPES the tracker reads the
// word UNSIGNED inside the next column's comment as an attribute of the
// previous column. The server makes small SIGNED (it was UNSIGNED); the
// tracker keeps it UNSIGNED and publishes -1 as 65535.
func TestAttack24sNoBackslashEscapesCommentInventsUnsigned(t *testing.T) {
	got := attack24sRun(t, []string{"SET SESSION sql_mode='NO_BACKSLASH_ESCAPES'",
		`ALTER TABLE app.ev MODIFY small SMALLINT NOT NULL COMMENT 'x\', MODIFY neg INT NOT NULL COMMENT ' UNSIGNED'`},
		"small", "smallint(6)", fmt.Sprintf(attack24sInsert, "-1", "-5"))
	if want := "neg=-5 small=-1"; got != want {
		t.Fatalf("published %q, want %q", got, want)
	}
}

// Held: MariaDB ignores versioned comments of MySQL 5.7+ versions
// (/*!50700 */ to /*!99999 */) and those above its own version, and the
// tracker (lex) would run every executable comment as code, tracking neg
// UNSIGNED. It does not matter end to end because the server patches an
// ignored comment into a plain one before it is logged ("/* 50700
// UNSIGNED */" in the binlog), so -5 stays -5. Guards that reliance.
func TestAttack24sHeldMySQLVersionedCommentIgnoredByMariaDB(t *testing.T) {
	got := attack24sRun(t, []string{"ALTER TABLE app.ev MODIFY neg INT NOT NULL /*!50700 UNSIGNED */"},
		"neg", "int(11)", fmt.Sprintf(attack24sInsert, "1", "-5"))
	if want := "neg=-5 small=1"; got != want {
		t.Fatalf("published %q, want %q", got, want)
	}
}

// A relay upgraded with an XA transaction prepared (with outbox rows) and
// its checkpoint from the version before (a layout, no `unsigned`) resumes
// from the XA's Resume position with the XA layout, signedness unknown;
// the prepared row holds a negative value in a signed column (neg INT =
// -5), so it stops with ErrNoSignedness, as documented. The documented fix,
// `checkpoint set --gtid <the checkpoint's set> --schema server`, writes
// the server's signedness into the checkpoint but keeps the XA state as it
// was (same position): the relay reads from the XA's Resume with the XA's
// layout, signedness still unknown, and stops again, for good (the only
// way on is a position that forgets the prepared transaction and its row).
func TestAttack24sSchemaServerFixIgnoredAtXAResume(t *testing.T) {
	k, db, cfg := signsPipeline(t, "NO_LOG")
	path := WriteConfig(t, cfg)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	xid := "a24s"
	if err := db.Exec("XA START '"+xid+"'", fmt.Sprintf(attack24sInsert, "1", "-5"), "XA END '"+xid+"'", "XA PREPARE '"+xid+"'"); err != nil {
		t.Fatal(err)
	}
	insertSigned(t, db, "2", "2", "1", "1", "1", "7")
	cp := WaitCheckpoint(t, cfg, Head(t, db), time.Minute)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if !cp.Replays() {
		t.Fatalf("setup: the checkpoint does not resume before the prepared XA: %+v", cp.XA)
	}
	// The checkpoint as the version before this change wrote it.
	cp.Unsigned, cp.XA.Unsigned = nil, nil
	ctx := context.Background()
	if err := Store(t, cfg).Write(ctx, cfg.Name, cfg.Kafka.TransactionLanes, cp); err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("XA COMMIT '" + xid + "'"); err != nil {
		t.Fatal(err)
	}
	r = RunRelay(t, cfg)
	_ = r.StoppedWith(t)
	if !errors.Is(r.Err(), binlog.ErrNoSignedness) {
		t.Fatalf("setup: the upgraded relay stopped with %v, want ErrNoSignedness", r.Err())
	}
	// The fix the error message gives.
	_, errOut, code := env.CLI(t, "checkpoint", "set", "--gtid", cp.GTIDSet, "--schema", "server", "--force", "--yes", "--config", path)
	if code != 0 {
		t.Fatalf("checkpoint set: exit %d: %s", code, errOut)
	}
	r = RunRelay(t, cfg)
	defer r.Stop()
	waitOrStopped(t, r, cfg, Head(t, db))
	got := attack24sHeaders(t, k, cfg)
	if got["1"] != "neg=-5 small=1" || got["2"] != "neg=7 small=1" {
		t.Fatalf("published %v, want 1: neg=-5, 2: neg=7", got)
	}
}

// Held: the server switches binlog_row_metadata at runtime (SET GLOBAL)
// from FULL (the tracker learns signedness from the table maps) to NO_LOG
// after a signedness-only ALTER made under FULL, across a restart, and
// back: every value keeps its sign.
func TestAttack24sHeldRowMetadataSwitchedAtRuntime(t *testing.T) {
	k, db, cfg := signsPipeline(t, "FULL")
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	insertSigned(t, db, "1", "4000000000", "1", "65535", "1", "-5")
	waitOrStopped(t, r, cfg, Head(t, db))
	if err := db.Exec("DELETE FROM app.ev", "ALTER TABLE app.ev MODIFY neg INT UNSIGNED NOT NULL, MODIFY small SMALLINT NOT NULL",
		"SET GLOBAL binlog_row_metadata=NO_LOG"); err != nil {
		t.Fatal(err)
	}
	insertSigned(t, db, "2", "4000000001", "1", "-1", "1", "4000000000")
	waitOrStopped(t, r, cfg, Head(t, db))
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	insertSigned(t, db, "3", "4000000002", "1", "-2", "1", "3000000000")
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	waitOrStopped(t, r, cfg, Head(t, db))
	if err := db.Exec("SET GLOBAL binlog_row_metadata=FULL", "DELETE FROM app.ev", "ALTER TABLE app.ev MODIFY neg INT NOT NULL",
		"SET GLOBAL binlog_row_metadata=NO_LOG"); err != nil {
		t.Fatal(err)
	}
	insertSigned(t, db, "4", "4000000003", "1", "-3", "1", "-7")
	waitOrStopped(t, r, cfg, Head(t, db))
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	got := attack24sHeaders(t, k, cfg)
	want := map[string]string{"1": "neg=-5 small=65535", "2": "neg=4000000000 small=-1", "3": "neg=3000000000 small=-2", "4": "neg=-7 small=-3"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("published %v\nwant %v", got, want)
	}
}
