//go:build integration

package itest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

func loadCheckpoint(t testing.TB, cfg config.Config) *checkpoint.Checkpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// What read_committed readers see now: right after a relay was killed
	// its own open transaction holds the topic back (Load would wait).
	cp, err := Store(t, cfg).LoadVisible(ctx, cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// waitEvents polls until the committed checkpoint counts at least n events.
func waitEvents(t testing.TB, cfg config.Config, n int64) {
	t.Helper()
	Eventually(t, time.Minute, func() error {
		if cp := loadCheckpoint(t, cfg); cp == nil || cp.Events < n {
			return fmt.Errorf("fewer than %d events committed", n)
		}
		return nil
	})
}

// writeInBackground runs s.Write(opts); its error arrives on the channel.
func writeInBackground(s *Schema, opts WriteOptions) <-chan error {
	wrote := make(chan error, 1)
	go func() {
		_, err := s.Write(context.Background(), opts)
		wrote <- err
	}()
	return wrote
}

// waitStarted polls until the relay process has pinned its start position.
func waitStarted(t testing.TB, p *Proc, cfg config.Config) {
	t.Helper()
	Eventually(t, time.Minute, func() error {
		if p.Exited() {
			t.Fatalf("relay exited: %s", p.Output())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cp, err := Store(t, cfg).Load(ctx, cfg.Name)
		if err != nil || cp == nil {
			return fmt.Errorf("no checkpoint yet (%v)", err)
		}
		return nil
	})
}

// kill -9 of the relay while writers commit; the restarted relay completes
// the stream with nothing missing and, exactly-once, nothing twice.
func TestKill9MidStreamThenRestart(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)

	wrote := writeInBackground(s, WriteOptions{Writers: 4, Transactions: 1500, RollbackRate: 0.1})
	// Kill once part of the stream is committed, while writers still run.
	waitEvents(t, cfg, 500)
	p.Kill()
	killedAt := loadCheckpoint(t, cfg).Events
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	rows := len(s.OutboxRows(t))
	if killedAt >= int64(rows) {
		t.Fatalf("the kill came after everything was published (%d of %d): no crash was tested", killedAt, rows)
	}
	p = env.StartProc(t, path)
	WaitCheckpoint(t, cfg, Head(t, env.DB), 2*time.Minute)
	rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix))
	if !rep.OK() {
		t.Fatal(rep)
	}
	t.Logf("killed at %d of %d events; after restart: %s", killedAt, rows, rep)
}

func scrape(t testing.TB, addr, metric string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(metric)+`(\{[^}]*\})? (\S+)$`).FindAllStringSubmatch(string(body), -1)
	total := 0.0
	for _, x := range m {
		v, _ := strconv.ParseFloat(x[2], 64)
		total += v
	}
	if len(m) == 0 {
		return -1
	}
	return total
}

// SIGTERM: the relay stops reading, commits, writes the final checkpoint
// (covering transactions only a heartbeat would otherwise record) and exits 0.
// The metrics and health endpoints answer while it runs.
func TestSIGTERMWritesFinalCheckpoint(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	cfg.HTTP.Listen = freeAddr(t)
	cfg.Kafka.CheckpointInterval = time.Hour // only the final checkpoint can cover business-only transactions
	p := env.StartProc(t, WriteConfig(t, cfg))
	waitStarted(t, p, cfg)
	// Ready comes once the binlog stream delivers, which may be a moment
	// after "relay started": poll it rather than read it once.
	for _, path := range []string{"/healthz", "/readyz"} {
		Eventually(t, 30*time.Second, func() error {
			resp, err := http.Get("http://" + cfg.HTTP.Listen + path)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("GET %s: %s", path, resp.Status)
			}
			return nil
		})
	}
	committed, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 100})
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, time.Minute, func() error {
		if got := scrape(t, cfg.HTTP.Listen, "outbox_relay_events_total"); got != float64(len(committed)) {
			return fmt.Errorf("outbox_relay_events_total %v, want %d", got, len(committed))
		}
		return nil
	})
	before := scrape(t, cfg.HTTP.Listen, "outbox_relay_source_transactions_total")
	for i := 0; i < 5; i++ {
		if err := env.DB.Exec("INSERT INTO " + s.Name + ".alarm_record (device_id, level, temp, seq) VALUES ('x', 'INFO', 1, 0)"); err != nil {
			t.Fatal(err)
		}
	}
	head := Head(t, env.DB)
	Eventually(t, time.Minute, func() error {
		if got := scrape(t, cfg.HTTP.Listen, "outbox_relay_source_transactions_total"); got < before+5 {
			return fmt.Errorf("source transactions %v, want at least %v", got, before+5)
		}
		return nil
	})
	code, err := p.Terminate(time.Minute)
	if err != nil || code != 0 {
		t.Fatalf("exit code %d (%v); output:\n%s", code, err, p.Output())
	}
	if !strings.Contains(p.Output(), "final checkpoint written") {
		t.Fatalf("no final checkpoint in the log:\n%s", p.Output())
	}
	cp := loadCheckpoint(t, cfg)
	have, _ := binlog.ParseSet(cp.Flavor, cp.GTIDSet)
	want, _ := binlog.ParseSet(cp.Flavor, head)
	if !have.Contain(want) {
		t.Fatalf("final checkpoint %s does not cover %s", cp.GTIDSet, head)
	}
	if strings.Contains(p.Output(), "relay-pw") {
		t.Fatal("the log shows the source password")
	}
	if rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix)); !rep.OK() {
		t.Fatal(rep)
	}
}
