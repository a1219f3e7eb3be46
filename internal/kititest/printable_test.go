//go:build integration

package kititest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestCommandsPrintRowDataEscaped: an event id and an aggregate id
// holding CR, LF and escape sequences (a forged "pending" line, a terminal
// title change) are printed by dead-letter list, dead-letter replay and
// replay as escapes, never raw; the records' id header carries the row's
// bytes unchanged (Kafka headers are bytes).
func TestCommandsPrintRowDataEscaped(t *testing.T) {
	ctx := context.Background()
	k, s, cfg := env.Pipeline(t)
	db := openDB(t, s.Name)
	if _, err := db.Exec("ALTER TABLE outbox ADD COLUMN part INT NOT NULL DEFAULT 0"); err != nil {
		t.Fatal(err)
	}
	cfg.Router.OnError = "dead-letter"
	cfg.Router.AdditionalFields = []config.AdditionalField{{Column: "part", Placement: "partition"}}
	path := itest.WriteConfig(t, cfg)
	const (
		deadID = "dl-1\r\n\x1b[2Kpending  forged[0]@0  event_id=innocent"
		goodID = "ok-1\r\x1b[31mred"
		aggID  = "dev\x1b]0;owned\x07"
	)
	relay := itest.RunRelay(t, cfg)
	relay.WaitReady(t)
	w, err := outbox.New(s.Table())
	if err != nil {
		t.Fatal(err)
	}
	ev := func(id string, part int) outbox.Event {
		return outbox.Event{ID: id, AggregateType: "alarm", AggregateID: aggID, Type: "AlarmCreated",
			Payload: []byte(`{}`), Extra: map[string]any{"part": part}}
	}
	tx, _ := db.BeginTx(ctx, nil)
	if _, err := w.Write(ctx, tx, ev(goodID, 0), ev(deadID, 7)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
	if err := relay.Stop(); err != nil {
		t.Fatal(err)
	}
	// The header carries the row's bytes as they are.
	recs := itest.Consume(t, k.Brokers, cfg.Router.TopicPrefix+"alarm")
	if len(recs) != 1 || recs[0].ID != goodID || recs[0].Key != aggID {
		t.Fatalf("published %+v, want one record with id %q and key %q exactly", recs, goodID, aggID)
	}

	raw := func(what, out string) {
		t.Helper()
		if strings.ContainsAny(out, "\r\x1b\x07") {
			t.Errorf("%s printed row data raw (CR, ESC or BEL in its output): %q", what, out)
		}
		if strings.Contains(out, "\npending  forged") {
			t.Errorf("%s printed a forged line: %q", what, out)
		}
	}
	code, out := runCLI(t, nil, "dead-letter", "list", "--config", path)
	if code != 0 || !strings.Contains(out, `event_id=dl-1\r\n\x1b[2Kpending`) {
		t.Fatalf("dead-letter list: exit %d, the event id not shown escaped: %q", code, out)
	}
	raw("dead-letter list", out)
	code, out = runCLI(t, nil, "dead-letter", "replay", "--config", path, "--dry-run")
	if code != 1 && code != 0 {
		t.Fatalf("dead-letter replay --dry-run: exit %d", code)
	}
	raw("dead-letter replay", out)
	if !strings.Contains(out, `dl-1\r\n`) {
		t.Fatalf("dead-letter replay does not name the event id escaped: %q", out)
	}
	code, out = runCLI(t, nil, "replay", "--config", path, "--event-id", goodID, "--dry-run")
	if code != 0 || !strings.Contains(out, `ok-1\r\x1b[31mred`) || !strings.Contains(out, `key=dev\x1b]0;owned\x07`) {
		t.Fatalf("replay --dry-run: exit %d, id or key not shown escaped: %q", code, out)
	}
	raw("replay", out)
}
