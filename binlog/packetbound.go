package binlog

import (
	"fmt"

	"github.com/outbox-relay/outbox-relay/internal/membudget"
)

// The bound of one source packet (a binlog event, a result row).
//
// go-mysql holds a packet whole before anything decodes it (in a buffer
// that grows by doubling, the old one alive while it is copied), then
// decodes it, and the relay copies a captured row into its record: a
// packet of N bytes costs the process up to about 1.8 N at its peak
// besides the relay's own 50-60 MB (a 60 MB row 139 MB peak RSS, a 120 MB
// row 222 MB; a 96 MiB packet cut at the bound 227 MB; a 900 MB event
// once 1.58 GB). So the bound comes from what the process may use, never
// from the server it guards against:
//
//   - source.max_packet_bytes, when set, is the bound;
//   - unset, the bound is a quarter of the memory budget plus
//     packetHeadroom, between minPacketBound and maxPacketCap: 65 MiB in
//     the shipped 256 MiB (the Kubernetes manifest, the Helm chart, the
//     systemd unit's MemoryMax), which holds a row up to MySQL's default
//     max_allowed_packet (64 MiB). The budget is the cgroup's memory limit
//     or GOMEMLIMIT, the smaller (internal/membudget), else the shipped
//     256 MiB;
//   - the server's max_allowed_packet can only lower it: twice it plus
//     packetHeadroom (a row event carries a row's before and after image)
//     when that is less. A server answering 1 GiB gets the budget's bound.
//
// A packet over the bound stops the relay before go-mysql holds more than
// the bound (ErrPacketBound, naming source.max_packet_bytes and where the
// bound came from): raise source.max_packet_bytes and the memory limit
// together.

const (
	// packetHeadroom is added to the bound derived from max_allowed_packet:
	// the event and row headers around the largest value.
	packetHeadroom = 1 << 20
	// maxPacketCap bounds the default (MySQL's own limit of
	// max_allowed_packet and replica_max_allowed_packet is 1 GiB).
	maxPacketCap = 1<<30 + packetHeadroom
	// defaultMemoryBudget is the budget when nothing sets one: the
	// shipped memory limit.
	defaultMemoryBudget = 256 << 20
	// minPacketBound is the smallest default, whatever the budget.
	minPacketBound = 16 << 20
)

// budgetBound is the packet bound cfg's memory budget allows, and the
// budget in words.
func (cfg Config) budgetBound() (int64, string) {
	b := cfg.MemoryBudget
	if b.Bytes <= 0 {
		b = membudget.Budget{Bytes: defaultMemoryBudget, From: "none set: the shipped limit"}
	}
	n := b.Bytes/4 + packetHeadroom
	return min(max(n, minPacketBound), maxPacketCap), fmt.Sprintf("memory budget of %d MiB (%s)", b.Bytes>>20, b.From)
}

// defaultBound is the bound with source.max_packet_bytes unset, for a
// server whose max_allowed_packet is n (0: unknown); fromServer: the
// server's max_allowed_packet set it (lower than the budget's).
func (cfg Config) defaultBound(n int64) (limit int64, how string, fromServer bool) {
	limit, budget := cfg.budgetBound()
	if n > 0 && 2*n+packetHeadroom < limit {
		return 2*n + packetHeadroom, fmt.Sprintf("source.max_packet_bytes unset: twice the server's max_allowed_packet %d plus %d, "+
			"under the %d the %s allows", n, packetHeadroom, limit, budget), true
	}
	return limit, fmt.Sprintf("source.max_packet_bytes unset: the default for a %s", budget), false
}
