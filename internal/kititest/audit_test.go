//go:build integration

package kititest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// auditReport is the part of `audit --json` the tests read.
type auditReport struct {
	Rows       int  `json:"rows"`
	Records    int  `json:"records"`
	Covered    bool `json:"checkpoint_covers_rows"`
	Published  int  `json:"published"`
	DeadLetter int  `json:"dead_lettered"`
	Clean      bool `json:"clean"`
	// Verdict: clean, pending or mismatch; PendingOldest the oldest
	// pending row's commit time.
	Verdict       string     `json:"verdict"`
	PendingOldest *time.Time `json:"pending_oldest_commit"`
	Missing       ids        `json:"missing"`
	Pending       ids        `json:"pending"`
	Duplicated    ids        `json:"duplicated"`
	Phantom       struct {
		Count   int `json:"count"`
		Records []struct {
			ID    string `json:"id"`
			Topic string `json:"topic"`
		} `json:"records"`
	} `json:"phantom"`
}

type ids struct {
	Count int      `json:"count"`
	IDs   []string `json:"ids"`
}

// auditedPipeline is a running relay that has published the events of
// eventIDs, its checkpoint covering them; it returns the configuration
// file, the configuration and the relay.
func auditedPipeline(t *testing.T, eventIDs ...string) (string, config.Config, *itest.InProcess, *itest.Schema) {
	t.Helper()
	_, s, cfg := env.Pipeline(t)
	path := itest.WriteConfig(t, cfg)
	relay := itest.RunRelay(t, cfg)
	relay.WaitReady(t)
	writeAlarms(t, s, eventIDs...)
	itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
	return path, cfg, relay, s
}

// writeAlarms commits one transaction with an outbox row per event id.
func writeAlarms(t *testing.T, s *itest.Schema, eventIDs ...string) {
	t.Helper()
	ctx := context.Background()
	db := openDB(t, s.Name)
	w, err := outbox.New(s.Table())
	if err != nil {
		t.Fatal(err)
	}
	var evs []outbox.Event
	for _, id := range eventIDs {
		evs = append(evs, outbox.Event{ID: id, AggregateType: "alarm", AggregateID: "device-" + id, Type: "AlarmCreated",
			Payload: []byte(fmt.Sprintf(`{"alarm": %q}`, id))})
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, tx, evs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// runAudit runs `audit --json` over the last hour and returns its exit
// code and report.
func runAudit(t *testing.T, path string, extra ...string) (int, auditReport) {
	t.Helper()
	args := append([]string{"audit", "--config", path, "--since", "1h", "--json"}, extra...)
	stdout, stderr, code := env.CLI(t, args...)
	t.Logf("$ outbox-relay %s -> exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
	// The project's --json convention: one compact document on one line.
	var compact bytes.Buffer
	if strings.Count(stdout, "\n") != 1 || json.Compact(&compact, []byte(stdout)) != nil || compact.String() != strings.TrimSuffix(stdout, "\n") {
		t.Fatalf("audit --json: want one compact JSON document on one line, got %q", stdout)
	}
	var rep auditReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("audit --json: %v in %q", err, stdout)
	}
	return code, rep
}

// produceByHand produces a record with header id to cfg's alarm topic, as
// something other than the relay would.
func produceByHand(t *testing.T, cfg config.Config, id string, headers ...kgo.RecordHeader) {
	t.Helper()
	cl := kgoClient(t, cfg.Kafka.Brokers)
	rec := &kgo.Record{Topic: cfg.Router.TopicPrefix + "alarm", Key: []byte("device-" + id), Value: []byte(`{}`),
		Headers: append([]kgo.RecordHeader{{Key: "id", Value: []byte(id)}}, headers...)}
	if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func TestAuditReportsAHealthyPipelineClean(t *testing.T) {
	path, _, _, _ := auditedPipeline(t, "h1", "h2", "h3")
	code, rep := runAudit(t, path)
	if code != 0 || !rep.Clean || rep.Rows != 3 || rep.Published != 3 || rep.Records != 3 || !rep.Covered {
		t.Fatalf("audit of a healthy pipeline: exit %d, %+v; want 0, 3 rows published once", code, rep)
	}
	if code, out := runCLI(t, nil, "audit", "--config", path, "--since", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)); code != 0 || !strings.Contains(out, "audit: clean") {
		t.Fatalf("audit (text): exit %d", code)
	}
}

func TestAuditNamesARecordWithoutARowAsPhantom(t *testing.T) {
	path, cfg, _, _ := auditedPipeline(t, "p1", "p2")
	produceByHand(t, cfg, "intruder-1")
	code, rep := runAudit(t, path)
	if code != 1 || rep.Clean || rep.Phantom.Count != 1 || len(rep.Phantom.Records) != 1 || rep.Phantom.Records[0].ID != "intruder-1" {
		t.Fatalf("audit after a record produced by hand: exit %d, %+v; want 1 naming phantom intruder-1", code, rep)
	}
	if rep.Published != 2 || rep.Missing.Count != 0 || rep.Duplicated.Count != 0 {
		t.Fatalf("rows: %+v", rep)
	}
	if code, out := runCLI(t, nil, "audit", "--config", path, "--since", "1h"); code != 1 || !strings.Contains(out, "id=intruder-1") {
		t.Fatalf("audit (text) after a phantom: exit %d, want 1 naming it", code)
	}
}

// Rows written while the relay is stopped are pending, never clean: audit
// says how many and when the oldest committed, and exits 75 (try again
// later), apart from a loss (1).
func TestAuditReportsRowsWrittenWhileTheRelayIsStoppedAsPending(t *testing.T) {
	path, _, relay, s := auditedPipeline(t, "s1")
	if err := relay.Stop(); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Second)
	writeAlarms(t, s, "s2", "s3")
	code, rep := runAudit(t, path, "--wait", "1s")
	if code != 75 || rep.Clean || rep.Verdict != "pending" || rep.Covered || rep.Missing.Count != 0 || rep.Published != 1 ||
		rep.Pending.Count != 2 || !slices.Equal(rep.Pending.IDs, []string{"s2", "s3"}) {
		t.Fatalf("audit with the relay stopped: exit %d, %+v; want 75, verdict pending, s2 and s3 pending, none missing", code, rep)
	}
	if rep.PendingOldest == nil || rep.PendingOldest.Before(before.Truncate(time.Second)) || rep.PendingOldest.After(time.Now()) {
		t.Fatalf("pending_oldest_commit %v; want the commit time of s2 and s3 (after %s)", rep.PendingOldest, before)
	}
	code, out := runCLI(t, nil, "audit", "--config", path, "--since", "1h", "--wait", "1s")
	if code != 75 || strings.Contains(out, "audit: clean") ||
		!strings.Contains(out, "audit: pending: 2 rows not yet published, oldest committed at "+rep.PendingOldest.Format(time.RFC3339)) {
		t.Fatalf("audit (text) with the relay stopped: exit %d; want 75 saying what is pending, never clean", code)
	}
}

func TestAuditNamesADuplicateProducedByHand(t *testing.T) {
	path, cfg, _, _ := auditedPipeline(t, "d1", "d2")
	produceByHand(t, cfg, "d2")
	code, rep := runAudit(t, path)
	if code != 1 || rep.Duplicated.Count != 1 || !slices.Equal(rep.Duplicated.IDs, []string{"d2"}) || rep.Phantom.Count != 0 {
		t.Fatalf("audit after a second record of d2: exit %d, %+v; want 1 naming duplicate d2", code, rep)
	}
}

func TestAuditDoesNotCountAReplayedRecordAsDuplicate(t *testing.T) {
	path, cfg, _, _ := auditedPipeline(t, "r1", "r2")
	if code, out := runCLI(t, nil, "replay", "--config", path, "--event-id", "r1", "--yes"); code != 0 || !strings.Contains(out, "published 1 records") {
		t.Fatalf("replay: exit %d", code)
	}
	// And one produced by hand with the header, as a consumer's own re-send would be marked.
	produceByHand(t, cfg, "r2", kgo.RecordHeader{Key: "replayed", Value: []byte(time.Now().UTC().Format(time.RFC3339))})
	code, rep := runAudit(t, path)
	if code != 0 || !rep.Clean || rep.Published != 2 || rep.Records != 4 || rep.Duplicated.Count != 0 {
		t.Fatalf("audit after replays: exit %d, %+v; want 0, 2 published, 4 records, no duplicate", code, rep)
	}
}

func TestAuditCountsADeadLetteredRowAsDeadLetteredNotMissing(t *testing.T) {
	ctx := context.Background()
	_, s, cfg := env.Pipeline(t)
	db := openDB(t, s.Name)
	if _, err := db.Exec("ALTER TABLE outbox ADD COLUMN part INT NOT NULL DEFAULT 0"); err != nil {
		t.Fatal(err)
	}
	// A row for partition 7 of a 3-partition topic goes to the dead-letter topic.
	cfg.Router.OnError = "dead-letter"
	cfg.Router.AdditionalFields = []config.AdditionalField{{Column: "part", Placement: "partition"}}
	path := itest.WriteConfig(t, cfg)
	relay := itest.RunRelay(t, cfg)
	relay.WaitReady(t)
	w, err := outbox.New(s.Table())
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	ev := func(id string, part int) outbox.Event {
		return outbox.Event{ID: id, AggregateType: "alarm", AggregateID: "device-" + id, Type: "AlarmCreated",
			Payload: []byte(`{}`), Extra: map[string]any{"part": part}}
	}
	if _, err := w.Write(ctx, tx, ev("ok1", 0), ev("bad1", 7)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
	code, rep := runAudit(t, path)
	if code != 0 || !rep.Clean || rep.Published != 1 || rep.DeadLetter != 1 || rep.Missing.Count != 0 || rep.Phantom.Count != 0 {
		t.Fatalf("audit with a dead-lettered row: exit %d, %+v; want 0, 1 published, 1 dead-lettered, none missing", code, rep)
	}
}

// A row the committed checkpoint covers whose record is gone from its topic
// (deleted by an operator's DeleteRecords, or by retention shorter than the
// audit's window) is named missing, and audit exits 1.
func TestAuditNamesARowWhoseRecordWasDeletedAsMissing(t *testing.T) {
	path, cfg, _, _ := auditedPipeline(t, "m1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := kgoClient(t, cfg.Kafka.Brokers)
	var gone *itest.Record
	for _, r := range itest.Consume(t, cfg.Kafka.Brokers, cfg.Router.TopicPrefix) {
		if r.ID == "m1" {
			gone = &r
		}
	}
	if gone == nil {
		t.Fatal("no record of m1 was published")
	}
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: gone.Topic, Partition: gone.Partition, At: gone.Offset + 1})
	resp, err := kadm.NewClient(cl).DeleteRecords(ctx, del)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("delete the record of m1: %v", err)
	}
	code, rep := runAudit(t, path)
	if code != 1 || rep.Clean || rep.Missing.Count != 1 || !slices.Equal(rep.Missing.IDs, []string{"m1"}) || rep.Published != 0 {
		t.Fatalf("audit after the record of m1 was deleted: exit %d, %+v; want 1 naming m1 missing", code, rep)
	}
}

// The operator's case: 2,000 rows published, the relay stopped, 1,000 more
// rows written, 100 published records deleted from the output topic
// (DeleteRecords). The rows the committed checkpoint covers whose records
// are gone are missing while the relay is behind (exit 1), not pending; the
// 1,000 past it are pending, the oldest's commit time named; after the
// relay caught up, the 100 are still missing and nothing is pending.
func TestAuditNamesDeletedRecordsMissingWhileTheRelayIsBehind(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	path := itest.WriteConfig(t, cfg)
	relay := itest.RunRelay(t, cfg)
	relay.WaitReady(t)
	ids := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s-%04d", prefix, i))
		}
		return out
	}
	published, later := ids("pub", 2000), ids("later", 1000)
	for i := 0; i < len(published); i += 100 {
		writeAlarms(t, s, published[i:i+100]...)
	}
	itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
	if err := relay.Stop(); err != nil {
		t.Fatal(err)
	}
	laterFrom := time.Now().Add(-time.Second).Truncate(time.Second)
	for i := 0; i < len(later); i += 100 {
		writeAlarms(t, s, later[i:i+100]...)
	}
	gone := deleteFirstRecords(t, cfg, 100)

	code, rep := runAudit(t, path, "--wait", "1s", "--max-ids", "2000")
	if code != 1 || rep.Verdict != "mismatch" || rep.Clean || rep.Covered || rep.Rows != 3000 {
		t.Fatalf("audit with the relay behind: exit %d, verdict %q, %d rows; want 1, mismatch, 3000 rows", code, rep.Verdict, rep.Rows)
	}
	if rep.Missing.Count != 100 || !slices.Equal(rep.Missing.IDs, gone) {
		t.Fatalf("missing %d %v; want the 100 whose records were deleted %v", rep.Missing.Count, rep.Missing.IDs, gone)
	}
	if rep.Pending.Count != 1000 || !slices.Equal(rep.Pending.IDs, later) || rep.Published != 1900 {
		t.Fatalf("pending %d (%d published); want the 1000 written while the relay was stopped, 1900 published", rep.Pending.Count, rep.Published)
	}
	if rep.PendingOldest == nil || rep.PendingOldest.Before(laterFrom) {
		t.Fatalf("pending_oldest_commit %v; want the commit time of the first row written while stopped (after %s)", rep.PendingOldest, laterFrom)
	}
	code, out := runCLI(t, nil, "audit", "--config", path, "--since", "1h", "--wait", "1s")
	if code != 1 || strings.Contains(out, "audit: clean") || !strings.Contains(out, "missing 100") ||
		!strings.Contains(out, "audit: pending: 1000 rows not yet published, oldest committed at") {
		t.Fatalf("audit (text) with the relay behind: exit %d; want 1, missing 100 and what is pending", code)
	}

	relay = itest.RunRelay(t, cfg)
	relay.WaitReady(t)
	itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
	code, rep = runAudit(t, path, "--max-ids", "2000")
	if code != 1 || rep.Verdict != "mismatch" || !rep.Covered || rep.Missing.Count != 100 || !slices.Equal(rep.Missing.IDs, gone) ||
		rep.Pending.Count != 0 || rep.Published != 2900 {
		t.Fatalf("audit once caught up: exit %d, %+v; want 1, the same 100 missing, none pending, 2900 published", code, rep)
	}
}

// deleteFirstRecords deletes the first n records of a partition of cfg's
// alarm topic that holds more than n (DeleteRecords, as an operator or a
// short retention would) and returns their ids, sorted.
func deleteFirstRecords(t *testing.T, cfg config.Config, n int) []string {
	t.Helper()
	byPart := map[int32][]itest.Record{}
	for _, r := range itest.Consume(t, cfg.Kafka.Brokers, cfg.Router.TopicPrefix) {
		byPart[r.Partition] = append(byPart[r.Partition], r)
	}
	for _, recs := range byPart {
		if len(recs) <= n {
			continue
		}
		slices.SortFunc(recs, func(a, b itest.Record) int { return int(a.Offset - b.Offset) })
		del := kadm.Offsets{}
		del.Add(kadm.Offset{Topic: recs[n].Topic, Partition: recs[n].Partition, At: recs[n].Offset})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := kadm.NewClient(kgoClient(t, cfg.Kafka.Brokers)).DeleteRecords(ctx, del)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatalf("delete the first %d records of %s[%d]: %v", n, recs[n].Topic, recs[n].Partition, err)
		}
		var gone []string
		for _, r := range recs[:n] {
			gone = append(gone, r.ID)
		}
		slices.Sort(gone)
		return gone
	}
	t.Fatalf("no partition holds more than %d records", n)
	return nil
}
