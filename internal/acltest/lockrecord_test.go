//go:build integration

package acltest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// The checkpoint topic of a pipeline that has published is deleted and
// created again: run refuses (lost, exit 65) and so do the commands run as
// the relay's principal. A principal that may read the checkpoint topic
// but not the lock group's record (no DESCRIBE on the group, or on the
// lock topic: Kafka then leaves the record out of the group's offsets
// without an error) cannot tell a first start from a lost checkpoint:
// checkpoint show (text and --json), audit and check say so and exit
// non-zero, naming the ACL. They said "a first start" and exited 0 (with
// DESCRIBE on the group but not on the lock topic, without a word about
// the record).
func TestCommandsWithoutTheLockGroupsRecordCannotTellALostCheckpoint(t *testing.T) {
	adm, _, sasl := aclKafka(t)
	ctx := context.Background()
	s := env.NewSchema(t)
	cfg, event := leastPrivileged(t, adm, sasl, s)
	user, pass := cfg.Kafka.SASL.User, cfg.Kafka.SASL.Password
	group := clients.GroupID(cfg.Name)

	r := itest.RunRelay(t, cfg)
	r.WaitReady(t)
	if _, err := s.Write(ctx, itest.WriteOptions{Writers: 1, Transactions: 3}); err != nil {
		t.Fatal(err)
	}
	itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if resp, err := adm.DeleteTopics(ctx, cfg.Kafka.CheckpointTopic); err != nil || resp.Error() != nil {
		t.Fatalf("delete %s: %v %v", cfg.Kafka.CheckpointTopic, err, resp.Error())
	}
	itest.Eventually(t, 30*time.Second, func() error {
		_, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, cfg.Kafka.CheckpointTopic)
		return err
	})

	relayPath := itest.WriteConfig(t, cfg)
	for _, args := range [][]string{{"checkpoint", "show"}, {"checkpoint", "show", "--json"}, {"audit", "--since", "1h"}} {
		if out, errOut, code := env.CLI(t, append(args, "--config", relayPath)...); code != relay.ExitData {
			t.Fatalf("%v as the relay's principal: exit %d, want %d\n%s%s", args, code, relay.ExitData, out, errOut)
		}
	}
	for _, who := range []struct {
		name  string
		group bool // DESCRIBE on the group, none on the lock topic
	}{{"describes-group", true}, {"no-group", false}} {
		t.Run(who.name, func(t *testing.T) {
			c := cfg
			c.Kafka.SASL.User, c.Kafka.SASL.Password = user+"-"+who.name, pass+"-"+who.name
			scramUser(t, adm, c.Kafka.SASL.User, c.Kafka.SASL.Password)
			p := "User:" + c.Kafka.SASL.User
			allow(t, adm, kadm.NewACLs().Allow(p).Topics(cfg.Kafka.CheckpointTopic, event).Operations(kadm.OpRead))
			if who.group {
				allow(t, adm, kadm.NewACLs().Allow(p).Groups(group).Operations(kadm.OpDescribe))
			}
			path := itest.WriteConfig(t, c)
			for _, args := range [][]string{{"checkpoint", "show"}, {"checkpoint", "show", "--json"}, {"audit", "--since", "1h"}, {"check", "--json"}} {
				out, errOut, code := env.CLI(t, append(args, "--config", path)...)
				t.Logf("%v -> exit %d\n%s%s", args, code, out, errOut)
				if code == 0 || strings.Contains(out+errOut, ": a first start") || strings.Contains(out+errOut, `"first-start"`) {
					t.Fatalf("%v without the lock group's record: exit %d, says a first start", args, code)
				}
				if args[0] == "check" {
					requireItem(t, out, "committed checkpoint", "FAIL", "cannot tell a first start from a lost checkpoint")
					continue
				}
				for _, want := range []string{"cannot tell a first start from a lost checkpoint", "DESCRIBE on the group " + group} {
					if !strings.Contains(out+errOut, want) {
						t.Fatalf("%v: does not say %q", args, want)
					}
				}
			}
		})
	}
	r = itest.RunRelay(t, cfg)
	if err := r.StoppedWith(t); relay.ExitCode(err) != relay.ExitData {
		t.Fatalf("run stopped with %v, want a lost checkpoint (exit %d)", err, relay.ExitData)
	}
}

// requireItem fails unless check --json's output has the kafka item name
// with status, its detail saying detail.
func requireItem(t *testing.T, out, name, status, detail string) {
	t.Helper()
	var items []struct{ Target, Name, Status, Detail string }
	if err := json.Unmarshal([]byte(out), &items); err != nil {
		t.Fatalf("check --json: %v %q", err, out)
	}
	for _, it := range items {
		if it.Target == "kafka" && it.Name == name {
			if it.Status != status || !strings.Contains(it.Detail, detail) {
				t.Fatalf("check's item %s: %+v; want %s saying %q", name, it, status, detail)
			}
			return
		}
	}
	t.Fatalf("check --json has no item %s: %s", name, fmt.Sprint(items))
}
