package binlog

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/hostiledb"
	"github.com/outbox-relay/outbox-relay/internal/membudget"
)

// The default bound comes from the memory budget; the server's
// max_allowed_packet can lower it, never raise it.
func TestDefaultPacketBoundFitsTheMemoryBudget(t *testing.T) {
	for _, c := range []struct {
		name       string
		budget     int64
		serverMax  int64
		want       int64
		fromServer bool
	}{
		{"no budget found: the shipped 256 MiB", 0, 0, 65 << 20, false},
		{"the shipped pod, a server saying 1 GiB", 256 << 20, 1 << 30, 65 << 20, false},
		{"the shipped pod, MySQL's default 64 MiB", 256 << 20, 64 << 20, 65 << 20, false},
		{"the shipped pod, MariaDB's default 16 MiB", 256 << 20, 16 << 20, 33 << 20, true},
		{"a 1 GiB pod", 1 << 30, 1 << 30, 257 << 20, false},
		{"a large host", 64 << 30, 1 << 30, maxPacketCap, false},
		{"a tiny pod", 32 << 20, 0, minPacketBound, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{MemoryBudget: membudget.Budget{Bytes: c.budget, From: "the test"}}
			got, how, fromServer := cfg.defaultBound(c.serverMax)
			if got != c.want || fromServer != c.fromServer {
				t.Fatalf("bound %d (%s), from the server %v; want %d, %v", got, how, fromServer, c.want, c.fromServer)
			}
		})
	}
}

// A server that says its max_allowed_packet is 1 GiB and then sends a
// packet far larger than the memory budget allows is cut at the budget's
// bound, and the error names the setting to raise and where the bound came
// from: on a connection of `check` and on the replication connection.
func TestPacketBoundIgnoresAServersLargeMaxAllowedPacket(t *testing.T) {
	srv := hostiledb.Start(t, hostiledb.LargeMaxAllowedPacket)
	cfg := guardConfig(srv.Addr)
	cfg.MemoryBudget = membudget.Budget{Bytes: 128 << 20, From: "the test's"}
	bound, _ := cfg.budgetBound() // 33 MiB
	var read atomic.Int64
	guard := newLoginGuard(cfg, srv.Addr)
	d := &net.Dialer{}
	dial := guard.dial(func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := d.DialContext(ctx, network, addr)
		return countingReads{Conn: nc, n: &read, max: bound + 32<<20}, err
	})
	err := connectThrough(t, cfg, dial, guard)
	if !errors.Is(err, ErrPacketBound) {
		t.Fatalf("got %v, want %v", err, ErrPacketBound)
	}
	for _, want := range []string{"raise source.max_packet_bytes", "memory budget of 128 MiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if got := read.Load(); got > bound+1<<20 {
		t.Fatalf("read %d bytes, want at most the bound %d and one read", got, bound)
	}
	if err := runReader(t, cfg, srv.Addr); !errors.Is(err, ErrPacketBound) || !strings.Contains(err.Error(), "memory budget") {
		t.Fatalf("replication: %v, want %v naming the memory budget", err, ErrPacketBound)
	}
}
