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

// Progress is reported on a timer, not at the command's updates: the
// newest state is written at every tick with the time since the start,
// also when no update came (a batch that takes minutes still shows the
// command at work; replay reported after its first batch and then only at
// the end), and the last state is written once at the end.
func TestProgressIsTimed(t *testing.T) {
	var out lockedBuffer
	p := startProgress("replay", &out, false, 20*time.Millisecond)
	p.update("%d of %d records published", 500, 90000)
	for end := time.Now().Add(5 * time.Second); strings.Count(out.String(), "replay: 500 of 90000 records published [") < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("three ticks without an update did not write the state three times:\n%s", out.String())
		}
	}
	p.update("%d of %d records published", 90000, 90000)
	p.done()
	p.done()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "replay: 90000 of 90000 records published [") ||
		strings.Count(out.String(), "90000 of 90000") != 1 {
		t.Fatalf("the last state is not written once at the end:\n%s", out.String())
	}
	if perSecond(12345, 1000*time.Millisecond+678*time.Microsecond) != 12337 || perSecond(5, 0) != 0 {
		t.Fatal("perSecond does not round to a whole number")
	}
}
