package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The latency breakdown (-latency-steps DIR): each latency run writes its
// events (id, the writer's COMMIT returning, the read_committed consumer
// receiving it) into DIR/NAME.events, and a relay built with -tags
// steptrace writes its steps into DIR/NAME.steps (internal/relay's
// steptrace_on.go: when the loop took the reader's hand-off, handed the
// record over, the record went into a lane's transaction, and that
// transaction's seal, flush, check and EndTxn). Joined by event id, every
// event's time splits into:
//
//	binlog      COMMIT returned -> the loop took the hand-off holding it
//	loop        -> the record handed over to the delivery
//	held        -> produced into a lane (waiting for the commit in flight to flush)
//	to seal     -> its batch sealed (the commit in flight ended, the loop sealed)
//	to start    -> the lane's goroutine began the commit
//	flush       -> every record of the batch acknowledged
//	check       -> the second lane's check of the first (DescribeTransactions)
//	EndTxn      -> EndTxn answered
//	to consumer -> the consumer received it (markers, LSO, the fetch)

// gcPauseAt is a pause (or an allocation stall) of the broker's JVM: when
// its line appeared in the GC log (the pause's end, within gcPoll) and how
// long it was.
type gcPauseAt struct {
	end time.Time
	dur time.Duration
}

// gcPoll is how often watch looks at the GC log.
const gcPoll = time.Millisecond

// watch follows the GC log from now on, noting when each pause line
// appears; the returned function stops it and returns the pauses. On a log
// it cannot follow it returns none.
func (g *gcLog) watch() func() []gcPauseAt {
	if g == nil {
		return func() []gcPauseAt { return nil }
	}
	stop := make(chan struct{})
	out := make(chan []gcPauseAt, 1)
	go func() {
		var pauses []gcPauseAt
		defer func() { out <- pauses }()
		f, err := os.Open(g.path)
		if err != nil {
			return
		}
		defer f.Close()
		if _, err := f.Seek(0, io.SeekEnd); err != nil {
			return
		}
		var partial string
		buf := make([]byte, 64<<10)
		tick := time.NewTicker(gcPoll)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			n, _ := f.Read(buf)
			if n == 0 {
				continue
			}
			now := time.Now()
			lines := strings.Split(partial+string(buf[:n]), "\n")
			partial = lines[len(lines)-1]
			for _, l := range lines[:len(lines)-1] {
				if ms, _, ok := gcLine(l); ok { // a stall holds an event as a pause does
					pauses = append(pauses, gcPauseAt{end: now, dur: time.Duration(ms * float64(time.Millisecond))})
				}
			}
		}
	}()
	return func() []gcPauseAt { close(stop); return <-out }
}

// eventTimes is one event of a latency run.
type eventTimes struct {
	id              string
	commit, arrival time.Time
}

// overlaps reports whether a pause overlapped e's time.
func overlaps(e eventTimes, pauses []gcPauseAt) bool {
	for _, p := range pauses {
		if p.end.After(e.commit) && p.end.Add(-p.dur-gcPoll).Before(e.arrival) {
			return true
		}
	}
	return false
}

// gcOverlap sums up how the broker's GC pauses met the events: how many
// events a pause overlapped, their latency, and the others'.
func gcOverlap(events []eventTimes, pauses []gcPauseAt) string {
	var hit, calm []time.Duration
	var paused time.Duration
	for _, e := range events {
		if overlaps(e, pauses) {
			hit = append(hit, e.arrival.Sub(e.commit))
		} else {
			calm = append(calm, e.arrival.Sub(e.commit))
		}
	}
	for _, p := range pauses {
		paused += p.dur
	}
	all := append(slices.Clone(hit), calm...)
	slices.Sort(all)
	slices.Sort(hit)
	slices.Sort(calm)
	q := func(v []time.Duration, x float64) float64 {
		if len(v) == 0 {
			return 0
		}
		return msOf(v[int(x*float64(len(v)-1))])
	}
	tail := 0
	if len(all) > 0 {
		p99 := all[int(0.99*float64(len(all)-1))]
		for _, d := range hit {
			if d >= p99 {
				tail++
			}
		}
	}
	return fmt.Sprintf("%d pauses, %.0f ms in all; %d events (%.1f%%) overlapped one (p50 %.1f, p99 %.1f ms), %d of the %d at or above the p99; "+
		"the other events p50 %.1f, p90 %.1f, p99 %.1f ms", len(pauses), msOf(paused), len(hit), 100*float64(len(hit))/float64(max(len(events), 1)),
		q(hit, 0.5), q(hit, 0.99), tail, len(all)-int(0.99*float64(len(all)-1)), q(calm, 0.5), q(calm, 0.9), q(calm, 0.99))
}

// stepNames are the steps of the breakdown, in order.
var stepNames = []string{"binlog", "loop", "held", "to seal", "to start", "flush", "check", "EndTxn", "to consumer"}

// writeSteps writes a run's events and, when the relay wrote its steps,
// prints the breakdown.
func (h *harness) writeSteps(name string, events []eventTimes, pauses []gcPauseAt) error {
	f, err := os.Create(filepath.Join(h.latencySteps, name+".events"))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for _, e := range events {
		fmt.Fprintf(w, "%s %d %d\n", e.id, e.commit.UnixNano(), e.arrival.UnixNano())
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if pauses != nil {
		fmt.Printf("\nBroker GC during %s: %s\n", name, gcOverlap(events, pauses))
	}
	sf, err := os.Open(filepath.Join(h.latencySteps, name+".steps"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: no step trace of %s (a relay built with -tags steptrace writes it): %v\n", name, err)
		return nil
	}
	defer sf.Close()
	table, err := stepBreakdown(sf, events, pauses)
	if err != nil {
		// at-least-once has no lanes: nothing to join
		fmt.Fprintf(os.Stderr, "bench: step trace of %s: %v\n", name, err)
		return nil
	}
	fmt.Printf("\nSteps of %s, ms:\n\n%s\n", name, table)
	return nil
}

type commitSteps struct{ seal, start, flushed, checked, end int64 }

// stepBreakdown joins the relay's step trace with the events and returns a
// Markdown table: each step's p50 / p90 / p99 over all events, and its mean
// over the slowest 1% and 10% of them.
func stepBreakdown(r io.Reader, events []eventTimes, pauses []gcPauseAt) (string, error) {
	type laneSeq struct{ lane, seq int }
	var took []int64
	send := map[string]int64{}
	prod := map[string]int64{}
	in := map[string]laneSeq{}
	commits := map[laneSeq]commitSteps{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		num := func(i int) int64 { n, _ := strconv.ParseInt(f[i], 10, 64); return n }
		switch f[0] {
		case "took":
			took = append(took, num(1))
		case "send":
			send[f[2]] = num(1)
		case "prod":
			if len(f) == 5 {
				prod[f[2]] = num(1)
				in[f[2]] = laneSeq{int(num(3)), int(num(4))}
			}
		case "commit":
			if len(f) == 8 {
				commits[laneSeq{int(num(1)), int(num(2))}] = commitSteps{num(3), num(4), num(5), num(6), num(7)}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	slices.Sort(took)
	type row struct {
		total time.Duration
		step  []time.Duration
		gc    bool // a broker GC pause overlapped the event's time
	}
	var rows []row
	for _, e := range events {
		s, ok1 := send[e.id]
		p, ok2 := prod[e.id]
		c, ok3 := commits[in[e.id]]
		if !ok1 || !ok2 || !ok3 {
			continue
		}
		i, _ := slices.BinarySearch(took, s+1)
		t := s
		if i > 0 {
			t = took[i-1]
		}
		ms := []int64{e.commit.UnixNano(), t, s, p, max(c.seal, p), c.start, c.flushed, c.checked, c.end, e.arrival.UnixNano()}
		r := row{total: e.arrival.Sub(e.commit), gc: overlaps(e, pauses)}
		for k := 1; k < len(ms); k++ {
			r.step = append(r.step, time.Duration(ms[k]-ms[k-1]))
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return "", fmt.Errorf("no event of %d joined the trace", len(events))
	}
	slices.SortFunc(rows, func(a, b row) int { return int(a.total - b.total) })
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d events joined; the slowest 1%% from %.1f ms, the slowest 10%% from %.1f ms\n\n",
		len(rows), len(events), msOf(rows[len(rows)*99/100].total), msOf(rows[len(rows)*9/10].total))
	table := func(b *strings.Builder, rows []row) {
		b.WriteString("| step | p50 | p90 | p99 | mean | mean of the slowest 10% | mean of the slowest 1% |\n|---|---|---|---|---|---|---|\n")
		mean := func(rs []row, k int) float64 {
			var sum time.Duration
			for _, r := range rs {
				if k < 0 {
					sum += r.total
				} else {
					sum += r.step[k]
				}
			}
			return msOf(sum) / float64(len(rs))
		}
		for k := -1; k < len(stepNames); k++ {
			name := "total"
			vals := make([]time.Duration, len(rows))
			for i, r := range rows {
				if k < 0 {
					vals[i] = r.total
				} else {
					vals[i] = r.step[k]
					name = stepNames[k]
				}
			}
			slices.Sort(vals)
			q := func(x float64) float64 { return msOf(vals[int(x*float64(len(vals)-1))]) }
			fmt.Fprintf(b, "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", name, q(0.5), q(0.9), q(0.99),
				mean(rows, k), mean(rows[len(rows)*9/10:], k), mean(rows[len(rows)*99/100:], k))
		}
	}
	table(&b, rows)
	if pauses != nil {
		var calm []row
		for _, r := range rows {
			if !r.gc {
				calm = append(calm, r)
			}
		}
		if len(calm) > 0 {
			b.WriteString("\nThe events no broker GC pause overlapped:\n\n")
			table(&b, calm)
		}
	}
	return b.String(), nil
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
