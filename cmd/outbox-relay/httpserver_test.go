package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
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

// TestHTTPServerLimitsConnections: with the connection limit held by
// clients that send nothing, another client waits; once one of them goes,
// it is served.
func TestHTTPServerLimitsConnections(t *testing.T) {
	addr := serveTest(t, httpLimits{header: 10 * time.Second, read: 10 * time.Second, write: 10 * time.Second,
		idle: 10 * time.Second, conns: 2})
	var hold []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		hold = append(hold, c)
	}
	client := &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := client.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatal("a third connection was served while two held the limit")
	}
	hold[0].Close()
	client.Timeout = 5 * time.Second
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("after a held connection closed: %v", err)
	}
	resp.Body.Close()
}
