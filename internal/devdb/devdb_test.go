//go:build integration

package devdb

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
)

// A port taken by another scratch server between FreePort and the bind:
// the server that answers is not the one started, and Start says so
// (picking a port itself, it picks another).
func TestStartRefusesAnotherServersPort(t *testing.T) {
	if _, err := binary("mariadbd"); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	a, err := Start(ctx, Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	b, err := Start(ctx, Options{Dir: t.TempDir(), Port: a.opts.Port})
	if err == nil {
		b.Stop()
		t.Fatalf("a second server on %s started; want %v", a.Addr, errPortTaken)
	}
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("second server on a taken port: %v, want %v", err, errPortTaken)
	}
	if _, err := a.Query("SELECT 1"); err != nil {
		t.Fatalf("the first server after the refusal: %v", err)
	}
}

// A port held by a process that is not a MySQL server (it never answers):
// mariadbd exits on "Address already in use", and Start says the port was
// taken, so that a caller picking ports picks another.
func TestStartNamesAPortHeldByAnotherProcess(t *testing.T) {
	if _, err := binary("mariadbd"); err != nil {
		t.Skip(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = Start(context.Background(), Options{Dir: t.TempDir(), Port: port})
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("start on a port another process listens on: %v, want %v", err, errPortTaken)
	}
	if !strings.Contains(err.Error(), "could not bind") {
		t.Fatalf("error %q does not say the bind failed", err)
	}
}

// FreePort avoids the ephemeral range, whose ports outgoing connections
// take as their source ports.
func TestFreePortIsBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	for range 20 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p >= low || p < 10000 {
			t.Fatalf("FreePort picked %d, want one in [10000, %d)", p, low)
		}
	}
}
