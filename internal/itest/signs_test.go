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
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/relay"
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
	k, db, cfg := signsPipeline(t, "NO_LOG")
	ctx := context.Background()
	src, err := relay.SourceConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	layout, signs, err := binlog.CurrentColumns(ctx, src, db.Addr)
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
