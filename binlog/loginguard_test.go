package binlog

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/outbox-relay/outbox-relay/internal/hostiledb"
)

const guardPassword = "s3cret-Replication-Pw"

// guardConfig is a source configuration for the hostile servers. A script
// that ends waiting for the client while the client waits for it (a login
// or a query answered out of turn) ends at the relay's own bounds, kept
// short here (2 s each wait of a login, 2 s an answer; 5 s and 30 s by
// default): the tests read what the client sent by then.
func guardConfig(addr string) Config {
	return Config{Hosts: []string{addr}, User: "relay", Password: guardPassword, ServerID: 4242,
		Tables: []string{"app.outbox"}, ConnectTimeout: 2 * time.Second, QueryTimeout: 2 * time.Second, HeartbeatPeriod: time.Second}
}

// runReader runs a Reader against addr (a replication connection, as `run`
// makes) until it returns.
func runReader(t *testing.T, cfg Config, addr string) error {
	t.Helper()
	r := NewReader(cfg, &Server{Addr: addr, Flavor: "mysql"}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	return r.Run(ctx, "", make(chan []Event, 1))
}

// A server (or anyone in the middle of a plaintext connection) that asks
// for mysql_clear_password gets no password: neither the inspection
// connection nor the replication connection sends it.
func TestLoginRefusesCleartextPasswordOverPlaintext(t *testing.T) {
	srv := hostiledb.Start(t, hostiledb.ClearPassword)
	cfg := guardConfig(srv.Addr)
	_, err := Connect(t.Context(), cfg, srv.Addr)
	if !errors.Is(err, ErrInsecureLogin) {
		t.Fatalf("connect: %v, want %v", err, ErrInsecureLogin)
	}
	err = runReader(t, cfg, srv.Addr)
	if !errors.Is(err, ErrInsecureLogin) {
		t.Fatalf("replication: %v, want %v", err, ErrInsecureLogin)
	}
	if srv.Logins() < 2 {
		t.Fatalf("%d logins reached the server, want both connections", srv.Logins())
	}
	if bytes.Contains(srv.Received(), []byte(guardPassword)) {
		t.Fatal("the server received the password in cleartext")
	}
}

// The operator's opt-in lets the cleartext login through (a trusted
// network, a server that needs it).
func TestLoginAllowsCleartextPasswordWhenAllowed(t *testing.T) {
	srv := hostiledb.Start(t, hostiledb.ClearPassword)
	cfg := guardConfig(srv.Addr)
	cfg.AllowCleartextPassword = true
	cfg.MaxPacketBytes = 1 << 20
	conn, err := Connect(t.Context(), cfg, srv.Addr)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	conn.Close()
	if !bytes.Contains(srv.Received(), []byte(guardPassword)) {
		t.Fatal("the allowed cleartext login did not send the password")
	}
}

func countPackets(b []byte) int {
	n := 0
	for len(b) >= 4 {
		l := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
		b = b[min(len(b), 4+l):]
		n++
	}
	return n
}

// A server that keeps sending continuation packets is cut off at the
// bound, before go-mysql joins more than that: the connection reads at most
// the bound and one read's worth past it.
func TestEndlessPacketIsCutAtTheBound(t *testing.T) {
	srv := hostiledb.Start(t, hostiledb.EndlessPacket)
	for _, c := range []struct {
		name  string
		limit int64 // source.max_packet_bytes; 0: from max_allowed_packet
		bound int64
	}{
		{"while learning max_allowed_packet", 0, loginPacketBytes},
		{"configured", 40 << 20, 40 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := guardConfig(srv.Addr)
			cfg.MaxPacketBytes = c.limit
			var read atomic.Int64
			guard := newLoginGuard(cfg, srv.Addr)
			d := &net.Dialer{}
			dial := guard.dial(func(ctx context.Context, network, addr string) (net.Conn, error) {
				nc, err := d.DialContext(ctx, network, addr)
				return countingReads{Conn: nc, n: &read}, err
			})
			err := connectThrough(t, cfg, dial, guard)
			if !errors.Is(err, ErrPacketBound) {
				t.Fatalf("got %v, want %v", err, ErrPacketBound)
			}
			if got := read.Load(); got > c.bound+1<<20 {
				t.Fatalf("read %d bytes, want at most the bound %d and one read", got, c.bound)
			}
		})
	}
	if err := runReader(t, guardConfig(srv.Addr), srv.Addr); !errors.Is(err, ErrPacketBound) {
		t.Fatalf("replication: %v, want %v", err, ErrPacketBound)
	}
}

// connectThrough is Connect with dial, then a query (the configured bound
// skips the query of max_allowed_packet).
func connectThrough(t *testing.T, cfg Config, dial client.Dialer, guard *loginGuard) error {
	conn, err := client.ConnectWithDialer(t.Context(), "tcp", cfg.Hosts[0], cfg.User, guard.clientPassword(), "", dial)
	if err != nil {
		return guard.or(err)
	}
	defer conn.Close()
	if err := guard.bound(conn); err != nil {
		return err
	}
	_, err = query(conn, "SHOW GLOBAL VARIABLES")
	return guard.or(err)
}

// countingReads counts the bytes read, and fails reads past max (when
// not 0): a test of a bound fails there instead of reading on.
type countingReads struct {
	net.Conn
	n   *atomic.Int64
	max int64
}

func (c countingReads) Read(p []byte) (int, error) {
	if c.max > 0 && c.n.Load() > c.max {
		return 0, errors.New("read past the bound the test allows")
	}
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}
