package relay

import "sync"

// goroutines owns the goroutines of one attempt (the reader, the source
// sampler, the stale-host watcher, the commit in flight, the settle wait,
// the abort of buffered records on a lost lease): start starts each, wait
// joins them all, so that nothing of an attempt runs on into the next one
// (docs/architecture.md, "Goroutines"). Once wait has begun, start starts
// nothing: the attempt is over and what it would have done is moot (its
// clients are closed next). A nil *goroutines starts its goroutines
// unowned: tests that build a sink or a loop alone.
type goroutines struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// start starts f unless wait has begun, and reports whether it did.
func (g *goroutines) start(f func()) bool {
	if g == nil {
		go f()
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Go(f)
	return true
}

// wait starts nothing more and waits for every goroutine started to return;
// a second call returns at once. The caller ends their context first.
func (g *goroutines) wait() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}
