package audit

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine they started (a
// background audit's run) is still running once they have all ended.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
