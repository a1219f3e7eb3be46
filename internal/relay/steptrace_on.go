//go:build steptrace

package relay

import (
	"bufio"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Step tracing (bench's latency breakdown) exists only in a binary built
// with -tags steptrace; the shipped build compiles steptrace_off.go, where
// every call is empty. In a steptrace build, OUTBOX_RELAY_STEPTRACE=FILE
// writes one line per step, wall clock in nanoseconds:
//
//	took T                       the loop took a hand-off of the reader's
//	send T ID held|lane LANE     the loop handed the record over
//	prod T ID LANE SEQ           the record went into lane LANE's transaction SEQ
//	commit LANE SEQ SEAL START FLUSHED CHECKED END   a lane's commit: sealed, its goroutine began, all
//	                             acknowledged, the second lane's check done, EndTxn returned
//	settled LANE SEQ T           the coordinator completed it (or the wait ended)
type stepTracer struct {
	mu    sync.Mutex
	w     *bufio.Writer
	lanes map[*lane]int
	seq   map[*lane]int
}

var steps = newStepTracer(os.Getenv("OUTBOX_RELAY_STEPTRACE"))

func newStepTracer(path string) *stepTracer {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil
	}
	t := &stepTracer{w: bufio.NewWriterSize(f, 1<<20), lanes: map[*lane]int{}, seq: map[*lane]int{}}
	go func() {
		for range time.Tick(100 * time.Millisecond) {
			t.mu.Lock()
			_ = t.w.Flush()
			t.mu.Unlock()
		}
	}()
	return t
}

func (t *stepTracer) lane(ln *lane) int {
	i, ok := t.lanes[ln]
	if !ok {
		i = len(t.lanes)
		t.lanes[ln] = i
	}
	return i
}

func recordID(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == "id" {
			return string(h.Value)
		}
	}
	return "-"
}

func traceTook() {
	if steps == nil {
		return
	}
	steps.mu.Lock()
	fmt.Fprintf(steps.w, "took %d\n", time.Now().UnixNano())
	steps.mu.Unlock()
}

func traceSend(r *kgo.Record, held bool, ln *lane) {
	if steps == nil {
		return
	}
	steps.mu.Lock()
	if held {
		fmt.Fprintf(steps.w, "send %d %s held\n", time.Now().UnixNano(), recordID(r))
	} else {
		fmt.Fprintf(steps.w, "send %d %s lane %d\n", time.Now().UnixNano(), recordID(r), steps.lane(ln))
	}
	steps.mu.Unlock()
}

func traceProduce(ln *lane, r *kgo.Record) {
	if steps == nil {
		return
	}
	steps.mu.Lock()
	fmt.Fprintf(steps.w, "prod %d %s %d %d\n", time.Now().UnixNano(), recordID(r), steps.lane(ln), steps.seq[ln])
	steps.mu.Unlock()
}

func traceCommit(ln *lane, seal, start, flushed, checked time.Time) {
	if steps == nil {
		return
	}
	steps.mu.Lock()
	fmt.Fprintf(steps.w, "commit %d %d %d %d %d %d %d\n", steps.lane(ln), steps.seq[ln], seal.UnixNano(), start.UnixNano(), flushed.UnixNano(), checked.UnixNano(), time.Now().UnixNano())
	steps.seq[ln]++
	steps.mu.Unlock()
}

func traceSettled(ln *lane) {
	if steps == nil {
		return
	}
	steps.mu.Lock()
	fmt.Fprintf(steps.w, "settled %d %d %d\n", steps.lane(ln), steps.seq[ln]-1, time.Now().UnixNano())
	steps.mu.Unlock()
}
