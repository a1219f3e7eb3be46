//go:build integration

package mysqlitest

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/internal/mysqlsource"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// peakLimit is the memory a hostile source or row may take the relay to:
// twice the shipped Kubernetes limit (256 MiB).
const peakLimit = 512 << 20

// stopped waits for the relay process to exit by itself (a named stop,
// not an endless retry), sampling its peak RSS meanwhile, and returns its
// exit code and output; it fails the test if the process lives past the
// deadline or goes over peakLimit.
func stopped(t *testing.T, p *itest.Proc, within time.Duration) (int, string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !p.Exited() {
		if time.Now().After(deadline) {
			t.Fatalf("the relay is still running after %s (retrying?); peak RSS %d MB", within, p.PeakRSS()>>20)
		}
		if rss := p.PeakRSS(); rss > peakLimit {
			t.Fatalf("peak RSS %d MB, over %d MB", rss>>20, peakLimit>>20)
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, _ := p.Wait(time.Second)
	rss := p.PeakRSS()
	t.Logf("exit %d, peak RSS %d MB", code, rss>>20)
	if rss > peakLimit || rss < 0 {
		t.Fatalf("peak RSS %d MB, over %d MB", rss>>20, peakLimit>>20)
	}
	out := p.Output()
	for _, line := range strings.Split(out, "\n") {
		if len(line) > 4096 {
			t.Fatalf("a log line of %d bytes (it quotes an event?): %.300s", len(line), line)
		}
	}
	return code, out
}

// A compressed transaction (MySQL 8, binlog_transaction_compression)
// whose 32 KiB of zstd inflate to a GiB stops the relay at that
// transaction with a named error, within the memory bound, whether it
// declares its true size or lies about it; the transactions before it are
// published, and the relay does not retry.
func TestCompressedTransactionBombStopsTheRelayWithinItsMemory(t *testing.T) {
	for name, tt := range map[string]struct {
		declared uint64
		code     int
		says     string
	}{
		"declaring the GiB": {0, relay.ExitConfig, "compressed binlog event inflates past the relay's bound: it declares"},
		"declaring 4 KiB":   {4096, relay.ExitData, "compressed transaction payload is corrupt: it inflates past the 4096 bytes it declares"},
	} {
		t.Run(name, func(t *testing.T) {
			p := startPrimary(t, mysqlsource.Options{Version: v80, Compression: true})
			a := newApp(t, p)
			k := itest.StartKafka(t)
			cfg := relayConfig(t, k, "mysql", p.Addr())
			cfg.Log.Level = "info"
			proc := env.StartProc(t, itest.WriteConfig(t, cfg))
			a.commit(t, "", a.newRows(3, 2, ""))
			waitCheckpoint(t, cfg, p.Executed().Flat(), time.Minute)
			before := p.Executed().Flat()
			if _, err := p.Commit(mysqlsource.Tx{Inserts: []mysqlsource.Insert{{Table: a.tbl, Rows: a.newRows(1, 1, "bomb")}},
				PayloadPad: 1 << 30, PayloadDeclared: tt.declared}); err != nil {
				t.Fatal(err)
			}
			code, out := stopped(t, proc, 90*time.Second)
			if code != tt.code || !strings.Contains(out, tt.says) {
				t.Fatalf("exit %d, want %d with %q:\n%s", code, tt.code, tt.says, tail(out))
			}
			if strings.Count(out, tt.says) > 3 {
				t.Errorf("the stop was logged %d times: retried?", strings.Count(out, tt.says))
			}
			waitCheckpoint(t, cfg, before, 10*time.Second)
		})
	}
}

// A JSON column nested four million arrays deep (a 52 MB row, within the
// packet bound) is a bad row: dead-lettered, the next row published, with
// router.on_error dead-letter; a named stop at its transaction with
// router.on_error fail. Never a crash (go-mysql's recursive decoder
// overflowed the stack: a fatal error no recover catches), within the
// memory bound.
func TestDeeplyNestedJSONIsABadRow(t *testing.T) {
	for _, onError := range []config.OnError{config.OnErrorDeadLetter, config.OnErrorFail} {
		t.Run(string(onError), func(t *testing.T) {
			p := startPrimary(t, mysqlsource.Options{Version: v80})
			a := newApp(t, p)
			k := itest.StartKafka(t)
			cfg := relayConfig(t, k, "mysql", p.Addr())
			cfg.Log.Level = "info"
			cfg.Router.OnError = onError
			cfg.Router.DeadLetterTopic = cfg.Router.TopicPrefix + "dead-letter"
			proc := env.StartProc(t, itest.WriteConfig(t, cfg))
			a.commit(t, "", a.newRows(2, 2, ""))
			waitCheckpoint(t, cfg, p.Executed().Flat(), time.Minute)
			before := p.Executed().Flat()
			deep := a.newRows(1, 1, "deep")
			deep[0][5] = mysqlsource.NestedArraysJSON(4_000_000)
			if _, err := p.Commit(mysqlsource.Tx{Inserts: []mysqlsource.Insert{{Table: a.tbl, Rows: deep}}}); err != nil {
				t.Fatal(err)
			}
			deepID := deep[0][1].(string)
			if onError == config.OnErrorFail {
				code, out := stopped(t, proc, 90*time.Second)
				if code != relay.ExitData || !strings.Contains(out, deepID) || !strings.Contains(out, "nested deeper than 100 levels") {
					t.Fatalf("exit %d, want %d naming %s and the depth:\n%s", code, relay.ExitData, deepID, tail(out))
				}
				waitCheckpoint(t, cfg, before, 10*time.Second)
				return
			}
			a.commit(t, "", a.newRows(1, 1, "after"))
			waitCheckpoint(t, cfg, p.Executed().Flat(), 90*time.Second)
			if proc.Exited() {
				t.Fatalf("the relay exited:\n%s", tail(proc.Output()))
			}
			peak := proc.PeakRSS() // VmHWM: the peak so far
			t.Logf("peak RSS %d MB", peak>>20)
			if peak > peakLimit || peak < 0 {
				t.Errorf("peak RSS %d MB, over %d MB", peak>>20, peakLimit>>20)
			}
			var dead int
			for _, r := range itest.Consume(t, k.Brokers, cfg.Router.TopicPrefix) {
				if r.Topic == cfg.Router.DeadLetterTopic {
					dead++
					if r.Key != deepID || !strings.Contains(r.Headers["error"], "nested deeper than 100 levels") {
						t.Errorf("dead letter %s: error %q", r.Key, r.Headers["error"])
					}
				}
			}
			if dead != 1 {
				t.Fatalf("%d dead letters, want the deep row's", dead)
			}
		})
	}
}

func tail(s string) string {
	if len(s) > 3000 {
		return "..." + s[len(s)-3000:]
	}
	return s
}
