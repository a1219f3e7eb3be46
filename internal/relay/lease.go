package relay

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// ErrLeaseLost: this instance lost the lease (its group session ended, or no
// group request was answered for long enough that it may have ended) and
// stopped publishing at once, without a final commit. Not fatal: the
// instance goes back to standby.
var ErrLeaseLost = newError(Transient, "lease_lost", "lease lost")

// errRevoked: the lease was handed over cleanly (a rebalance moved it); the
// attempt committed what it held. The instance goes back to standby.
var errRevoked = newError(Transient, "lease_revoked", "lease revoked")

// lease is one term as the active instance: partition 0 of the lock topic
// assigned to this member.
type lease struct {
	ctx    context.Context // the attempts' context: canceled on revoke, loss or stop
	cancel context.CancelFunc
	lost   chan struct{} // closed when lost: stop publishing at once, no commit
	done   chan struct{} // closed when the active phase has ended
	once   sync.Once
	why    atomic.Pointer[string]

	// expired reports, from the clock alone, that the lease can no longer
	// be trusted (nil: never): err checks it on every produce and commit, so
	// a process that was paused (SIGSTOP, a VM freeze) stops before its
	// watcher goroutine runs again.
	expired func() string
	metrics *metrics.Metrics // nil in tests

	mu    sync.Mutex
	stops []func() // run once when lost (the sinks' produce abort)
}

type leaseKey struct{}

func newLease(parent context.Context) *lease {
	l := &lease{lost: make(chan struct{}), done: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(context.WithValue(parent, leaseKey{}, l))
	return l
}

// leaseFrom is the lease ctx carries; nil without one (tests of the loop).
func leaseFrom(ctx context.Context) *lease {
	l, _ := ctx.Value(leaseKey{}).(*lease)
	return l
}

// lose ends the lease at once: the sinks stop producing and abort what is
// buffered, the loop returns ErrLeaseLost.
func (l *lease) lose(why string) {
	l.once.Do(func() {
		l.why.Store(&why)
		if l.metrics != nil {
			l.metrics.Ready.Store(false)
			l.metrics.SetState(metrics.StateStandby) // publishes nothing more
		}
		close(l.lost)
		l.mu.Lock()
		stops := l.stops
		l.stops = nil
		l.mu.Unlock()
		for _, f := range stops {
			f()
		}
		l.cancel()
	})
}

// onLost runs f when the lease is lost (at once if it already is).
func (l *lease) onLost(f func()) {
	l.mu.Lock()
	select {
	case <-l.lost:
		l.mu.Unlock()
		f()
		return
	default:
	}
	l.stops = append(l.stops, f)
	l.mu.Unlock()
}

// err is ErrLeaseLost with the reason once lost, else nil. A nil lease (no
// election) is never lost.
func (l *lease) err() error {
	if l == nil {
		return nil
	}
	if l.expired != nil {
		if why := l.expired(); why != "" {
			l.lose(why)
		}
	}
	select {
	case <-l.lost:
		return fmt.Errorf("%w: %s", ErrLeaseLost, *l.why.Load())
	default:
		return nil
	}
}

// lostChan is closed when the lease is lost; nil (never ready) without one.
func (l *lease) lostChan() <-chan struct{} {
	if l == nil {
		return nil
	}
	return l.lost
}
