//go:build integration

package itest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Two transaction lanes (the default) on the broker the tests run on (kfake
// in `make test`, Apache Kafka in `make test-kafka`, where transaction
// protocol v2 bumps a producer's epoch at every commit): at the head, with
// hundreds of small commits alternating between `name` and `name#2`, the
// second lane's check of `name` before each commit never takes the relay's
// own epoch bumps for a fence. Then a producer that initialises `name` alone
// (an older outbox-relay, or its checkpoint commands) fences the running
// relay: it goes back to standby, takes the lease again and resumes; every
// row is published once.
func TestLanesAtTheHeadAndAFenceOfTheNameAlone(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	if cfg.Kafka.TransactionLanes != 2 {
		t.Fatalf("transaction lanes %d, want the default 2", cfg.Kafka.TransactionLanes)
	}
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	ctx := context.Background()
	if _, err := s.Write(ctx, WriteOptions{Writers: 2, Transactions: 150, Pace: 2 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if logs := r.Logs(); strings.Contains(logs, "fenced") {
		t.Fatalf("fenced with nobody else on its transactional ids:\n%s", logs)
	}
	if rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix)); !rep.OK() {
		t.Fatalf("at the head: %s", rep)
	}

	// Another producer initialises the pipeline's name only.
	other, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.TransactionalID(cfg.Name))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, _, err := other.ProducerID(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, WriteOptions{Writers: 2, Transactions: 20, Tag: "after"}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, time.Minute, func() error {
		if !strings.Contains(r.Logs(), "fenced") {
			return fmt.Errorf("the relay has not noticed the fence")
		}
		return nil
	})
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute) // the next term resumes
	if err := r.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix)); !rep.OK() {
		t.Fatalf("after the fence: %s", rep)
	}
}
