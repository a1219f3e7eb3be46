package ha

import (
	"context"
	"errors"
	"testing"
)

func TestLeaseLoseRunsStopsOnce(t *testing.T) {
	l := NewLease(context.Background())
	n := 0
	l.OnLost(func() { n++ })
	if l.Err() != nil {
		t.Fatal("a fresh lease is lost")
	}
	l.Lose("test")
	l.Lose("again")
	l.OnLost(func() { n++ }) // registered after: runs at once
	if n != 2 || !errors.Is(l.Err(), ErrLeaseLost) || l.Context().Err() == nil {
		t.Fatalf("stops run %d times, err %v, ctx %v", n, l.Err(), l.Context().Err())
	}
	var none *Lease
	if none.Err() != nil || none.Lost() != nil {
		t.Fatal("no lease must mean never lost")
	}
}
