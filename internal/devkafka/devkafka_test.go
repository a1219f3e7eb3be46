package devkafka

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A record committed in a Kafka transaction is still there, committed, when
// the broker starts again on the same data directory (`dev kafka
// --data-dir`), and the broker listens where it was told.
func TestDataDirKeepsCommittedRecordsAcrossRestarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()

	// A port that was free a moment ago, as `--listen 127.0.0.1:PORT` names.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, portStr, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portStr)
	c, err := Start("127.0.0.1", port, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ListenAddrs(); len(got) != 1 || got[0] != addr {
		t.Fatalf("the broker listens on %v, want %s", got, addr)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("devkafka-test"),
		kgo.TransactionTimeout(10*time.Minute), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("kept")}).FirstErr(); err != nil {
		t.Fatalf("produce in a transaction with a 10-minute timeout: %v", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	c.Close()

	c, err = Start("127.0.0.1", 0, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rd, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()[0]), kgo.ConsumeTopics("t"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("the committed record did not come back after the restart: %v", err)
		}
		var got []string
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		if len(got) > 0 {
			if len(got) != 1 || got[0] != "kept" {
				t.Fatalf("after the restart read %q, want [kept]", got)
			}
			return
		}
	}
}
