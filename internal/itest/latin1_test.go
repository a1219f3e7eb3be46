//go:build integration

package itest

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// latin1Outbox has a latin1 TEXT payload and a latin1 aggregate id.
const latin1Outbox = `CREATE TABLE %s.l1outbox (
	id             BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
	event_id       VARCHAR(64)  NOT NULL,
	aggregate_type VARCHAR(64)  NOT NULL,
	aggregate_id   VARCHAR(64)  CHARACTER SET latin1 NOT NULL,
	event_type     VARCHAR(64)  NOT NULL,
	payload        TEXT         CHARACTER SET latin1 NOT NULL,
	created_at     DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE=InnoDB`

// A latin1 TEXT payload holding non-ASCII bytes (ü is 0xFC, € 0x80) is
// published as its bytes exactly as stored, whatever binlog_row_metadata
// (FULL names the column's character set, NO_LOG does not), and replay
// publishes the same bytes. The aggregate id, a latin1 key, becomes UTF-8
// text (with FULL, which names its character set). The envelope embeds the
// payload's text converted to UTF-8, JSON being UTF-8. Before, the relay
// published the payload converted to UTF-8 with FULL or MINIMAL metadata
// and as stored with NO_LOG, and replay (reading through the connection's
// utf8mb4) converted it.
func TestLatin1PayloadPublishedAsStored(t *testing.T) {
	BrokerOnlyAsSink(t)
	for _, md := range []string{"FULL", "NO_LOG"} {
		t.Run(md, func(t *testing.T) {
			k := StartKafka(t)
			// The key: NO_LOG does not say the column is latin1, and
			// non-ASCII latin1 text is not UTF-8 (a bad row as a key).
			db, name, key, wantKey := env.DB, env.NewSchema(t).Name, "CONVERT(_utf8mb4'Zürich' USING latin1)", "Zürich"
			if md != "FULL" {
				db, name, key, wantKey = startServer(t, map[string]string{"binlog-row-metadata": md}), "app", "'zurich'", "zurich"
			}
			if err := db.Exec(fmt.Sprintf(latin1Outbox, name)); err != nil {
				t.Fatal(err)
			}
			table := name + ".l1outbox"
			plain := env.RelayConfig(k, table)
			plain.Source.Hosts = []string{db.Addr}
			envelope := env.RelayConfig(k, table)
			envelope.Source.Hosts = []string{db.Addr}
			envelope.Router.ValueFormat = "envelope"
			rp, re := RunRelay(t, plain), RunRelay(t, envelope)
			rp.WaitReady(t)
			re.WaitReady(t)
			if err := db.Exec(fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES "+
				"('l1-1', 'order', %s, 'Placed', CONVERT(_utf8mb4'{\"city\":\"Zürich\",\"price\":\"€5\"}' USING latin1))", table, key)); err != nil {
				t.Fatal(err)
			}
			rows, err := db.Query("SELECT HEX(payload) FROM " + table)
			if err != nil || len(rows) != 1 {
				t.Fatalf("read payload: %v %v", rows, err)
			}
			stored, err := hex.DecodeString(rows[0][0])
			if err != nil || !strings.Contains(string(stored), "Z\xfcrich") || !strings.Contains(string(stored), "\x805") {
				t.Fatalf("stored payload %q (%v): want latin1 bytes", stored, err)
			}
			head := Head(t, db)
			WaitCheckpoint(t, plain, head, time.Minute)
			recs := Consume(t, k.Brokers, plain.Router.TopicPrefix)
			if len(recs) != 1 || string(recs[0].Value) != string(stored) {
				t.Fatalf("records %+v, want one with the payload's bytes as stored %q", recs, stored)
			}
			if recs[0].Key != wantKey {
				t.Fatalf("key %q, want the latin1 aggregate id as UTF-8 %q", recs[0].Key, wantKey)
			}

			if md == "FULL" {
				WaitCheckpoint(t, envelope, head, time.Minute)
				env := Consume(t, k.Brokers, envelope.Router.TopicPrefix)
				if len(env) != 1 || !strings.Contains(string(env[0].Value), `"payload":{"city":"Zürich","price":"€5"}}`) {
					t.Fatalf("envelope records %+v, want the payload's text in UTF-8", env)
				}
			} else {
				// NO_LOG: the binlog does not say the column is latin1.
				err := re.StoppedWith(t)
				if err == nil || !strings.Contains(err.Error(), "payload is not UTF-8 text") || !strings.Contains(err.Error(), "binlog_row_metadata") {
					t.Fatalf("envelope relay stopped with %v, want a bad row naming binlog_row_metadata", err)
				}
			}

			if err := rp.Stop(); err != nil {
				t.Fatal(err)
			}
			replayed := replayOnce(t, k, plain, "l1-1")
			if len(replayed) != 1 || string(replayed[0].Value) != string(stored) || replayed[0].Key != wantKey {
				t.Fatalf("replayed %+v, want key %q and the payload's bytes as stored %q", replayed, wantKey, stored)
			}
		})
	}
}

// replayOnce runs `replay --event-id id` for cfg and returns the records it
// published (those with the replayed header).
func replayOnce(t *testing.T, k *Kafka, cfg config.Config, id string) []Record {
	t.Helper()
	if out, errOut, code := env.CLI(t, "replay", "--config", WriteConfig(t, cfg), "--event-id", id, "--yes"); code != 0 {
		t.Fatalf("replay: exit %d\n%s%s", code, out, errOut)
	}
	// A read_committed reader sees the replayed record once the broker has
	// written the commit's marker to its partition, after replay returned.
	var got []Record
	Eventually(t, 30*time.Second, func() error {
		got = got[:0]
		for _, r := range Consume(t, k.Brokers, cfg.Router.TopicPrefix) {
			if _, ok := r.Headers["replayed"]; ok {
				got = append(got, r)
			}
		}
		if len(got) == 0 {
			return fmt.Errorf("no replayed record of %s visible", id)
		}
		return nil
	})
	return got
}
