package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

func serveTest(t *testing.T, lim httpLimits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	srv, lln := newHTTPServer(ln, h, lim)
	go func() { _ = srv.Serve(lln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// serveShipped serves the relay's handler with the shipped limits until
// the test ends.
func serveShipped(t *testing.T) (string, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, lln := newHTTPServer(ln, metrics.New("test").Handler(), defaultHTTPLimits)
	go func() { _ = srv.Serve(lln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), lln
}

// closedWithin reports whether the server closes c within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return err == nil // EOF: closed by the server; a timeout is an error
}

// TestHTTPServerClosesSlowAndIdleConnections: a client that sends its
// headers slowly, or keeps a connection open idle after a request, loses
// the connection.
func TestHTTPServerClosesSlowAndIdleConnections(t *testing.T) {
	addr := serveTest(t, httpLimits{header: 200 * time.Millisecond, read: 400 * time.Millisecond, write: time.Second,
		idle: 300 * time.Millisecond, conns: 4})
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := io.WriteString(slow, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(slow, 3*time.Second) {
		t.Fatal("a connection with unfinished headers was kept open")
	}
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if _, err := io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("request: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if !closedWithin(idle, 3*time.Second) {
		t.Fatal("an idle keep-alive connection was kept open")
	}
}

// TestHTTPServerMakesRoomAtTheLimit: with the connection limit held by
// clients that send nothing, a new client is served at once, and the
// connection that waited longest on its client is closed to make room.
func TestHTTPServerMakesRoomAtTheLimit(t *testing.T) {
	addr := serveTest(t, httpLimits{header: 10 * time.Second, read: 10 * time.Second, write: 10 * time.Second,
		idle: 10 * time.Second, conns: 2, busyGrace: time.Second})
	var hold []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		hold = append(hold, c)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil { // never finished
			t.Fatal(err)
		}
	}
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("a third client while two held the limit: %v", err)
	}
	resp.Body.Close()
	if !closedWithin(hold[0], 3*time.Second) {
		t.Fatal("the connection that waited longest was kept open")
	}
}

// TestHTTPServerMakesRoomFromTheHostHoldingMost: at the limit, the
// connection closed for a new one is of the client host holding the most
// connections, though another host's waited longer.
func TestHTTPServerMakesRoomFromTheHostHoldingMost(t *testing.T) {
	addr := serveTest(t, httpLimits{header: 10 * time.Second, read: 10 * time.Second, write: 10 * time.Second,
		idle: 10 * time.Second, conns: 3, busyGrace: time.Second})
	dialFrom := func(ip string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	other := dialFrom("127.0.0.2") // the oldest
	first := dialFrom("127.0.0.1")
	dialFrom("127.0.0.1")
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("a client at the limit: %v", err)
	}
	resp.Body.Close()
	if !closedWithin(first, 3*time.Second) {
		t.Fatal("the oldest connection of the host holding the most was kept open")
	}
	_ = other.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := other.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the other host's connection: %v, want it kept open", err)
	}
}

// TestHTTPProbesAnswerUnderIdleAndSlowlorisLoad: 200 idle keep-alive
// connections (each after one request) and 200 connections sending their
// headers slowly, against the shipped limits: /healthz and /readyz each
// answer within a second (a Kubernetes probe's timeout), every time.
func TestHTTPProbesAnswerUnderIdleAndSlowlorisLoad(t *testing.T) {
	addr, lln := serveShipped(t)
	var load []net.Conn
	served := 0
	t.Cleanup(func() {
		for _, c := range load {
			c.Close()
		}
	})
	// Idle keep-alive clients, after one request each (at once, as a
	// client pool would; without room made, most wait for their answer).
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 200 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		load = append(load, c)
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				return
			}
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				served++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("%d of the 200 idle clients had their request answered", served)
	for range 200 { // slowloris: headers begun, never finished
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		load = append(load, c)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "); err != nil {
			t.Fatal(err)
		}
	}
	// Probes from the loaders' host and from another (a kubelet probes
	// from its node).
	for _, from := range []string{"127.0.0.1", "127.0.0.2"} {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: d.DialContext}}
		for round := range 5 {
			for _, path := range []string{"/healthz", "/readyz"} {
				resp, err := client.Get("http://" + addr + path)
				if err != nil {
					t.Fatalf("from %s, round %d: %s did not answer within 1s under load: %v", from, round, path, err)
				}
				resp.Body.Close()
			}
		}
	}
	if n := lln.(*roomListener).open(); n > defaultHTTPLimits.conns {
		t.Fatalf("%d connections open, over the limit of %d", n, defaultHTTPLimits.conns)
	}
}

// TestHTTPProbesAnswerUnderFloodsFromManyHosts: clients on 34 addresses
// (127.0.0.2 and up) hold or churn connections in every way that keeps a
// place without use, against the shipped limits; the kubelet, probing from
// its own address (127.0.0.1) since the relay started, gets /healthz
// answered within a second (a Kubernetes probe's timeout), never failing
// as many times in a row as the kubelet needs to act on the pod (the flood
// runs in the test's own process: a loaded host that does not run it for
// a second fails one probe of the server and the flood alike), and the
// server holds at most its limit of connections.
func TestHTTPProbesAnswerUnderFloodsFromManyHosts(t *testing.T) {
	tinyWindow := func(_, _ string, c syscall.RawConn) error { // the answer fills the window at once
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024) })
	}
	pipelined := strings.Repeat("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 3)
	var stop atomic.Bool
	pause := func(d time.Duration) { // a sleep the end of the test cuts short
		for end := time.Now().Add(d); time.Now().Before(end) && !stop.Load(); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, v := range []struct {
		name    string
		control func(string, string, syscall.RawConn) error
		// hold uses a connection its way until it returns (or the server
		// closes it).
		hold func(c net.Conn)
	}{
		{"headers never finished, reconnecting at once", nil, func(c net.Conn) {
			_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			_, _ = io.Copy(io.Discard, c)
		}},
		{"a body sent a byte at a time", nil, func(c net.Conn) {
			_, _ = io.WriteString(c, "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
			for range 30 {
				if _, err := c.Write([]byte{'x'}); err != nil {
					return
				}
				pause(100 * time.Millisecond)
			}
		}},
		{"answers never read", tinyWindow, func(c net.Conn) {
			_, _ = io.WriteString(c, pipelined)
			pause(2 * time.Second)
		}},
		{"one answer read, then answers never read, the connection replaced before a second", tinyWindow, func(c net.Conn) {
			_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			_, _ = c.Read(make([]byte, 4096))
			_, _ = io.WriteString(c, pipelined)
			pause(900 * time.Millisecond)
		}},
	} {
		t.Run(v.name, func(t *testing.T) {
			addr, lln := serveShipped(t)
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}}
			kubelet := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: d.DialContext}}
			probe := func() error {
				resp, err := kubelet.Get("http://" + addr + "/healthz")
				if err != nil {
					return err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				return resp.Body.Close()
			}
			if err := probe(); err != nil { // the kubelet probes from the start
				t.Fatal(err)
			}
			stop.Store(false)
			var wg sync.WaitGroup
			for i := range 34 {
				from := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i))}, Control: v.control}
				wg.Go(func() {
					for !stop.Load() {
						c, err := from.Dial("tcp", addr)
						if err != nil {
							continue
						}
						v.hold(c)
						c.Close()
					}
				})
			}
			defer func() { stop.Store(true); wg.Wait() }()
			var worst time.Duration
			failed := 0 // in a row
			defer func() { t.Logf("slowest probe: %v", worst) }()
			for round := range 15 {
				time.Sleep(100 * time.Millisecond)
				start := time.Now()
				// The kubelet restarts the pod after failureThreshold (3 by
				// default) probes in a row fail their 1 s timeout; one
				// failure alone is a host that did not run the test
				// process for a second (a loaded CI host), logged.
				if err := probe(); err != nil {
					if failed++; failed == kubeletFailureThreshold {
						t.Fatalf("round %d: /healthz did not answer within 1s %d times in a row: %v", round, failed, err)
					}
					t.Logf("round %d: /healthz did not answer within 1s: %v", round, err)
					continue
				}
				failed = 0
				worst = max(worst, time.Since(start))
				if n := lln.(*roomListener).open(); n > defaultHTTPLimits.conns {
					t.Fatalf("%d connections open, over the limit of %d", n, defaultHTTPLimits.conns)
				}
			}
		})
	}
}

// kubeletFailureThreshold is the kubelet's default failureThreshold: the
// probes that fail in a row before it acts on a pod.
const kubeletFailureThreshold = 3

// fakeConn is a connection from addr for the listener's bookkeeping.
type fakeConn struct {
	net.Conn
	addr   net.Addr
	closed bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.addr }
func (c *fakeConn) Close() error         { c.closed = true; return nil }

// TestRoomIsNeverMadeFromAProbeInGoodStanding: the kubelet's host answered
// before; its new connection, not yet read by the server (or in its
// request), is never the one closed for newcomers of other hosts, however
// many arrive from however many addresses (more than it remembers the
// standing of) and whatever they do: waiting
// (slowloris), or all in requests younger than a second (answers read
// slowly, the connections replaced before they age). Before, the 32nd
// newcomer after the probe closed it (the one waiting longest), and
// places all held by young requests refused it.
func TestRoomIsNeverMadeFromAProbeInGoodStanding(t *testing.T) {
	for _, busy := range []bool{false, true} {
		l := &roomListener{max: 32, busyGrace: time.Second, conns: map[string]*roomConn{}, hosts: map[string]*hostStanding{}}
		port := 40000
		open := func(ip string) (*roomConn, *fakeConn) {
			port++
			fc := &fakeConn{addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: port}}
			now := time.Now()
			rc := &roomConn{Conn: fc, l: l, key: fc.addr.String(), host: ip, since: now, opened: now}
			if !l.admit(rc) {
				return nil, fc
			}
			return rc, fc
		}
		// The kubelet probed before: a request answered.
		before, _ := open("127.0.0.1")
		l.mark(before.key, true)
		l.mark(before.key, false)
		_ = before.Close()
		attacker := 2
		flood := func(n int) {
			for range n {
				rc, _ := open(fmt.Sprintf("127.0.%d.%d", attacker/250, 2+attacker%250))
				attacker++
				if rc != nil && busy {
					l.mark(rc.key, true) // its answer is read slowly
				}
			}
		}
		flood(32)
		probe, fc := open("127.0.0.1")
		if probe == nil {
			t.Fatalf("busy %v: the probe found no room", busy)
		}
		flood(500)
		if fc.closed {
			t.Fatalf("busy %v: the probe's connection was closed for a newcomer", busy)
		}
		l.mark(probe.key, true)
		flood(1500) // more hosts than the listener remembers
		if fc.closed {
			t.Fatalf("busy %v: the probe's request was closed for a newcomer", busy)
		}
		if n := l.open(); n > 32 {
			t.Fatalf("busy %v: %d connections held", busy, n)
		}
		if n := len(l.hosts); n > maxHosts || !l.hosts["127.0.0.1"].good() {
			t.Fatalf("busy %v: %d hosts remembered (at most %d), the kubelet's in good standing %v", busy, n, maxHosts, l.hosts["127.0.0.1"].good())
		}
	}
}
