package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/rs/zerolog"
)

// Signals of `run` (docs/cli.md "Signals"):
//
//   - SIGTERM, SIGINT: stop cleanly: commit what is held, write the final
//     checkpoint, exit 0.
//   - SIGHUP: logged and ignored. The relay writes its log to stderr only
//     (no log file to reopen) and reads its configuration once, at start:
//     restart it to apply a new one. A terminal that closes, or a
//     supervisor that sends SIGHUP for a reload, must not kill it (Go's
//     default: exit at once, no final checkpoint, and a death by signal
//     that systemd's Restart=on-failure counts as clean).
//   - SIGUSR1, SIGUSR2: logged and ignored.
//   - SIGPIPE: ignored, so that a write to a closed stderr or stdout pipe
//     fails with EPIPE instead of killing the process (Go's default for
//     fds 1 and 2). A log stream that breaks stops the relay cleanly, as
//     SIGTERM does, and it exits 75 (restart) with its final checkpoint
//     written: a relay nobody can hear is restarted with a working log
//     stream rather than left running silent.
//   - SIGQUIT: Go's own: every goroutine's stack on stderr, exit 2, no final
//     checkpoint (like kill -9 for the data: a restart resumes from the last
//     committed checkpoint). A debugging tool, kept.

// errLogClosed ends `run` when its log stream is gone.
var errLogClosed = errors.New("log stream closed")

// stopSignals are the signals that stop `run` cleanly.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// ignoredSignals are logged and otherwise ignored by `run`.
var ignoredSignals = []os.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2}

// runSignals returns ctx's child that ends on SIGINT/SIGTERM (cause: the
// signal) or when stop is called (cause: its error), and starts logging the
// ignored signals. SIGPIPE is ignored from here on. Call the returned
// function to stop watching.
func runSignals(ctx context.Context, log *zerolog.Logger) (context.Context, func(error), func()) {
	signal.Ignore(syscall.SIGPIPE)
	ctx, cancel := context.WithCancelCause(ctx)
	stopCh := make(chan os.Signal, 1)
	signal.Notify(stopCh, stopSignals...)
	other := make(chan os.Signal, 4)
	signal.Notify(other, ignoredSignals...)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case s := <-stopCh:
				cancel(fmt.Errorf("%s signal received", s))
			case s := <-other:
				ev := log.Warn().Str("signal", s.String())
				if s == syscall.SIGHUP {
					ev = ev.Str("note", "the log goes to stderr only and the configuration is read at start: restart to apply a new one")
				}
				ev.Msg("signal ignored: the relay goes on (SIGTERM or SIGINT stop it cleanly)")
			}
		}
	}()
	var once sync.Once
	return ctx, cancel, func() {
		once.Do(func() {
			signal.Stop(stopCh)
			signal.Stop(other)
			close(done)
			wg.Wait()
			cancel(context.Canceled)
		})
	}
}

// pipeWriter is the log's writer: once a write fails because the reading
// end of the pipe or socket (journald's stream) is gone (EPIPE, ECONNRESET),
// it drops everything after and calls
// broken once (the relay then stops cleanly). Other write errors are
// returned as they are (zerolog reports them and goes on).
//
// It also keeps the last line last: what Final writes seals it, and a
// write after it is dropped. A library's goroutine may outlive the
// client it belongs to (franz-go's Close returns before the goroutine of
// a second LeaveGroup has logged its debug line), and `relay stopped` is
// the last line operators and supervisors read (README "Exit codes").
type pipeWriter struct {
	w      io.Writer
	f      *os.File // w when it is a file: for the terminal check
	gone   atomic.Bool
	once   sync.Once
	broken func(error)
	mu     sync.RWMutex // held for writing by the final line
	sealed bool         // the final line is written
}

func newPipeWriter(f *os.File) *pipeWriter { return &pipeWriter{w: f, f: f} }

// onBroken sets what runs when the pipe breaks.
func (p *pipeWriter) onBroken(f func(error)) { p.broken = f }

func (p *pipeWriter) Write(b []byte) (int, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.sealed {
		return len(b), nil
	}
	return p.write(b)
}

// Final is the writer of the log's last line: a write through it waits for
// the writes under way, and every write after it is dropped.
func (p *pipeWriter) Final() io.Writer { return finalWriter{p} }

type finalWriter struct{ p *pipeWriter }

func (f finalWriter) Write(b []byte) (int, error) {
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	f.p.sealed = true
	return f.p.write(b)
}

// File is the file written to, for the terminal check of the console format.
func (f finalWriter) File() *os.File { return f.p.f }

func (p *pipeWriter) write(b []byte) (int, error) {
	if p.gone.Load() {
		return len(b), nil
	}
	n, err := p.w.Write(b)
	if err != nil && (errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)) {
		p.gone.Store(true)
		p.once.Do(func() {
			if p.broken != nil {
				p.broken(fmt.Errorf("%w: %w", errLogClosed, err))
			}
		})
		return len(b), nil
	}
	return n, err
}

// File is the file written to, for the terminal check of the console format.
func (p *pipeWriter) File() *os.File { return p.f }
