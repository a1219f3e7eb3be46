// Package source is the relay's administration of its source hosts: what
// is asked of a server before, beside and apart from reading its binlog.
// Inspect and Choose read a host's flavor, settings, grants (Privileges)
// and positions and judge its binlog against the checkpoint (failover.go:
// behind, diverged, purged; Probe asks the server itself; Prove reads the
// checkpoint's last transaction with outbox rows again from a host, the
// proof beyond GTIDs that it holds the checkpoint's history); Retention and
// BehindBytes read what the source sampler reports; FindXAPrepare and
// Unexecuted answer questions about what a server logged; WatchStale
// notices a host in use that stopped receiving transactions.
//
// Package binlog is the stream: the Reader, and every connection to a
// source (binlog.Connect for queries, binlog.Dump for a short replication
// connection), bounded and guarded in one place. This package opens
// connections only through those and never reads a stream's events for
// the relay; binlog never imports it. It decides, it does not act on the
// relay: what to do with a verdict (retry, wait, stop, hold a host) is the
// caller's (internal/relay, internal/preflight, cmd/outbox-relay).
//
// Errors wrap the sentinels of server.go, or binlog's (ErrPurged,
// ErrPositionAhead, ErrPositionDiverged, ...) where a stream would say the
// same.
package source
