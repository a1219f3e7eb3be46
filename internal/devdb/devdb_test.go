//go:build integration

package devdb

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
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
// take as their source ports, and the Kafka brokers' ports.
func TestFreePortIsBelowTheEphemeralRange(t *testing.T) {
	low := min(ephemeralLow(), kafkaPorts)
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

// A server that does not run for a few seconds (a loaded host's scheduler,
// a stall of its disk) is slow, not gone: Query, Exec and Root log in once
// it runs again, within loginTimeout. Query gave up after 2 s.
func TestLoginWaitsOutAServerStalledShorterThanTheLoginBound(t *testing.T) {
	if _, err := binary("mariadbd"); err != nil {
		t.Skip(err)
	}
	s, err := Start(context.Background(), Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	const stall = 3 * time.Second
	for _, login := range []struct {
		name string
		do   func() error
	}{
		{"Query", func() error { _, err := s.Query("SELECT 1"); return err }},
		{"Exec", func() error { return s.Exec("DO 1") }},
		{"Root", func() error {
			c, err := s.Root()
			if err == nil {
				c.Close()
			}
			return err
		}},
	} {
		pid := s.cmd.Process.Pid
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		resumed := time.AfterFunc(stall, func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
		start := time.Now()
		err := login.do()
		took := time.Since(start)
		if resumed.Stop() {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		if err != nil {
			t.Fatalf("%s while the server was stopped for %s: %v after %s; want an answer once it runs again", login.name, stall, err, took.Round(time.Millisecond))
		}
		if took < stall {
			t.Fatalf("%s answered after %s, while the server was stopped for %s: the stall was not tested", login.name, took, stall)
		}
	}
}
