package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, lln := newHTTPServer(ln, metrics.New("test").Handler(), defaultHTTPLimits)
	go func() { _ = srv.Serve(lln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()
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
