//go:build integration

package mysqlitest

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/internal/mysqlsource"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// hugeEventProxy forwards connections to target until a client asks for
// the binlog (COM_BINLOG_DUMP_GTID), then answers it with one event of
// size bytes instead of the server's stream: continuation packets of
// zeros, made as they are written (the test holds 16 MiB of it, never the
// event).
func hugeEventProxy(t *testing.T, target string, size int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { proxyHuge(c, target, size) })
		}
	})
	return ln.Addr().String()
}

func proxyHuge(c net.Conn, target string, size int64) {
	defer c.Close()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(c, up) }()
	hdr := make([]byte, 4)
	for {
		if _, err := io.ReadFull(c, hdr); err != nil {
			return
		}
		n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
		payload := make([]byte, n)
		if _, err := io.ReadFull(c, payload); err != nil {
			return
		}
		if hdr[3] == 0 && n > 0 && payload[0] == 0x1e { // COM_BINLOG_DUMP_GTID
			up.Close()
			break
		}
		if _, err := up.Write(append(hdr, payload...)); err != nil {
			return
		}
	}
	chunk := make([]byte, 4+0xffffff)
	chunk[0], chunk[1], chunk[2] = 0xff, 0xff, 0xff
	for seq := byte(1); size > 0; seq++ {
		chunk[3] = seq
		if _, err := c.Write(chunk); err != nil {
			return
		}
		size -= 0xffffff
	}
}

// A server that says its max_allowed_packet is 1 GiB and then sends a 900
// MB event: the relay, with source.max_packet_bytes unset and the shipped
// 256 MiB budget, stops with the packet bound named (exit 78: raise
// source.max_packet_bytes and the memory limit) and its peak RSS stays
// within three quarters of the budget. The server's figure alone once made
// the bound 1 GiB and the relay 1.58 GB.
func TestMySQLHugeEventStopsWithinTheMemoryBudget(t *testing.T) {
	p := startPrimary(t, mysqlsource.Options{Variables: map[string]string{"max_allowed_packet": "1073741824"}})
	newApp(t, p)
	k := itest.StartKafka(t)
	cfg := relayConfig(t, k, "mysql", hugeEventProxy(t, p.Addr(), 900<<20))
	proc := env.StartProc(t, itest.WriteConfig(t, cfg))
	code, err := proc.Wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	out := proc.Output()
	if code != relay.ExitConfig || !strings.Contains(out, "source packet over the relay's bound") || !strings.Contains(out, "source.max_packet_bytes") {
		t.Fatalf("exit %d, want %d with the packet bound named:\n%s", code, relay.ExitConfig, out)
	}
	peak := proc.PeakRSS()
	t.Logf("a 900 MB event from a server saying max_allowed_packet 1 GiB: stopped, peak RSS %d MB", peak>>20)
	if limit := int64(256 << 20); peak > limit*3/4 {
		t.Fatalf("peak RSS %d MB, over three quarters of the shipped %d MB", peak>>20, limit>>20)
	}
}
