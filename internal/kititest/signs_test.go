//go:build integration

package kititest

import (
	"context"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/itest"
)

// TestCheckpointSetRecordsSignedness: `checkpoint set --schema server`
// stores which captured columns are UNSIGNED with the layout (the relay
// reads rows without signedness in the binlog with them) and says so;
// `--schema keep` of a checkpoint that has none says it is unknown.
func TestCheckpointSetRecordsSignedness(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	db := openDB(t, s.Name)
	path := itest.WriteConfig(t, cfg)
	relay := itest.RunRelay(t, cfg) // creates the checkpoint topic
	relay.WaitReady(t)
	if err := relay.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("ALTER TABLE outbox ADD COLUMN tenant INT UNSIGNED NOT NULL DEFAULT 0, MODIFY id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT"); err != nil {
		t.Fatal(err)
	}
	code, out := runCLI(t, nil, "checkpoint", "set", "--config", path, "--to", "now", "--schema", "server", "--yes", "--force")
	if code != 0 || !strings.Contains(out, "unsigned: id, tenant") {
		t.Fatalf("checkpoint set: exit %d, want the unsigned columns listed: %s", code, out)
	}
	ctx := context.Background()
	cp, err := itest.Store(t, cfg).Load(ctx, cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := cp.Unsigned[s.Table()]; !ok || strings.Join(got, ",") != "id,tenant" {
		t.Fatalf("checkpoint's unsigned columns %v (present %v), want id,tenant", got, ok)
	}
	// A checkpoint from before signedness was tracked, kept as it is.
	cp.Unsigned = nil
	if err := itest.Store(t, cfg).Write(ctx, cfg.Name, cfg.Kafka.TransactionLanes, cp); err != nil {
		t.Fatal(err)
	}
	code, out = runCLI(t, nil, "checkpoint", "set", "--config", path, "--gtid", cp.GTIDSet, "--schema", "keep", "--yes", "--force")
	if code != 0 || !strings.Contains(out, "signedness unknown") {
		t.Fatalf("checkpoint set --schema keep: exit %d, want signedness unknown said: %s", code, out)
	}
	if cp, err = itest.Store(t, cfg).Load(ctx, cfg.Name); err != nil || cp.Unsigned != nil {
		t.Fatalf("kept checkpoint's unsigned columns %v (%v), want none", cp.Unsigned, err)
	}
}
