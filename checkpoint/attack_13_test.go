package checkpoint

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Load decodes every record of the name, not only the newest: one record
// in a newer format anywhere in the topic's (uncompacted) history makes
// Load fail even after a checkpoint `set` or `reset` (tombstone) written
// later by this build supersedes it. After a rollback from a newer
// version, the documented way out (reset or set the checkpoint with the
// older build) does not work until compaction removes the old record
// (the active segment is never compacted: days with the defaults).
func TestAttack13SupersededNewerFormatBlocksLoad(t *testing.T) {
	s, opts := newStore(t)
	ctx := context.Background()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	newer := []byte(`{"format":2,"name":"alarms","gtid_set":"0-1-9","flavor":"mariadb","future":"field"}`)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: s.Topic(), Partition: 0, Key: []byte("alarms"), Value: newer}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, "alarms"); err == nil {
		t.Fatal("newer format not refused")
	}
	// the operator rolls back and resets, then sets the position, with this build
	if err := cl.ProduceSync(ctx, s.Tombstone("alarms")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, s.Record(&Checkpoint{Name: "alarms", GTIDSet: "0-1-5", Flavor: "mariadb"})).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cp, err := s.Load(ctx, "alarms")
	if err != nil || cp == nil || cp.GTIDSet != "0-1-5" {
		t.Fatalf("after reset+set by this build: %+v, %v", cp, err)
	}
}

// History trims with len(all) > 2*n+64: for a huge n (a script passing
// "everything", -n 9223372036854775807) 2*n+64 overflows to 62, and with
// more than 62 checkpoints stored the trim slices all[len(all)-n:] with a
// negative index: a panic, the failure issue 13 set out to remove.
func TestAttack13HistoryHugeCountPanics(t *testing.T) {
	s, opts := newStore(t)
	ctx := context.Background()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := range 70 {
		recs = append(recs, s.Record(&Checkpoint{Name: "alarms", GTIDSet: "0-1-" + string(rune('0'+i%10)), Flavor: "mariadb"}))
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("History(math.MaxInt) panicked: %v", r)
		}
	}()
	list, err := s.History(ctx, "alarms", int(^uint(0)>>1))
	if err != nil || len(list) != 70 {
		t.Fatalf("got %d, %v", len(list), err)
	}
}
