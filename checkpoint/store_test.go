package checkpoint

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func newStore(t *testing.T) (*Store, []kgo.Opt) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	s := NewStore("checkpoints", opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := s.EnsureTopic(context.Background(), kadm.NewClient(cl), 1); err != nil {
		t.Fatal(err)
	}
	return s, opts
}

// Write returns once Load sees what it wrote; a checkpoint committed behind
// an older open transaction is reported as not visible, and appears when
// that transaction ends.
func TestWriteVisibility(t *testing.T) {
	s, opts := newStore(t)
	ctx := context.Background()
	cp := &Checkpoint{Name: "alarms", GTIDSet: "0-1-7", Flavor: "mariadb"}
	if err := s.Write(ctx, "alarms", cp); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Load(ctx, "alarms"); err != nil || got == nil || got.GTIDSet != "0-1-7" {
		t.Fatalf("load after write: %+v %v", got, err)
	}

	// Another pipeline's transaction stays open on the topic.
	other, err := kgo.NewClient(append([]kgo.Opt{kgo.TransactionalID("other")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := other.ProduceSync(ctx, s.Record(&Checkpoint{Name: "other", GTIDSet: "0-1-1", Flavor: "mariadb"})).FirstErr(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err = s.Write(short, "alarms", &Checkpoint{Name: "alarms", GTIDSet: "0-1-9", Flavor: "mariadb"})
	if !errors.Is(err, ErrNotVisible) {
		t.Fatalf("write behind an open transaction: %v, want ErrNotVisible", err)
	}
	if got, err := s.Load(ctx, "alarms"); err != nil || got.GTIDSet != "0-1-7" {
		t.Fatalf("load while held back: %+v %v, want the earlier checkpoint", got, err)
	}
	if err := other.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	wait, cancel2 := context.WithTimeout(ctx, 10*time.Second)
	defer cancel2()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(wait, s.Topic())
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(s.Topic(), 0)
	if err := s.AwaitVisible(wait, adm, end.Offset-1); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Load(ctx, "alarms"); err != nil || got.GTIDSet != "0-1-9" {
		t.Fatalf("load after the other transaction ended: %+v %v", got, err)
	}
}
