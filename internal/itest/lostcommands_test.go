//go:build integration

package itest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// checkpointReaders are the commands that read the checkpoint, text and
// --json.
func checkpointReaders(path string) [][]string {
	return [][]string{
		{"check", "--config", path},
		{"check", "--json", "--config", path},
		{"checkpoint", "show", "--config", path},
		{"checkpoint", "show", "--json", "--config", path},
		{"audit", "--since", "1h", "--config", path},
		{"audit", "--since", "1h", "--json", "--config", path},
	}
}

// requireLostEverywhere runs every command that reads the checkpoint and
// requires the verdict run gives, in its words: exit 65, "checkpoint lost",
// what was lost (why) and both ways out.
func requireLostEverywhere(t *testing.T, path, why string) {
	t.Helper()
	for _, args := range checkpointReaders(path) {
		out, errOut, code := env.CLI(t, args...)
		t.Logf("$ outbox-relay %s -> exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		if code != relay.ExitData {
			t.Fatalf("%v on a lost checkpoint: exit %d, want %d (as run)", args, code, relay.ExitData)
		}
		for _, want := range []string{"checkpoint lost", why, "outbox-relay checkpoint set --config FILE --gtid SET", "outbox-relay checkpoint reset --config FILE --yes"} {
			if !strings.Contains(errOut, want) {
				t.Fatalf("%v: stderr lacks %q", args, want)
			}
		}
		if args[0] == "audit" && strings.Contains(out, "clean") {
			t.Fatalf("%v says clean on a lost checkpoint", args)
		}
	}
	// And the documents say it too.
	out, _, _ := env.CLI(t, "checkpoint", "show", "--json", "--config", path)
	var shown struct {
		State  string `json:"state"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal([]byte(out), &shown); err != nil || shown.State != "lost" || !strings.Contains(shown.Detail, why) {
		t.Fatalf("checkpoint show --json: %v %q; want state lost saying %q", err, out, why)
	}
	out, _, _ = env.CLI(t, "check", "--json", "--config", path)
	var items []struct{ Target, Name, Status, Detail, Fix string }
	if err := json.Unmarshal([]byte(out), &items); err != nil {
		t.Fatalf("check --json: %v %q", err, out)
	}
	for _, it := range items {
		if it.Target == "kafka" && it.Name == "committed checkpoint" {
			if it.Status != "FAIL" || !strings.Contains(it.Detail, why) || !strings.Contains(it.Fix, "checkpoint reset") {
				t.Fatalf("check's item committed checkpoint: %+v; want FAIL saying %q with the way out", it, why)
			}
			return
		}
	}
	t.Fatalf("check --json has no item committed checkpoint: %s", out)
}

// The checkpoint topic of a pipeline that has published is deleted. `run`
// refuses to start (exit 65, checkpoint lost), and every command that reads
// the checkpoint tells the same: check, checkpoint show (text and --json)
// and audit each exit 65 naming what was lost and the way out, before run
// created the topic again and after.
func TestEveryCommandSaysTheCheckpointIsLostAsRunDoes(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	path := WriteConfig(t, cfg)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 10, Tag: "published"}); err != nil {
		t.Fatal(err)
	}
	requireExactlyOnce(t, r, k, s, cfg, 10)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	deleteTopic(t, k, cfg.Kafka.CheckpointTopic)

	requireLostEverywhere(t, path, "the checkpoint topic was deleted (it does not exist")

	r = RunRelay(t, cfg) // creates the topic again, then refuses
	err := r.StoppedWith(t)
	if !errors.Is(err, checkpoint.ErrLost) || relay.ExitCode(err) != relay.ExitData {
		t.Fatalf("run stopped with %v (exit %d); want checkpoint.ErrLost, exit %d", err, relay.ExitCode(err), relay.ExitData)
	}
	requireLostEverywhere(t, path, "the checkpoint topic was deleted and created again (topic id")
}

// A new pipeline (nothing published, no checkpoint topic) raises no alarm:
// each command that reads the checkpoint says it is a first start, with the
// exit code of its other checks (checkpoint show: 0 in text and --json).
func TestCommandsSayANewPipelineIsAFirstStart(t *testing.T) {
	_, _, cfg := env.Pipeline(t)
	path := WriteConfig(t, cfg)
	for _, args := range checkpointReaders(path) {
		out, errOut, code := env.CLI(t, args...)
		t.Logf("$ outbox-relay %s -> exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		if code == relay.ExitData || strings.Contains(out+errOut, "lost") || strings.Contains(out+errOut, "could not be read") {
			t.Fatalf("%v on a new pipeline: exit %d, a false alarm", args, code)
		}
		if args[0] == "checkpoint" || args[0] == "audit" {
			if code != 0 {
				t.Fatalf("%v on a new pipeline: exit %d, want 0", args, code)
			}
		}
	}
	out, _, _ := env.CLI(t, "checkpoint", "show", "--config", path)
	if !strings.Contains(out, "no checkpoint for "+cfg.Name) || !strings.Contains(out, "first start") {
		t.Fatalf("checkpoint show on a new pipeline: %q", out)
	}
	out, _, _ = env.CLI(t, "checkpoint", "show", "--json", "--config", path)
	var shown struct {
		Checkpoint any    `json:"checkpoint"`
		State      string `json:"state"`
		Start      string `json:"start"`
	}
	if err := json.Unmarshal([]byte(out), &shown); err != nil || shown.State != "first-start" || shown.Checkpoint != nil || shown.Start != "now" {
		t.Fatalf("checkpoint show --json on a new pipeline: %v %q", err, out)
	}
	out, _, _ = env.CLI(t, "check", "--json", "--config", path)
	if !strings.Contains(out, `"name":"committed checkpoint","status":"PASS"`) {
		t.Fatalf("check on a new pipeline: no passing item committed checkpoint: %s", out)
	}
}
