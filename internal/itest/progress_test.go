//go:build integration

package itest

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// progressLine is one `progress` log line.
type progressLine struct {
	Message string   `json:"message"`
	Events  int64    `json:"events"`
	Lag     *float64 `json:"lag_seconds"`
}

// roundedFields finds the rate and the lag of a progress line, and the
// fraction of each.
var roundedFields = regexp.MustCompile(`"(events_per_second|lag_seconds)":[0-9]+(\.[0-9]+)?`)

// progressLines are the progress lines of a JSON log.
func progressLines(t *testing.T, log string) []progressLine {
	t.Helper()
	var out []progressLine
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `"message":"progress"`) {
			continue
		}
		var p progressLine
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatalf("progress line %q: %v", line, err)
		}
		// Rates and lags are rounded (a tenth of an event per second, a
		// millisecond), never 12345.678901.
		for _, m := range roundedFields.FindAllStringSubmatch(line, -1) {
			if digits := map[string]int{"events_per_second": 1, "lag_seconds": 3}[m[1]]; len(m[2]) > 1+digits {
				t.Fatalf("progress line %q: %s not rounded to %d decimals", line, m[1], digits)
			}
		}
		out = append(out, p)
	}
	return out
}

// The `progress` log line of a restarted relay (or one that took over)
// counts the events this process published, not the checkpoint's total, and
// its lag_seconds is the lag gauge's measure (commit time of the last
// transaction read while behind, 0 at the head), not the time since the
// checkpoint's last commit: a relay that resumed from a checkpoint minutes
// old, with nothing new to read, reported that age as its lag and the
// pipeline's whole count as just published.
func TestProgressLineCountsThisProcessAndGaugeLag(t *testing.T) {
	BrokerOnlyAsSink(t)
	_, s, cfg := env.Pipeline(t)
	cfg.Log.Level = "info"
	cfg.Log.ProgressInterval = 200 * time.Millisecond
	cfg.HTTP.Listen = freeAddr(t)
	path := WriteConfig(t, cfg)
	first := env.StartProc(t, path)
	waitStarted(t, first, cfg)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 25, Tag: "a"}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if code, err := first.Terminate(time.Minute); err != nil || code != 0 {
		t.Fatalf("first relay: exit %d (%v)", code, err)
	}
	cp := loadCheckpoint(t, cfg)
	if cp == nil || cp.Events != 50 || cp.CommitTime.IsZero() {
		t.Fatalf("checkpoint after the first relay: %+v", cp)
	}
	// The checkpoint's last commit grows old while no relay runs.
	const age = 3 * time.Second
	Eventually(t, 10*time.Second, func() error {
		if d := time.Since(cp.CommitTime); d < age {
			return fmt.Errorf("checkpoint commit %s old", d)
		}
		return nil
	})

	second := env.StartProc(t, path)
	// Several progress intervals with nothing new to read, then 20 events.
	Eventually(t, time.Minute, func() error {
		if second.Exited() {
			t.Fatalf("second relay exited:\n%s", second.Output())
		}
		if code, body := readyzBody(cfg.HTTP.Listen); code != 200 {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		return nil
	})
	idle := time.Now()
	Eventually(t, 10*time.Second, func() error {
		if time.Since(idle) < 5*cfg.Log.ProgressInterval {
			return fmt.Errorf("idle for %s", time.Since(idle))
		}
		return nil
	})
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 10, Tag: "b"}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	Eventually(t, 10*time.Second, func() error {
		var n int64
		for _, p := range progressLines(t, second.Output()) {
			n += p.Events
		}
		if n < 20 {
			return fmt.Errorf("progress lines count %d events", n)
		}
		return nil
	})
	if code, err := second.Terminate(time.Minute); err != nil || code != 0 {
		t.Fatalf("second relay: exit %d (%v)", code, err)
	}
	lines := progressLines(t, second.Output())
	var n int64
	for _, p := range lines {
		n += p.Events
		if p.Lag == nil || *p.Lag < 0 || *p.Lag >= age.Seconds() {
			t.Errorf("a progress line's lag_seconds is missing or the checkpoint's age, not the lag: lags %v", lagsOf(lines))
		}
	}
	if n != 20 {
		t.Fatalf("the restarted relay's progress lines count %d events, want the 20 it published (the checkpoint held %d)",
			n, cp.Events)
	}
	t.Logf("%d progress lines, %d events; lags %v", len(lines), n, lagsOf(lines))
}

func lagsOf(lines []progressLine) []float64 {
	var out []float64
	for _, p := range lines {
		if p.Lag != nil {
			out = append(out, *p.Lag)
		}
	}
	return out
}
