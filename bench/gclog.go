package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// The broker's GC log: deploy/dev/kafka.sh starts Apache Kafka with
// -Xlog:gc (ZGC: gc,gc+phases) into KAFKA_DIR/gc.log, uptime decorated.
// bench reads from it which collector the broker ran and the times the
// collector held the broker's threads:
//
//   - a pause (every collector's "Pause ..." line): the JVM stopped every
//     thread, G1's young and mixed collections (milliseconds to tens),
//     ZGC's and Shenandoah's short pauses at the edges of their concurrent
//     phases;
//   - an allocation stall (ZGC's "Allocation Stall (thread) ..." line): one
//     thread waited for memory the concurrent collection had not freed yet.
//
// An event committed during either waits for it, whatever the relay does.

// gcLog follows a JVM GC log from the size it had at mark.
type gcLog struct {
	path string
	from int64
}

// markGC starts following dir's gc.log; nil when there is none.
func markGC(dir string) *gcLog {
	if dir == "" {
		return nil
	}
	path := filepath.Join(dir, "gc.log")
	st, err := os.Stat(path)
	if err != nil {
		return nil
	}
	return &gcLog{path: path, from: st.Size()}
}

// gcPause matches a stop-the-world pause line: G1's "[14.632s] GC(19)
// Pause Young (Normal) (G1 Evacuation Pause) 462M->169M(512M) 21.032ms",
// ZGC's "[4.216s] GC(0) Pause Mark End 0.016ms", Shenandoah's "[1.823s]
// GC(0) Pause Init Mark (unload classes) 0.025ms" (with or without the
// level and tags decorations). gcStall matches ZGC's allocation stall,
// "[9.1s] Allocation Stall (data-plane-kafka-request-handler-0) 3.5ms",
// with or without a GC id.
var (
	gcPause = regexp.MustCompile(`\] GC\(\d+\) Pause .* ([0-9.]+)ms$`)
	gcStall = regexp.MustCompile(`\] (?:GC\(\d+\) )?Allocation Stall \(.*\) ([0-9.]+)ms$`)
	gcUsing = regexp.MustCompile(`\] Using (.+)$`)
)

// gcLine reads one line of the log: the milliseconds of a pause or of an
// allocation stall; ok false for any other line.
func gcLine(line string) (ms float64, stall, ok bool) {
	m := gcPause.FindStringSubmatch(line)
	if m == nil {
		if m = gcStall.FindStringSubmatch(line); m == nil {
			return 0, false, false
		}
		stall = true
	}
	ms, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, false, false
	}
	return ms, stall, true
}

// gcCollector is the collector the JVM named at its start in dir's gc.log
// ("G1", "The Z Garbage Collector", "Shenandoah"); "" when there is none.
func gcCollector(dir string) string {
	if dir == "" {
		return ""
	}
	f, err := os.Open(filepath.Join(dir, "gc.log"))
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for i := 0; i < 100 && sc.Scan(); i++ { // the JVM's first lines
		if m := gcUsing.FindStringSubmatch(sc.Text()); m != nil {
			return strings.TrimSpace(m[1])
		}
	}
	return ""
}

// gcTally sums up pauses and allocation stalls.
type gcTally struct {
	pauses, stalls             int
	longest, total, stallWorst float64 // ms
	stallTotal                 float64 // ms
}

func (t *gcTally) add(ms float64, stall bool) {
	if stall {
		t.stalls++
		t.stallTotal += ms
		t.stallWorst = max(t.stallWorst, ms)
		return
	}
	t.pauses++
	t.total += ms
	t.longest = max(t.longest, ms)
}

// String is the GC column: pauses' count, longest and total ms, and the
// allocation stalls when there were any.
func (t gcTally) String() string {
	s := fmt.Sprintf("%d, %s, %s", t.pauses, gcMs(t.longest), gcMs(t.total))
	if t.stalls > 0 {
		s += fmt.Sprintf("; allocation stalls %d, %s, %s", t.stalls, gcMs(t.stallWorst), gcMs(t.stallTotal))
	}
	return s
}

// gcMs writes milliseconds with the precision their size needs: G1's
// pauses in whole ms, ZGC's in hundredths.
func gcMs(ms float64) string {
	switch {
	case ms == 0:
		return "0"
	case ms >= 10:
		return fmt.Sprintf("%.0f", ms)
	case ms >= 1:
		return fmt.Sprintf("%.1f", ms)
	}
	return fmt.Sprintf("%.2f", ms)
}

// tally reads r's pause and stall lines.
func tally(r io.Reader) gcTally {
	var t gcTally
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if ms, stall, ok := gcLine(sc.Text()); ok {
			t.add(ms, stall)
		}
	}
	return t
}

// summary is the pauses logged since the mark ("" when the log is unknown).
func (g *gcLog) summary() string {
	if g == nil {
		return ""
	}
	f, err := os.Open(g.path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(g.from, io.SeekStart); err != nil {
		return ""
	}
	return tally(f).String()
}

// keepGCLog copies dir's gc.log to path (-latency-steps keeps the broker's
// log beside the runs' events: bench removes the broker it started). It
// reports a failure and goes on.
func keepGCLog(dir, path string) {
	if dir == "" {
		return
	}
	b, err := os.ReadFile(filepath.Join(dir, "gc.log"))
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: cannot keep the broker's GC log: %v\n", err)
	}
}
