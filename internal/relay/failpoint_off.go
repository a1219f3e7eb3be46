//go:build !failpoint

package relay

// hit marks a failpoint (failpoint.go). The shipped build has none: this
// does nothing and is inlined away, so no failpoint name or environment
// variable reaches the binary (cmd/outbox-relay's
// TestShippedBinaryCarriesNoTestMachinery checks).
func hit(string) {}
