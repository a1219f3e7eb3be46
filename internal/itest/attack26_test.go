//go:build integration

package itest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// The same row under binlog_row_metadata NO_LOG and MINIMAL must give the
// same records. timestamp_column names an UNSIGNED integer column (epoch
// seconds shape): the row is bad either way and goes to the dead-letter
// topic, whose "error" header names the value's Go type. 8a63b89 left a
// non-negative value of a known-UNSIGNED column signed under NO_LOG, so
// the header said int16 where MINIMAL says uint16; fixed in f422399.
func TestAttack26DeadLetterErrorHeaderNoLogVsMinimal(t *testing.T) {
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
func TestAttack26DeleteThenInsertKnownLayout(t *testing.T) {
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
func TestAttack26UnknownSignsMixedTransaction(t *testing.T) {
	k, db, cfg := signsPipeline(t, "NO_LOG")
	ctx := context.Background()
	src, err := relay.SourceConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	layout, _, err := binlog.CurrentColumns(ctx, src, db.Addr)
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
