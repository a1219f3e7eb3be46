package checkpoint

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/committed"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
)

// A write whose commit the broker aborted while the client was answered
// success is written again: Write returns once the checkpoint is there.
func TestWriteAgainWhenTheBrokerAbortedTheCommit(t *testing.T) {
	s, _, c := newStoreCluster(t)
	ctx := context.Background()
	aborted := kafkatest.AbortCommits(c, "alarms", 1)
	if err := s.Write(ctx, "alarms", 2, &Checkpoint{Name: "alarms", GTIDSet: "0-1-7", Flavor: "mariadb"}); err != nil {
		t.Fatal(err)
	}
	if aborted.Load() != 1 {
		t.Fatalf("%d commits aborted, want 1", aborted.Load())
	}
	if got, err := s.Load(ctx, "alarms"); err != nil || got == nil || got.GTIDSet != "0-1-7" {
		t.Fatalf("load after write: %+v %v, want 0-1-7", got, err)
	}
}

// A write whose every commit the broker aborts is never reported written.
func TestWriteFailsWhenTheBrokerAbortsEveryCommit(t *testing.T) {
	s, _, c := newStoreCluster(t)
	ctx := context.Background()
	if err := s.Write(ctx, "alarms", 2, &Checkpoint{Name: "alarms", GTIDSet: "0-1-7", Flavor: "mariadb"}); err != nil {
		t.Fatal(err)
	}
	aborted := kafkatest.AbortCommits(c, "alarms", 1<<30)
	err := s.Write(ctx, "alarms", 2, nil) // a tombstone
	if !errors.Is(err, committed.ErrNotCommitted) || !strings.Contains(err.Error(), "checkpoint not written") {
		t.Fatalf("write with every commit aborted: %v, want checkpoint not written", err)
	}
	if aborted.Load() != writeAttempts {
		t.Fatalf("%d commits aborted, want %d", aborted.Load(), writeAttempts)
	}
	if got, err := s.Load(ctx, "alarms"); err != nil || got == nil || got.GTIDSet != "0-1-7" {
		t.Fatalf("load after the failed write: %+v %v, want the earlier 0-1-7", got, err)
	}
}

// A commit the broker never received leaves the transaction open: Write
// does not report the checkpoint written (nor committed and held back)
// while it is, and writes it again once the broker aborted it at its
// timeout.
func TestWriteNeverReportsACommitTheBrokerNeverReceived(t *testing.T) {
	long, _, c := newStoreCluster(t)
	ctx := context.Background()
	dropped := kafkatest.DropCommit(c, "alarms")
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err := long.Write(short, "alarms", 2, &Checkpoint{Name: "alarms", GTIDSet: "0-1-7", Flavor: "mariadb"})
	if err == nil || errors.Is(err, ErrNotVisible) || !strings.Contains(err.Error(), "commit not proved") || !dropped.Load() {
		t.Fatalf("write whose commit was lost: %v (commit dropped: %v), want commit not proved", err, dropped.Load())
	}

	// Without a deadline, once the broker aborted it at its timeout.
	_, opts, c := newStoreCluster(t)
	s := NewStore("checkpoints", append([]kgo.Opt{kgo.TransactionTimeout(time.Second)}, opts...)...)
	dropped = kafkatest.DropCommit(c, "alarms")
	began := time.Now()
	if err := s.Write(ctx, "alarms", 2, &Checkpoint{Name: "alarms", GTIDSet: "0-1-9", Flavor: "mariadb"}); err != nil || !dropped.Load() {
		t.Fatalf("write whose first commit was lost: %v (commit dropped: %v)", err, dropped.Load())
	}
	t.Logf("written in %s", time.Since(began))
	if got, err := s.Load(ctx, "alarms"); err != nil || got == nil || got.GTIDSet != "0-1-9" {
		t.Fatalf("load after write: %+v %v, want 0-1-9", got, err)
	}
}
