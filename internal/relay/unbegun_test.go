package relay

import (
	"context"
	"errors"
	"testing"
)

// A commit handed to a lane whose goroutine ended first (the attempt's
// context ended with the job queued) is answered as not begun: the
// pipeline waits for the commit in flight's answer before it stops, and
// waited forever (a relay stuck for 20 minutes after a broker restart).
func TestCommitQueuedWhenTheAttemptEndsIsAnsweredNotBegun(t *testing.T) {
	lanes := []*lane{{producer: &producer{}, jobs: make(chan laneJob, 2)}, {producer: &producer{}, jobs: make(chan laneJob, 2)}}
	d := newExactlyOnce(lanes, newAccounting(nil))
	j := &commitJob{lane: lanes[1]}
	d.inflight = j
	lanes[1].jobs <- laneJob{commit: j}
	cause := errors.New("lease lost")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	d.answerUnbegun(ctx) // what run does once the lanes' goroutines returned
	select {
	case c := <-d.committed():
		if !errors.Is(c.err, cause) || c.cp != nil {
			t.Fatalf("answer %+v, want no checkpoint and an error wrapping %v", c, cause)
		}
	default:
		t.Fatal("the queued commit was never answered")
	}
	if d.inflight != nil {
		t.Fatal("the unbegun commit is still in flight")
	}
}
