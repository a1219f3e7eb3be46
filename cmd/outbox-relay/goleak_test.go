package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine they started (the
// HTTP server, the signal watcher, the background audit of run) is still
// running once they have all ended.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
