package relay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/ha"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/mysqlsource"
)

// An attempt runs under the lease it is given (Relay.attempt hands it to
// its loop and sinks): once the lease is lost the attempt stops at once
// with ErrLeaseLost and commits nothing more, where a stop of the term's
// context alone (a clean revoke) commits what it holds and returns nil.
func TestAttemptStopsWithLeaseLostWhenItsLeaseIsLost(t *testing.T) {
	p, tbl := startDoubleOutbox(t)
	row := []any{int64(1), "ev-1", "alarm", "dev-1", "AlarmCreated", `{"deviceId":"dev-1"}`, time.Now()}
	if _, err := p.Commit(mysqlsource.Tx{Inserts: []mysqlsource.Insert{{Table: tbl, Rows: [][]any{row}}}}); err != nil {
		t.Fatal(err)
	}
	k := kafkatest.Cluster(t, kfake.NumBrokers(1))
	cfg := kfakeDoubleConfig(t, k, "leased", 2002, p.Addr())
	r, err := New(cfg, zerolog.Nop(), metrics.New("test"))
	if err != nil {
		t.Fatal(err)
	}

	ls := ha.NewLease(context.Background())
	ended := make(chan error, 1)
	go func() {
		started := false
		ended <- r.attempt(ls.Context(), ls, &started)
	}()
	want := p.Executed().Flat()
	deadline := time.Now().Add(30 * time.Second)
	for {
		lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cp, err := r.store.Load(lctx, cfg.Name)
		cancel()
		if err == nil && cp != nil && cp.GTIDSet == want {
			break
		}
		select {
		case err := <-ended:
			t.Fatalf("the attempt ended before its checkpoint reached %s: %v", want, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the checkpoint did not reach %s within 30s (last %+v, %v)", want, cp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ls.Lose("test")
	select {
	case err := <-ended:
		if !errors.Is(err, ha.ErrLeaseLost) {
			t.Fatalf("attempt under a lost lease returned %v, want ErrLeaseLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the attempt did not return within 30s of the lease's loss")
	}
}
