//go:build integration

package itest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/source"
)

// signsDDL is an outbox whose event id and aggregate id are integers, as
// ORMs make them (Laravel's id() is BIGINT UNSIGNED, increments() INT
// UNSIGNED), with more integer columns copied into headers.
const signsDDL = `CREATE TABLE app.ev (
	id             INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
	event_id       BIGINT UNSIGNED NOT NULL,
	aggregate_type VARCHAR(64) NOT NULL,
	aggregate_id   INT(10) UNSIGNED ZEROFILL NOT NULL, -- ZEROFILL: display only, the binlog holds the number
	event_type     VARCHAR(64) NOT NULL,
	payload        JSON NOT NULL,
	tiny           TINYINT UNSIGNED NOT NULL,
	small          SMALLINT UNSIGNED NOT NULL,
	med            MEDIUMINT UNSIGNED NOT NULL,
	neg            INT NOT NULL
) ENGINE=InnoDB`

// signsPipeline starts Kafka and a server with binlog_row_metadata as
// metadata holding app.ev (signsDDL), and a relay configuration for it.
func signsPipeline(t *testing.T, metadata string) (*Kafka, *devdb.Server, config.Config) {
	t.Helper()
	k := StartKafka(t)
	db := startServer(t, map[string]string{"binlog-row-metadata": metadata})
	if err := db.Exec(signsDDL); err != nil {
		t.Fatal(err)
	}
	return k, db, signsConfig(k, db)
}

func signsConfig(k *Kafka, db *devdb.Server) config.Config {
	cfg := env.RelayConfig(k, "app.ev")
	cfg.Source.Hosts = []string{db.Addr}
	for _, c := range []string{"tiny", "small", "med", "neg"} {
		cfg.Router.AdditionalFields = append(cfg.Router.AdditionalFields, config.AdditionalField{Column: c, Placement: "header"})
	}
	return cfg
}

// insertSigned writes one outbox row of app.ev.
func insertSigned(t *testing.T, db *devdb.Server, eventID, aggID, tiny, small, med, neg string) {
	t.Helper()
	if err := db.Exec(fmt.Sprintf("INSERT INTO app.ev (event_id, aggregate_type, aggregate_id, event_type, payload, tiny, small, med, neg) "+
		"VALUES (%s, 'alarm', %s, 'X', '{}', %s, %s, %s, %s)", eventID, aggID, tiny, small, med, neg)); err != nil {
		t.Fatal(err)
	}
}

type signedRecord struct{ id, key, tiny, small, med, neg string }

func requireSigned(t *testing.T, k *Kafka, cfg config.Config, want []signedRecord) {
	t.Helper()
	recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
	var got []signedRecord
	for _, r := range recs {
		got = append(got, signedRecord{r.ID, r.Key, r.Headers["tiny"], r.Headers["small"], r.Headers["med"], r.Headers["neg"]})
	}
	// Records of several partitions: compare in event id order.
	slices.SortFunc(got, func(a, b signedRecord) int { return strings.Compare(a.id, b.id) })
	slices.SortFunc(want, func(a, b signedRecord) int { return strings.Compare(a.id, b.id) })
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("records (id key tiny small med neg)\n got %v\nwant %v", got, want)
	}
}

// binlog_row_metadata=NO_LOG (MariaDB's default): table maps do not say
// which integer columns are UNSIGNED. The relay reads them as the tables
// define them: from the server's definitions at `now`, through DDL that
// changes signedness, and from its checkpoint across a restart; values past
// the signed range keep their value (4000000000 is not -294967296).
func TestUnsignedIntegersWithoutSignedness(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, db, cfg := signsPipeline(t, "NO_LOG")
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	insertSigned(t, db, "18446744073709551615", "4000000000", "200", "65535", "16777215", "-5")
	insertSigned(t, db, "1", "7", "1", "2", "3", "-2147483648")
	WaitCheckpoint(t, cfg, Head(t, db), time.Minute)
	// The DDL changes signedness only (the table map is the same as
	// before); the rows go first (pruned), as their values would not fit.
	if err := db.Exec("DELETE FROM app.ev", "ALTER TABLE app.ev MODIFY neg INT UNSIGNED NOT NULL, MODIFY tiny TINYINT NOT NULL"); err != nil {
		t.Fatal(err)
	}
	insertSigned(t, db, "9223372036854775808", "2147483648", "-128", "32768", "8388608", "4294967295")
	cp := WaitCheckpoint(t, cfg, Head(t, db), time.Minute)
	if got := strings.Join(cp.Unsigned["app.ev"], ","); got != "id,event_id,aggregate_id,small,med,neg" {
		t.Fatalf("checkpoint's unsigned columns %q", got)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	// Down: the next row is read after a restart, with the checkpoint's signedness.
	insertSigned(t, db, "18446744073709551614", "4294967295", "-1", "40000", "9000000", "3000000000")
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	WaitCheckpoint(t, cfg, Head(t, db), time.Minute)
	requireSigned(t, k, cfg, []signedRecord{
		{"18446744073709551615", "4000000000", "200", "65535", "16777215", "-5"},
		{"1", "7", "1", "2", "3", "-2147483648"},
		{"9223372036854775808", "2147483648", "-128", "32768", "8388608", "4294967295"},
		{"18446744073709551614", "4294967295", "-1", "40000", "9000000", "3000000000"},
	})
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// A checkpoint with a layout but no signedness (written before the relay
// tracked it): a negative value in an integer column is either that or a
// large UNSIGNED one, so the relay stops there with ErrNoSignedness,
// publishing nothing of it (a deleted row's values, never published, do
// not stop it); once the checkpoint records the definitions
// (`checkpoint set --schema server` does) it publishes the row right.
func TestUnknownSignednessStops(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, db, cfg := signsPipeline(t, "NO_LOG")
	ctx := context.Background()
	src, err := clients.Source(cfg)
	if err != nil {
		t.Fatal(err)
	}
	layout, signs, err := source.CurrentColumns(ctx, src, db.Addr)
	if err != nil {
		t.Fatal(err)
	}
	insertSigned(t, db, "3", "3", "1", "2", "3", "-4") // before the checkpoint, pruned after it
	cp := &checkpoint.Checkpoint{Name: cfg.Name, GTIDSet: Head(t, db), Flavor: "mariadb", Time: time.Now().UTC(), Schema: layout}
	if err := Store(t, cfg).EnsureTopic(ctx, kadmFor(t, k), 1); err != nil {
		t.Fatal(err)
	}
	if err := Store(t, cfg).Write(ctx, cfg.Name, cfg.Kafka.TransactionLanes, cp); err != nil {
		t.Fatal(err)
	}
	// A pruned row's values are not published: its negative neg does not stop the relay.
	if err := db.Exec("DELETE FROM app.ev WHERE event_id = 3"); err != nil {
		t.Fatal(err)
	}
	insertSigned(t, db, "5", "6", "1", "2", "3", "4") // no negative value: nothing to tell apart
	insertSigned(t, db, "7", "4000000000", "1", "2", "3", "4")
	r := RunRelay(t, cfg)
	_ = r.StoppedWith(t)
	if !errors.Is(r.Err(), binlog.ErrNoSignedness) || !strings.Contains(r.Err().Error(), "aggregate_id holds -294967296, or 4000000000") {
		t.Fatalf("error %v, want ErrNoSignedness naming the column and both readings", r.Err())
	}
	requireSigned(t, k, cfg, []signedRecord{{"5", "6", "1", "2", "3", "4"}})
	cp, err = Store(t, cfg).Load(ctx, cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	cp.Unsigned = signs
	if err := Store(t, cfg).Write(ctx, cfg.Name, cfg.Kafka.TransactionLanes, cp); err != nil {
		t.Fatal(err)
	}
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	WaitCheckpoint(t, cfg, Head(t, db), time.Minute)
	requireSigned(t, k, cfg, []signedRecord{{"5", "6", "1", "2", "3", "4"}, {"7", "4000000000", "1", "2", "3", "4"}})
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// checkpoint set --schema server applies also where the relay resumes at a
// pending XA transaction. The failure guarded against: a relay upgraded
// with an XA transaction prepared (with outbox rows) and its checkpoint
// from the version before (a layout, no `unsigned`) resumes from the XA's
// Resume position with the XA layout, signedness unknown; the prepared row
// holds a negative value in a signed column (neg INT = -5), so it stops
// with ErrNoSignedness, as documented. The documented fix, `checkpoint set
// --gtid <the checkpoint's set> --schema server`, writes the server's
// signedness into the checkpoint but keeps the XA state as it was (same
// position): the relay reads from the XA's Resume with the XA's layout,
// signedness still unknown, and stops again, for good (the only way on is a
// position that forgets the prepared transaction and its row).
func TestSchemaServerFixAppliesAtXAResume(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, db, cfg := signsPipeline(t, "NO_LOG")
	path := WriteConfig(t, cfg)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	xid := "a24s"
	if err := db.Exec("XA START '"+xid+"'", fmt.Sprintf(signsInsert, "1", "-5"), "XA END '"+xid+"'", "XA PREPARE '"+xid+"'"); err != nil {
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
	got := recordHeaders(t, k, cfg)
	if got["1"] != "neg=-5 small=1" || got["2"] != "neg=7 small=1" {
		t.Fatalf("published %v, want 1: neg=-5, 2: neg=7", got)
	}
}

// The server switches binlog_row_metadata at runtime (SET GLOBAL)
// from FULL (the tracker learns signedness from the table maps) to NO_LOG
// after a signedness-only ALTER made under FULL, across a restart, and
// back: every value keeps its sign.
func TestRowMetadataSwitchedAtRuntimeKeepsSigns(t *testing.T) {
	BrokerOnlyAsSink(t)
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
	got := recordHeaders(t, k, cfg)
	want := map[string]string{"1": "neg=-5 small=65535", "2": "neg=4000000000 small=-1", "3": "neg=3000000000 small=-2", "4": "neg=-7 small=-3"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("published %v\nwant %v", got, want)
	}
}

// The same row under binlog_row_metadata NO_LOG and MINIMAL must give the
// same records. timestamp_column names an UNSIGNED integer column (epoch
// seconds shape): the row is bad either way and goes to the dead-letter
// topic, whose "error" header names the value's Go type: a non-negative
// value of a known-UNSIGNED column is unsigned under NO_LOG too (uint16
// under both, never int16 under NO_LOG).
func TestDeadLetterErrorHeaderSameUnderNoLogAndMinimal(t *testing.T) {
	BrokerOnlyAsSink(t)
	got := map[string]string{}
	for _, md := range []string{"NO_LOG", "MINIMAL"} {
		k, db, cfg := signsPipeline(t, md)
		cfg.Router.TimestampColumn = "small"
		cfg.Router.OnError = "dead-letter"
		cfg.Router.DeadLetterTopic = cfg.Router.TopicPrefix + "dead-letter"
		r := RunRelay(t, cfg)
		r.WaitReady(t)
		insertSigned(t, db, "1", "7", "1", "2", "3", "4")
		WaitCheckpoint(t, cfg, Head(t, db), time.Minute)
		for _, rec := range Consume(t, k.Brokers, cfg.Router.TopicPrefix) {
			if rec.Topic == cfg.Router.DeadLetterTopic {
				e := rec.Headers["error"]
				if i := strings.Index(e, "): "); i >= 0 {
					e = e[i+3:] // past the gtid
				}
				got[md] = e + " | value " + string(rec.Value)
			}
		}
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
		if got[md] == "" {
			t.Fatalf("%s: no dead-letter record", md)
		}
	}
	if got["NO_LOG"] != got["MINIMAL"] {
		t.Fatalf("dead-letter record of the same row differs:\n NO_LOG:  %s\n MINIMAL: %s", got["NO_LOG"], got["MINIMAL"])
	}
}

// DELETE (negative value in a column of unknown signedness: not published)
// then INSERT in one transaction: the INSERT with a negative value must
// still stop the relay, and one with non-negative values publish exactly.
// Covered by TestUnknownSignednessStops for the stop; here the mixed
// transaction under a known layout publishes the server's values.
func TestDeleteThenInsertKnownLayoutPublishesServerValues(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, db, cfg := signsPipeline(t, "NO_LOG")
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	insertSigned(t, db, "5", "5", "250", "65000", "16000000", "-9")
	if err := db.Exec("BEGIN",
		"DELETE FROM app.ev WHERE event_id = 5",
		"INSERT INTO app.ev (event_id, aggregate_type, aggregate_id, event_type, payload, tiny, small, med, neg) VALUES (6, 'alarm', 4294967295, 'X', '{}', 255, 7, 8388608, -1)",
		"UPDATE app.ev SET tiny = 200 WHERE event_id = 6",
		"COMMIT"); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, db), time.Minute)
	requireSigned(t, k, cfg, []signedRecord{
		{"5", "5", "250", "65000", "16000000", "-9"},
		{"6", "4294967295", "255", "7", "8388608", "-1"},
	})
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// Unknown signedness (checkpoint layout without it): in one transaction an
// INSERT, an UPDATE of it to a negative value, its DELETE, and a second
// INSERT with non-negative values publish both inserts as inserted; a later
// INSERT with a negative value (a large UNSIGNED one) stops the relay and
// publishes nothing of it.
func TestUnknownSignednessMixedTransaction(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, db, cfg := signsPipeline(t, "NO_LOG")
	ctx := context.Background()
	src, err := clients.Source(cfg)
	if err != nil {
		t.Fatal(err)
	}
	layout, _, err := source.CurrentColumns(ctx, src, db.Addr)
	if err != nil {
		t.Fatal(err)
	}
	cp := &checkpoint.Checkpoint{Name: cfg.Name, GTIDSet: Head(t, db), Flavor: "mariadb", Time: time.Now().UTC(), Schema: layout}
	if err := Store(t, cfg).EnsureTopic(ctx, kadmFor(t, k), 1); err != nil {
		t.Fatal(err)
	}
	if err := Store(t, cfg).Write(ctx, cfg.Name, cfg.Kafka.TransactionLanes, cp); err != nil {
		t.Fatal(err)
	}
	ins := "INSERT INTO app.ev (event_id, aggregate_type, aggregate_id, event_type, payload, tiny, small, med, neg) VALUES "
	if err := db.Exec("BEGIN",
		ins+"(1, 'alarm', 7, 'X', '{}', 1, 2, 3, 4)",
		"UPDATE app.ev SET neg = -1, aggregate_id = 4000000000 WHERE event_id = 1",
		"DELETE FROM app.ev WHERE event_id = 1",
		ins+"(2, 'alarm', 8, 'X', '{}', 1, 2, 3, 5)",
		"COMMIT"); err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("BEGIN", ins+"(3, 'alarm', 9, 'X', '{}', 1, 2, 3, 6)", "DELETE FROM app.ev WHERE event_id = 2",
		ins+"(4, 'alarm', 4000000000, 'X', '{}', 1, 2, 3, 6)", "COMMIT"); err != nil {
		t.Fatal(err)
	}
	r := RunRelay(t, cfg)
	_ = r.StoppedWith(t)
	if !errors.Is(r.Err(), binlog.ErrNoSignedness) {
		t.Fatalf("error %v, want ErrNoSignedness", r.Err())
	}
	requireSigned(t, k, cfg, []signedRecord{{"1", "7", "1", "2", "3", "4"}, {"2", "8", "1", "2", "3", "5"}})
}
