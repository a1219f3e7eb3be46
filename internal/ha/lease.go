package ha

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// ErrLeaseLost: this instance lost the lease (its group session ended, or no
// group request was answered for long enough that it may have ended) and
// stopped publishing at once, without a final commit. Not fatal: the
// instance goes back to standby (the relay's error policy classifies it).
var ErrLeaseLost = errclass.New(errclass.Transient, "lease_lost", "lease lost")

// Lease is one term as the active instance: partition 0 of the lock topic
// assigned to this member. It is the fence every produce, checkpoint write
// and commit checks (Err); the relay hands it to the attempt's loop and
// sinks explicitly. A nil *Lease (no election: tests of the loop) is never
// lost.
type Lease struct {
	ctx    context.Context // the term's context: canceled on revoke, loss or stop
	cancel context.CancelFunc
	lost   chan struct{} // closed when lost: stop publishing at once, no commit
	done   chan struct{} // closed when the active phase has ended
	once   sync.Once
	why    atomic.Pointer[string]

	// expired reports, from the clock alone, that the lease can no longer
	// be trusted (nil: never): Err checks it on every produce and commit, so
	// a process that was paused (SIGSTOP, a VM freeze) stops before its
	// watcher goroutine runs again.
	expired func() string
	metrics *metrics.Metrics // nil in tests
}

// NewLease returns a term of its own, not granted by an Elector (tests of
// the relay lose it with Lose); its context ends with parent's.
func NewLease(parent context.Context) *Lease {
	l := &Lease{lost: make(chan struct{}), done: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(parent)
	return l
}

// Context is the term's context, which the term's attempts run under: it
// is canceled when the lease is revoked (a clean hand-over), lost, or the
// term ends. It carries nothing: the fence is the Lease itself.
func (l *Lease) Context() context.Context { return l.ctx }

// Lose ends the lease at once: Lost is closed (the relay's attempt ends
// with ErrLeaseLost as its cause: its delivery stops producing and fails
// what is buffered), Err returns ErrLeaseLost with why.
func (l *Lease) Lose(why string) {
	l.once.Do(func() {
		l.why.Store(&why)
		if l.metrics != nil {
			l.metrics.Ready.Store(false)
			l.metrics.SetState(metrics.StateStandby) // publishes nothing more
		}
		close(l.lost)
		l.cancel()
	})
}

// Err is ErrLeaseLost with the reason once lost, else nil. A nil lease (no
// election) is never lost.
func (l *Lease) Err() error {
	if l == nil {
		return nil
	}
	if l.expired != nil {
		if why := l.expired(); why != "" {
			l.Lose(why)
		}
	}
	select {
	case <-l.lost:
		return fmt.Errorf("%w: %s", ErrLeaseLost, *l.why.Load())
	default:
		return nil
	}
}

// Lost is closed when the lease is lost; nil (never ready) without one.
func (l *Lease) Lost() <-chan struct{} {
	if l == nil {
		return nil
	}
	return l.lost
}
