package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
)

// runStdout is execute with the process's stdout captured: the commands
// print their reports to os.Stdout.
func runStdout(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = f
	var o, e bytes.Buffer
	code = execute(args, &o, &e)
	os.Stdout = saved
	raw, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	return code, o.String() + string(raw), e.String()
}

// Every command with --json follows the one convention of the README's
// "Commands": one JSON document per invocation, compact on one line, ended
// by a newline; a list is an array. The failure guarded against: each
// command choosing its own form (an array, an indented object, JSON lines),
// so that a script's parsing works for one command and breaks on the next.
func TestJSONOutputOneCompactDocument(t *testing.T) {
	kc := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.SeedTopics(1, "outbox-relay.checkpoints"))
	cfgPath := filepath.Join(t.TempDir(), "relay.yaml")
	yaml := "name: a\nsource:\n  hosts: [\"127.0.0.1:1\"]\n  user: u\n  server_id: 1\n  tables: [a.b]\nkafka:\n  brokers: [\"" + kc.ListenAddrs()[0] + "\"]\n"
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfigFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A checkpoint and a dead-lettered row, written in a transaction as the
	// relay writes them.
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.AllowAutoTopicCreation(), kgo.TransactionalID("jsonout-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*kgo.Record{
		{Topic: cfg.Kafka.CheckpointTopic, Key: []byte("a"), Value: []byte(`{"format":1,"name":"a","gtid_set":"0-1-9","flavor":"mariadb"}`)},
		{Topic: deadLetterTopics(cfg)[0], Key: []byte("k"), Value: []byte(`{}`), Headers: []kgo.RecordHeader{{Key: "id", Value: []byte("ev-1")}, {Key: "error", Value: []byte("bad row")}}},
	} {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}

	// args per command with --json; want: the document's first byte.
	cases := map[string]struct {
		args []string
		want byte
	}{
		"check":              {[]string{"check", "--config", cfgPath}, '['},
		"checkpoint show":    {[]string{"checkpoint", "show", "--config", cfgPath}, '{'},
		"checkpoint history": {[]string{"checkpoint", "history", "--config", cfgPath}, '['},
		"dead-letter list":   {[]string{"dead-letter", "list", "--config", cfgPath}, '['},
		"version":            {[]string{"version"}, '{'},
	}
	// Commands that need a database: their kit tests check the form.
	elsewhere := map[string]string{"audit": "internal/kititest/audit_test.go",
		"prune": "internal/kititest/prune_test.go", "replay": "internal/kititest/replay_test.go",
		"checkpoint set": "internal/dbzitest/switch_test.go"}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Flags().Lookup("json") != nil {
			name := strings.TrimPrefix(c.CommandPath(), "outbox-relay ")
			tc, ok := cases[name]
			if _, there := elsewhere[name]; there {
				ok = true
			} else if !ok {
				t.Errorf("%s has --json and no case in this test: add one", name)
				return
			}
			t.Run(name, func(t *testing.T) {
				if where, there := elsewhere[name]; there {
					t.Skipf("needs a database: checked in %s", where)
				}
				_, stdout, stderr := runStdout(t, append(tc.args, "--json")...)
				if !strings.HasSuffix(stdout, "\n") || strings.Count(stdout, "\n") != 1 {
					t.Fatalf("want one line ended by a newline, got %q (stderr %s)", stdout, stderr)
				}
				var v any
				dec := json.NewDecoder(strings.NewReader(stdout))
				if err := dec.Decode(&v); err != nil || dec.More() {
					t.Fatalf("want exactly one JSON document, got %q: %v", stdout, err)
				}
				if stdout[0] != tc.want {
					t.Fatalf("want a document starting with %q, got %q", tc.want, stdout)
				}
				var compact bytes.Buffer
				if err := json.Compact(&compact, []byte(stdout)); err != nil || compact.String() != strings.TrimSuffix(stdout, "\n") {
					t.Fatalf("not compact: %q", stdout)
				}
			})
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRootCmd())
}
