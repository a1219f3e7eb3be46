package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestJstatCompiled(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      int
		ok        bool
	}{
		{"with a failed method", "Compiled Failed Invalid   Time   FailedType FailedMethod\n   17969      2       0    35.85          1 jdk/internal/org/objectweb/asm/Frame merge\n", 17969, true},
		{"none failed", "Compiled Failed Invalid   Time   FailedType FailedMethod\n    2728      0       0     4.10          0\n", 2728, true},
		{"no values line", "Compiled Failed Invalid   Time   FailedType FailedMethod\n", 0, false},
		{"an error message", "12345 not found\n", 0, false},
		{"empty", "", 0, false},
		{"not a number", "Compiled Failed\n  x 0\n", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := jstatCompiled(tc.out)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("jstatCompiled = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestStatTicks(t *testing.T) {
	// Fields after the name: state, ppid, pgrp, session, tty, tpgid, flags,
	// minflt, cminflt, majflt, cmajflt, utime, stime, ...
	for _, tc := range []struct {
		name, stat, want string
		ticks            int
		ok               bool
	}{
		{"request handler", "8493 (data-plane-kafk) S 1 8493 1 0 -1 4194368 100 0 0 0 41 9 0 0 20 0 90 0 1 0 0", "data-plane-kafk", 50, true},
		{"space in the name", "12 (C2 CompilerThre) S 1 8493 1 0 -1 4194368 100 0 0 0 300 20 0 0", "C2 CompilerThre", 320, true},
		{"GC thread number", "13 (GC Thread#3) S 1 8493 1 0 -1 4194368 100 0 0 0 7 3 0 0", "GC Thread", 10, true},
		{"parenthesis in the name", "14 (a) b(2)) R 1 8493 1 0 -1 4194368 100 0 0 0 1 1 0 0", "a) b(2)", 2, true},
		{"too few fields", "15 (x) S 1 2 3", "", 0, false},
		{"no name", "15 x S 1 2 3 4 5 6 7 8 9 10 11 12 13", "", 0, false},
		{"utime not a number", "16 (x) S 1 8493 1 0 -1 4194368 100 0 0 0 u 1 0 0", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, ticks, ok := statTicks(tc.stat)
			if name != tc.want || ticks != tc.ticks || ok != tc.ok {
				t.Fatalf("statTicks = %q, %d, %v; want %q, %d, %v", name, ticks, ok, tc.want, tc.ticks, tc.ok)
			}
		})
	}
}

func TestThreadTicksOfThisProcess(t *testing.T) {
	got := threadTicks(os.Getpid())
	if len(got) == 0 {
		t.Fatal("no thread of this process read from /proc")
	}
}

func TestPrimed(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  *kgo.Record
		want bool
	}{
		{"primed", &kgo.Record{Key: []byte(primeHeader), Headers: []kgo.RecordHeader{{Key: primeHeader}}}, true},
		{"relay record", &kgo.Record{Key: []byte("dev-1"), Value: []byte("{}"), Headers: []kgo.RecordHeader{{Key: "id", Value: []byte("e1")}, {Key: "type", Value: []byte("t")}}}, false},
		{"one other header", &kgo.Record{Headers: []kgo.RecordHeader{{Key: "id", Value: []byte("e1")}}}, false},
		{"no headers", &kgo.Record{Key: []byte(primeHeader)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := primed(tc.rec); got != tc.want {
				t.Fatalf("primed = %v, want %v", got, tc.want)
			}
		})
	}
}

// roundOrder rotates the contenders by one per round: over as many rounds
// as contenders, each runs in every position once.
func TestRoundOrder(t *testing.T) {
	runs := []string{"baseline", "exactly-once", "at-least-once"}
	want := [][]string{
		{"baseline", "exactly-once", "at-least-once"},
		{"exactly-once", "at-least-once", "baseline"},
		{"at-least-once", "baseline", "exactly-once"},
		{"baseline", "exactly-once", "at-least-once"},
	}
	for r, w := range want {
		if got := roundOrder(runs, r); !slices.Equal(got, w) {
			t.Errorf("round %d: %v, want %v", r, got, w)
		}
	}
	if !slices.Equal(runs, want[0]) {
		t.Errorf("roundOrder changed its argument: %v", runs)
	}
}

// Lines of real GC logs of deploy/dev/kafka.sh's broker (Apache Kafka
// 4.1.1, OpenJDK 17.0.15): G1 (KAFKA_GC=g1, -Xlog:gc) and ZGC
// (KAFKA_GC=zgc, -Xlog:gc,gc+phases; the stalls on a 256 MB heap).
func TestGCLogCountsPausesAndStallsOfEachCollector(t *testing.T) {
	for _, tc := range []struct {
		name, log, collector, want string
	}{
		{"g1", `[0.010s] Using G1
[2.406s] GC(2) Pause Young (Concurrent Start) (Metadata GC Threshold) 25M->8M(512M) 7.602ms
[2.408s] GC(3) Concurrent Mark Cycle
[2.428s] GC(3) Pause Remark 9M->9M(512M) 2.839ms
[2.443s] GC(3) Pause Cleanup 10M->10M(512M) 0.078ms
[2.459s] GC(3) Concurrent Mark Cycle 50.685ms
[5.569s] GC(8) Pause Young (Prepare Mixed) (G1 Evacuation Pause) 53M->36M(512M) 22.170ms
`, "G1", "4, 22, 33"},
		{"zgc", `[0.066s] Using The Z Garbage Collector
[10.970s] GC(40) Pause Mark Start 0.010ms
[11.052s] GC(40) Concurrent Mark 82.128ms
[11.052s] GC(40) Pause Mark End 0.020ms
[11.052s] GC(40) Concurrent Mark Free 0.000ms
[11.064s] GC(40) Concurrent Process Non-Strong References 11.988ms
[11.064s] GC(40) Concurrent Reset Relocation Set 0.002ms
[11.065s] GC(40) Concurrent Select Relocation Set 0.667ms
[11.065s] GC(40) Pause Relocate Start 0.011ms
[11.067s] GC(40) Concurrent Relocate 1.865ms
[11.067s] GC(40) Garbage Collection (Allocation Rate) 222M(87%)->184M(72%)
[5.626s] Allocation Stall (persister-state-manager-reaper) 11.807ms
[5.627s] Allocation Stall (data-plane-kafka-request-handler-3) 26.349ms
`, "The Z Garbage Collector", "3, 0.02, 0.04; allocation stalls 2, 26, 38"},
		{"zgc without gc+phases", `[0.418s] Using The Z Garbage Collector
[2.143s] GC(0) Garbage Collection (Warmup) 52M(10%)->30M(6%)
`, "The Z Garbage Collector", "0, 0, 0"},
		{"shenandoah", `[0.009s] Using Shenandoah
[1.822s] Trigger: Metadata GC Threshold
[1.822s] GC(0) Concurrent reset 0.066ms
[1.823s] GC(0) Pause Init Mark (unload classes) 0.025ms
[1.864s] GC(0) Pause Final Mark (unload classes) 0.105ms
[1.877s] GC(0) Concurrent cleanup 67M->67M(512M) 0.137ms
[1.896s] GC(0) Pause Init Update Refs 0.007ms
[1.909s] GC(0) Pause Final Update Refs 0.045ms
`, "Shenandoah", "4, 0.10, 0.18"},
		{"decorated with level and tags", `[0.005s][info][gc] Using G1
[14.632s][info][gc] GC(19) Pause Young (Normal) (G1 Evacuation Pause) 462M->169M(512M) 21.032ms
`, "G1", "1, 21, 21"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "gc.log"), []byte(tc.log), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := gcCollector(dir); got != tc.collector {
				t.Errorf("collector %q, want %q", got, tc.collector)
			}
			if got := tally(strings.NewReader(tc.log)).String(); got != tc.want {
				t.Errorf("pauses %q, want %q", got, tc.want)
			}
		})
	}
	if got := gcCollector(t.TempDir()); got != "" {
		t.Errorf("collector without a GC log %q, want none", got)
	}
}

// The GC log grows while a run goes on: summary counts only what came
// after the mark.
func TestGCLogSummaryCountsOnlyAfterTheMark(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gc.log")
	before := "[0.066s] Using The Z Garbage Collector\n[0.597s] GC(0) Pause Mark Start 0.007ms\n"
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	g := markGC(dir)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("[5.627s] Allocation Stall (data-plane-kafka-request-handler-3) 26.349ms\n[11.052s] GC(40) Pause Mark End 0.020ms\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got, want := g.summary(), "1, 0.02, 0.02; allocation stalls 1, 26, 26"; got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}
}
