//go:build failpoint

package relay

import (
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Failpoints let crash and shutdown tests stop the process at a named
// instant. They exist only in a binary built with -tags failpoint (the
// integration harness builds the relay so); the shipped build compiles
// failpoint_off.go instead, where hit does nothing and nothing reads the
// environment. In a failpoint build:
//
//	OUTBOX_RELAY_FAILPOINT=name[:N[:action]]
//
// acts the Nth time (default the first) the point is reached. Unset, a point
// costs one nil check. Points:
//
//	after-flush    every record of a batch is acknowledged, the transaction not committed
//	               (at-least-once: the batch's checkpoint not yet produced)
//	after-commit   a batch is committed, before the next one begins
//	after-partial  a part of a split source transaction is committed
//	any-commit     after-commit or after-partial: every Kafka commit boundary
//
// Actions:
//
//	kill  (default) SIGKILL: the process dies at once, as in a crash
//	term  SIGTERM: the process asks itself to shut down, exactly as an
//	      operator's `kill` or a rolling restart would; the point returns once
//	      the signal has been delivered to the process's handlers, so the
//	      relay sees the shutdown request before it reads another event. The
//	      point acts once: the commits of the shutdown itself pass.
//
// Examples: after-commit:3 (SIGKILL after the third commit),
// any-commit:1:term (SIGTERM right after the first Kafka commit).
const failpointEnv = "OUTBOX_RELAY_FAILPOINT"

type failpointSpec struct {
	name string
	term bool
	left atomic.Int64
}

var failpoint = parseFailpoint(os.Getenv(failpointEnv))

func parseFailpoint(v string) *failpointSpec {
	if v == "" {
		return nil
	}
	parts := strings.SplitN(v, ":", 3)
	f := &failpointSpec{name: parts[0]}
	count := 1
	if len(parts) > 1 {
		if n, err := strconv.Atoi(parts[1]); err == nil && n >= 1 {
			count = n
		}
	}
	if len(parts) > 2 && parts[2] == "term" {
		f.term = true
	}
	f.left.Store(int64(count))
	return f
}

func (f *failpointSpec) matches(name string) bool {
	return f.name == name || (f.name == "any-commit" && (name == "after-commit" || name == "after-partial"))
}

func hit(name string) {
	if failpoint == nil || !failpoint.matches(name) {
		return
	}
	if failpoint.left.Add(-1) != 0 {
		return
	}
	if failpoint.term {
		terminateSelf()
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // never resume
}

// terminateSelf sends SIGTERM to the process and returns once the signal
// package has handed it to every registered handler (run's
// signal.NotifyContext among them), then yields briefly so that the handler's
// goroutine cancels the run context.
func terminateSelf() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	defer signal.Stop(ch)
	_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
	}
	time.Sleep(20 * time.Millisecond)
}
