//go:build integration

package ha

import "testing"

// realTime: under -tags integration every real-time test runs (see
// realtime_off_test.go).
func realTime(t *testing.T) { t.Helper() }
