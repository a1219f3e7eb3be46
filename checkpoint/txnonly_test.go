package checkpoint

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTransactionalOnlyRefusesForeignRecords: a client with WRITE on a
// shared checkpoint topic produces, outside a transaction, a checkpoint
// and then a tombstone under another pipeline's name. An exactly-once
// store refuses both (naming the offset), where a plain store would take
// the forged position; a checkpoint written as `checkpoint set` writes it
// (Store.Write, in a transaction) is accepted again.
func TestTransactionalOnlyRefusesForeignRecords(t *testing.T) {
	s, opts := newStore(t)
	eo := s.TransactionalOnly()
	ctx := context.Background()
	if err := s.Write(ctx, "alarms", 2, &Checkpoint{Name: "alarms", GTIDSet: "0-1-7", Flavor: "mariadb"}); err != nil {
		t.Fatal(err)
	}
	if cp, err := eo.Load(ctx, "alarms"); err != nil || cp == nil || cp.GTIDSet != "0-1-7" {
		t.Fatalf("transactional checkpoint: %+v %v", cp, err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, forged := range []*kgo.Record{
		s.Record(&Checkpoint{Name: "alarms", GTIDSet: "0-1-999999", Flavor: "mariadb"}),
		s.Tombstone("alarms"),
	} {
		if err := cl.ProduceSync(ctx, forged).FirstErr(); err != nil {
			t.Fatal(err)
		}
		cp, err := eo.Load(ctx, "alarms")
		var nt *NotTransactionalError
		if !errors.As(err, &nt) || !errors.Is(err, ErrNotTransactional) || !errors.Is(err, ErrCorrupt) || cp != nil {
			t.Fatalf("forged record %q: loaded %+v, %v; want a NotTransactionalError", forged.Value, cp, err)
		}
		if nt.Offset < 1 || (forged.Value != nil) != (nt.Checkpoint != nil) {
			t.Fatalf("error %+v does not describe the forged record", nt)
		}
		// A store that is not told (at-least-once) takes it.
		if _, err := s.Load(ctx, "alarms"); err != nil {
			t.Fatalf("plain store: %v", err)
		}
	}
	// Other names are not affected.
	if cp, err := eo.Load(ctx, "other"); err != nil || cp != nil {
		t.Fatalf("another name: %+v %v", cp, err)
	}
	if err := s.Write(ctx, "alarms", 2, &Checkpoint{Name: "alarms", GTIDSet: "0-1-8", Flavor: "mariadb"}); err != nil {
		t.Fatal(err)
	}
	if cp, err := eo.Load(ctx, "alarms"); err != nil || cp == nil || cp.GTIDSet != "0-1-8" {
		t.Fatalf("after checkpoint set: %+v %v", cp, err)
	}
}
