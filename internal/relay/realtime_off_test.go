//go:build !integration

package relay

import "testing"

// realTime marks a test driven by real time (session timeouts, commits slowed
// on purpose, a throttled broker against kafka.request_timeout, timed random
// chains): seconds of wall time for little CPU. `go test ./...` skips it to stay fast; the
// integration build (make test-integration, -tags integration) runs it.
func realTime(t *testing.T) {
	t.Helper()
	t.Skip("real-time test (seconds of timers): runs under -tags integration (make test-integration)")
}
