package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"
)

// progressEvery is how often a long command reports its advance when
// stderr is not a terminal (a log, a CI job); on a terminal the line is
// rewritten every second.
const progressEvery = 5 * time.Second

// progress reports a long command's advance on stderr, timed: whatever
// the command does between its updates (a batch that takes a minute, or a
// thousand batches a second), the newest state is written every
// progressEvery with the time since the start (a line each; on a terminal
// one line rewritten every second), and the last state once more when it
// ends unless that tick wrote it. Updates only store the state.
type progress struct {
	name    string
	w       io.Writer
	tty     bool
	start   time.Time
	mu      sync.Mutex
	state   string // the newest update
	written string // the state last written
	stop    chan struct{}
	wg      sync.WaitGroup
	ended   sync.Once
}

func newProgress(name string) *progress {
	tty := term.IsTerminal(int(os.Stderr.Fd()))
	every := progressEvery
	if tty {
		every = time.Second
	}
	return startProgress(name, os.Stderr, tty, every)
}

// startProgress starts writing name's progress to w every interval.
func startProgress(name string, w io.Writer, tty bool, every time.Duration) *progress {
	p := &progress{name: name, w: w, tty: tty, start: time.Now(), stop: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.write(false)
			}
		}
	}()
	return p
}

// update sets the state the next report writes.
func (p *progress) update(format string, a ...any) {
	line := p.name + ": " + fmt.Sprintf(format, a...)
	p.mu.Lock()
	p.state = line
	p.mu.Unlock()
}

// write writes the state with the time since the start; last only when the
// state was not written yet.
func (p *progress) write(last bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == "" || (last && p.state == p.written) {
		return
	}
	line := fmt.Sprintf("%s [%s]", p.state, time.Since(p.start).Round(time.Second))
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\x1b[K", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
	p.written = p.state
}

// done stops the reports and writes the last state if no report did; on a
// terminal it ends the rewritten line. Safe to call more than once.
func (p *progress) done() {
	p.ended.Do(func() {
		close(p.stop)
		p.wg.Wait()
		p.write(true)
		if p.tty && p.written != "" {
			fmt.Fprintln(p.w)
		}
	})
}

// perSecond is n per d, rounded to a whole number for a progress line.
func perSecond(n int, d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(float64(n)/d.Seconds() + 0.5)
}
