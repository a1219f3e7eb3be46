package main

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// The breakdown splits an event's time at the relay's steps, joined by id.
func TestStepBreakdownSplitsAnEventAtTheRelaysSteps(t *testing.T) {
	base := time.Unix(1000, 0)
	at := func(ms float64) time.Time { return base.Add(time.Duration(ms * float64(time.Millisecond))) }
	ns := func(ms float64) string { return itoa(at(ms).UnixNano()) }
	trace := strings.Join([]string{
		"took " + ns(1),
		"send " + ns(1.5) + " e1 held",
		"prod " + ns(3) + " e1 1 7",
		"commit 1 7 " + ns(4) + " " + ns(4.5) + " " + ns(6.5) + " " + ns(7) + " " + ns(8),
		"settled 1 7 " + ns(9),
	}, "\n")
	events := []eventTimes{{id: "e1", commit: at(0), arrival: at(10)}, {id: "not-traced", commit: at(0), arrival: at(1)}}
	table, err := stepBreakdown(strings.NewReader(trace), events, nil)
	if err != nil {
		t.Fatal(err)
	}
	// binlog 1, loop 0.5, held 1.5, to seal 1, to start 0.5, flush 2, check 0.5, EndTxn 1, to consumer 2
	for _, want := range []string{
		"1 of 2 events joined",
		"| total | 10.00 |", "| binlog | 1.00 |", "| loop | 0.50 |", "| held | 1.50 |", "| to seal | 1.00 |",
		"| to start | 0.50 |", "| flush | 2.00 |", "| check | 0.50 |", "| EndTxn | 1.00 |", "| to consumer | 2.00 |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("breakdown lacks %q:\n%s", want, table)
		}
	}
	if _, err := stepBreakdown(strings.NewReader("took 1\n"), events, nil); err == nil {
		t.Error("a trace no event joins: no error")
	}
}

// A GC pause counts against the events whose time it overlaps, only.
func TestGCOverlapCountsOnlyTheEventsAPauseMet(t *testing.T) {
	base := time.Unix(1000, 0)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	events := []eventTimes{
		{id: "a", commit: at(0), arrival: at(5)},     // before the pause
		{id: "b", commit: at(18), arrival: at(45)},   // committed during it
		{id: "c", commit: at(100), arrival: at(104)}, // long after
	}
	pauses := []gcPauseAt{{end: at(40), dur: 20 * time.Millisecond}}
	got := gcOverlap(events, pauses)
	if !strings.HasPrefix(got, "1 pauses, 20 ms in all; 1 events (33.3%) overlapped one (p50 27.0") {
		t.Errorf("gcOverlap = %q", got)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
