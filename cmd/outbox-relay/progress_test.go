package main

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for the progress goroutine and the
// test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Progress is reported on a timer, not at the command's updates: a state
// set once is written at the next tick even when no update follows (replay
// reported after its first batch and then only at the end), a state is
// never written twice, and the last one is written at the end.
func TestProgressIsTimed(t *testing.T) {
	var out lockedBuffer
	p := startProgress("replay", &out, false, 20*time.Millisecond)
	p.update("%d of %d records published", 500, 90000)
	for end := time.Now().Add(5 * time.Second); !strings.Contains(out.String(), "replay: 500 of 90000"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the first state was not written by the timer")
		}
	}
	time.Sleep(100 * time.Millisecond) // five ticks without an update
	if n := strings.Count(out.String(), "\n"); n != 1 {
		t.Fatalf("%d lines after ticks without an update, want 1:\n%s", n, out.String())
	}
	p.update("%d of %d records published", 90000, 90000)
	p.done()
	p.done()
	if got := out.String(); got != "replay: 500 of 90000 records published\nreplay: 90000 of 90000 records published\n" {
		t.Fatalf("got:\n%s", got)
	}
	if perSecond(12345, 1000*time.Millisecond+678*time.Microsecond) != 12337 || perSecond(5, 0) != 0 {
		t.Fatal("perSecond does not round to a whole number")
	}
}
