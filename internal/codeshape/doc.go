// Package codeshape holds no code the relay runs: its tests measure the
// shipped binary's own packages (the module's packages that
// cmd/outbox-relay links in its default build) against the limits the
// engine keeps (docs/architecture.md, "The code's shape"), and check that
// every file docs/architecture.md names exists.
package codeshape
