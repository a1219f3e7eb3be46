//go:build integration

package devdb

import (
	"context"
	"errors"
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
