//go:build integration

package mysqlitest

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/internal/mysqlsource"
)

// End to end on MySQL 8.0 and 8.4 with source.flavor mysql and auto: rows
// committed before and while the relay streams arrive once each, with
// key, payload (binary JSON re-rendered) and per-aggregate order; the
// checkpoint reaches gtid_executed.
func TestMySQLEndToEnd(t *testing.T) {
	for _, c := range []struct{ version, flavor string }{{v80, "mysql"}, {v84, "auto"}, {v84, "mysql"}, {v80, "auto"}} {
		t.Run(c.version+"-"+c.flavor, func(t *testing.T) {
			p := startPrimary(t, mysqlsource.Options{Version: c.version})
			a := newApp(t, p)
			k := itest.StartKafka(t)
			cfg := relayConfig(t, k, c.flavor, p.Addr())
			cfg.Source.Start = "earliest"
			for i := 0; i < 20; i++ {
				a.commit(t, "", a.newRows(1+i%3, 5, ""))
			}
			r := itest.RunRelay(t, cfg)
			r.WaitReady(t)
			for i := 0; i < 80; i++ {
				a.commit(t, "", a.newRows(1+i%4, 5, "live"))
			}
			waitCheckpoint(t, cfg, p.Executed().Flat(), time.Minute)
			recs := requireExact(t, k, cfg, a)
			for _, rec := range recs {
				if rec.Headers["type"] != "AlarmCreated" || rec.Topic != cfg.Router.TopicPrefix+"alarm" {
					t.Fatalf("record %s: topic %s, headers %v", rec.ID, rec.Topic, rec.Headers)
				}
			}
			if err := r.Stop(); err != nil {
				t.Fatalf("stop: %v", err)
			}
			if logs := r.Logs(); !strings.Contains(logs, p.Version()) && !strings.Contains(logs, "mysql") {
				t.Logf("relay log does not name the server")
			}
		})
	}
}

// `check` against the doubles: every item passes, the version and the
// flavor are MySQL's, 8.4 without SHOW MASTER STATUS.
func TestMySQLCheck(t *testing.T) {
	for _, version := range []string{v80, v84} {
		t.Run(version, func(t *testing.T) {
			p := startPrimary(t, mysqlsource.Options{Version: version})
			newApp(t, p)
			k := itest.StartKafka(t)
			cfg := relayConfig(t, k, "auto", p.Addr())
			out, errOut, code := env.CLI(t, "check", "--config", itest.WriteConfig(t, cfg))
			if code != 0 {
				t.Fatalf("check exit %d:\n%s\n%s", code, out, errOut)
			}
			if !strings.Contains(out, version) || !strings.Contains(out, "(mysql)") {
				t.Fatalf("check does not report MySQL %s:\n%s", version, out)
			}
		})
	}
}
