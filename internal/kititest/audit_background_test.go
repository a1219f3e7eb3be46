//go:build integration

package kititest

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// auditGauges scrapes addr's /metrics: outbox_relay_audit_rows by result,
// and the last run's end time (-1 when not exported).
func auditGauges(addr string) (map[string]float64, float64, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, -1, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, -1, err
	}
	rows := map[string]float64{}
	for _, m := range regexp.MustCompile(`(?m)^outbox_relay_audit_rows\{result="(\w+)"\} (\S+)$`).FindAllStringSubmatch(string(body), -1) {
		rows[m[1]], _ = strconv.ParseFloat(m[2], 64)
	}
	last := -1.0
	if m := regexp.MustCompile(`(?m)^outbox_relay_audit_last_run_timestamp_seconds (\S+)$`).FindStringSubmatch(string(body)); m != nil {
		last, _ = strconv.ParseFloat(m[1], 64)
	}
	return rows, last, nil
}

// awaitAudit polls /metrics until a background audit that ended after
// after reports want (result -> rows).
func awaitAudit(t *testing.T, addr string, after time.Time, want map[string]float64) {
	t.Helper()
	itest.Eventually(t, time.Minute, func() error {
		rows, last, err := auditGauges(addr)
		if err != nil {
			return err
		}
		if last < float64(after.UnixNano())/1e9 {
			return fmt.Errorf("no audit run ended after %s yet (last %f): %v", after.Format(time.RFC3339Nano), last, rows)
		}
		for r, n := range want {
			if got, ok := rows[r]; !ok || got != n {
				return fmt.Errorf("outbox_relay_audit_rows{result=%q} %v, want %v (all: %v)", r, got, n, rows)
			}
		}
		return nil
	})
}

func TestBackgroundAuditExportsACleanPipelineThenAPhantom(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	port, err := devdb.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTP.Listen = fmt.Sprintf("127.0.0.1:%d", port)
	cfg.Audit.Interval = time.Second
	cfg.Audit.Window = time.Hour
	cfg.Audit.Delay = 0
	cfg.Audit.Wait = 2 * time.Second
	p := env.StartProc(t, itest.WriteConfig(t, cfg))
	// The relay starts at the source's head (source.start now): rows are
	// written once its checkpoint covers the head, or they were before it.
	itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
	writeAlarms(t, s, "bg1", "bg2", "bg3")
	itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
	covered := time.Now()
	awaitAudit(t, cfg.HTTP.Listen, covered, map[string]float64{"published": 3, "missing": 0, "duplicate": 0, "phantom": 0, "pending": 0})

	produceByHand(t, cfg, "intruder-bg")
	produced := time.Now()
	awaitAudit(t, cfg.HTTP.Listen, produced, map[string]float64{"published": 3, "missing": 0, "duplicate": 0, "phantom": 1})
	itest.Eventually(t, 10*time.Second, func() error {
		if out := p.Output(); !strings.Contains(out, "intruder-bg") || !strings.Contains(out, "1 phantom") {
			return fmt.Errorf("no log line names the phantom intruder-bg")
		}
		return nil
	})
	if code, err := p.Terminate(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("SIGTERM with the background audit on: exit %d, %v; want 0 within 30s", code, err)
	}
}

// The background audit tells a loss from rows in flight as `audit` does:
// while the active instance is stuck (its source host never starts a binlog
// stream), a standby's background audit names the rows the committed
// checkpoint covers whose records were deleted as missing, not pending, and
// the rows past the checkpoint as pending (outbox_relay_audit_rows, and a
// log line that says when the oldest committed), never clean.
func TestBackgroundAuditNamesDeletedRecordsMissingWhileTheRelayIsBehind(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	first := itest.RunRelay(t, cfg)
	first.WaitReady(t)
	var published, later []string
	for i := range 200 {
		published = append(published, fmt.Sprintf("bgpub-%03d", i))
	}
	for i := range 100 {
		later = append(later, fmt.Sprintf("bglater-%03d", i))
	}
	writeAlarms(t, s, published[:100]...)
	writeAlarms(t, s, published[100:]...)
	itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}

	// The active instance: its source answers queries and never starts
	// the binlog stream, within bounds far away.
	hung := itest.StartHungSource(t, env.DB.Addr, itest.HangAtRegister)
	stuck := cfg
	stuck.Source.Hosts = []string{hung.Addr}
	stuck.Source.ConnectTimeout, stuck.Source.QueryTimeout = 5*time.Minute, 5*time.Minute
	active := itest.RunRelay(t, stuck)
	itest.Eventually(t, time.Minute, func() error {
		if active.Metrics.Role() != metrics.RoleActive || hung.Registrations() == 0 {
			return fmt.Errorf("the stuck instance is not active and waiting on its source yet")
		}
		return nil
	})
	writeAlarms(t, s, later...)
	gone := deleteFirstRecords(t, cfg, 10)

	port, err := devdb.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	standby := cfg
	standby.HTTP.Listen = fmt.Sprintf("127.0.0.1:%d", port)
	standby.Audit.Interval = time.Second
	standby.Audit.Window = time.Hour
	standby.Audit.Delay = 0
	standby.Audit.Wait = time.Second
	standby.Log.Level = "info"
	p := env.StartProc(t, itest.WriteConfig(t, standby))
	started := time.Now()
	awaitAudit(t, standby.HTTP.Listen, started, map[string]float64{"published": 190, "missing": 10, "pending": 100, "duplicate": 0, "phantom": 0})
	itest.Eventually(t, 10*time.Second, func() error {
		out := p.Output()
		if !strings.Contains(out, "background audit: 10 missing, 0 duplicate, 0 phantom") ||
			!strings.Contains(out, "pending: 100 rows not yet published, oldest committed at ") || !strings.Contains(out, gone[0]) {
			return fmt.Errorf("no log line names the 10 missing (%s...) and what is pending", gone[0])
		}
		return nil
	})
	if strings.Contains(p.Output(), "background audit: clean") {
		t.Fatalf("a background audit said clean while rows were missing and pending:\n%s", p.Output())
	}
	if code, err := p.Terminate(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("SIGTERM of the standby: exit %d, %v", code, err)
	}
}
