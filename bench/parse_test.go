package main

import (
	"os"
	"slices"
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
