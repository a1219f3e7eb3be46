package checkpoint

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
)

func newStore(t *testing.T) (*Store, []kgo.Opt) {
	t.Helper()
	s, opts, _ := newStoreCluster(t)
	return s, opts
}

func newStoreCluster(t *testing.T) (*Store, []kgo.Opt, *kfake.Cluster) {
	t.Helper()
	c := kafkatest.Cluster(t, kfake.NumBrokers(1))
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
	return s, opts, c
}

// Write returns once Load sees what it wrote; a checkpoint committed behind
// an older open transaction is reported as not visible, and appears when
// that transaction ends.
func TestWriteVisibility(t *testing.T) {
	s, opts := newStore(t)
	ctx := context.Background()
	cp := &Checkpoint{Name: "alarms", GTIDSet: "0-1-7", Flavor: "mariadb"}
	if err := s.Write(ctx, "alarms", 2, cp); err != nil {
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
	err = s.Write(short, "alarms", 2, &Checkpoint{Name: "alarms", GTIDSet: "0-1-9", Flavor: "mariadb"})
	if !errors.Is(err, ErrNotVisible) {
		t.Fatalf("write behind an open transaction: %v, want ErrNotVisible", err)
	}
	var held *HeldBackError
	if got, err := s.WithStableWait(200*time.Millisecond).Load(ctx, "alarms"); !errors.As(err, &held) || got != nil ||
		held.Visible == nil || held.Visible.GTIDSet != "0-1-7" {
		t.Fatalf("load while held back: %+v %v, want no checkpoint, a HeldBackError and the earlier one as visible", got, err)
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

// openOther opens a transaction of transactional id "other" on the topic
// with one checkpoint record in it, as a pipeline killed between producing
// its checkpoint and committing leaves it.
func openOther(t *testing.T, s *Store, opts []kgo.Opt) *kgo.Client {
	t.Helper()
	other, err := kgo.NewClient(append([]kgo.Opt{kgo.TransactionalID("other"), kgo.TransactionTimeout(time.Minute)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	if err := other.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := other.ProduceSync(context.Background(), s.Record(&Checkpoint{Name: "other", GTIDSet: "0-1-1", Flavor: "mariadb"})).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return other
}

// A committed checkpoint behind another pipeline's open transaction is
// never replaced by the older visible one: Load says the topic is held
// back, by which transactional id, and what is visible.
func TestLoadHeldBack(t *testing.T) {
	s, opts := newStore(t)
	ctx := context.Background()
	if err := s.Write(ctx, "alarms", 2, &Checkpoint{Name: "alarms", GTIDSet: "0-1-7", Flavor: "mariadb"}); err != nil {
		t.Fatal(err)
	}
	other := openOther(t, s, opts)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := s.Write(short, "alarms", 2, &Checkpoint{Name: "alarms", GTIDSet: "0-1-9", Flavor: "mariadb"}); !errors.Is(err, ErrNotVisible) {
		t.Fatalf("write behind an open transaction: %v", err)
	}

	quick := s.WithStableWait(300 * time.Millisecond)
	began := time.Now()
	cp, err := quick.Load(ctx, "alarms")
	if took := time.Since(began); took < 300*time.Millisecond || took > 5*time.Second {
		t.Errorf("load took %s with a stable wait of 300ms", took)
	}
	var held *HeldBackError
	if !errors.As(err, &held) || !errors.Is(err, ErrCheckpointHeldBack) || cp != nil {
		t.Fatalf("load: %+v, %v; want a HeldBackError", cp, err)
	}
	if len(held.Holders) != 1 || held.Holders[0].TransactionalID != "other" || held.Lookup != nil {
		t.Fatalf("holders %+v (lookup %v), want transactional id other", held.Holders, held.Lookup)
	}
	h := held.Holders[0]
	if h.StartOffset < held.StableOffset || h.StartOffset >= held.HighWatermark || h.Timeout != time.Minute || h.Started.IsZero() {
		t.Fatalf("holder %+v of %+v", h, held)
	}
	if held.Visible == nil || held.Visible.GTIDSet != "0-1-7" {
		t.Fatalf("visible checkpoint %+v, want 0-1-7", held.Visible)
	}
	for _, want := range []string{`transactional id "other"`, "transaction timeout of 1m0s", s.Topic()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	if cp, err := s.LoadVisible(ctx, "alarms"); err != nil || cp == nil || cp.GTIDSet != "0-1-7" {
		t.Fatalf("load visible: %+v %v, want 0-1-7 at once", cp, err)
	}
	if list, err := quick.History(ctx, "alarms", 5); !errors.Is(err, ErrCheckpointHeldBack) || list != nil {
		t.Fatalf("history: %v %v, want ErrCheckpointHeldBack", list, err)
	}
	// A context that ends first ends the wait the same way.
	ctxShort, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel2()
	if _, err := s.Load(ctxShort, "alarms"); !errors.Is(err, ErrCheckpointHeldBack) {
		t.Fatalf("load with a short context: %v", err)
	}
	// A canceled context is not reported as held back.
	ctxCanceled, cancel3 := context.WithCancel(ctx)
	cancel3()
	if _, err := s.Load(ctxCanceled, "alarms"); !errors.Is(err, context.Canceled) || errors.Is(err, ErrCheckpointHeldBack) {
		t.Fatalf("load with a canceled context: %v", err)
	}

	// Load waits for the transaction to end (here: aborted) and then returns
	// the newest committed checkpoint.
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = other.EndTransaction(ctx, kgo.TryAbort)
	}()
	if cp, err := s.Load(ctx, "alarms"); err != nil || cp == nil || cp.GTIDSet != "0-1-9" {
		t.Fatalf("load across the end of the other transaction: %+v %v, want 0-1-9", cp, err)
	}
	if list, err := s.History(ctx, "alarms", 5); err != nil || len(list) != 2 || list[1].GTIDSet != "0-1-9" {
		t.Fatalf("history: %+v %v", list, err)
	}
}

// When the brokers do not let the store describe producers or list
// transactions, the error still says the topic is held back, and why the
// holder is unknown.
func TestLoadHeldBackLookupDenied(t *testing.T) {
	s, opts, c := newStoreCluster(t)
	ctx := context.Background()
	openOther(t, s, opts)
	quick := s.WithStableWait(100 * time.Millisecond)

	c.ControlKey(int16(kmsg.ListTransactions), func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := req.ResponseKind().(*kmsg.ListTransactionsResponse)
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp, nil, true
	})
	var held *HeldBackError
	if _, err := quick.Load(ctx, "alarms"); !errors.As(err, &held) {
		t.Fatalf("load: %v", err)
	}
	if len(held.Holders) != 1 || held.Holders[0].TransactionalID != "" || held.Lookup == nil ||
		!strings.Contains(held.Error(), "unknown transactional id") || !strings.Contains(held.Error(), "DESCRIBE on the transactional ids") {
		t.Fatalf("listing denied: %+v: %v", held.Holders, held)
	}

	c.ControlKey(int16(kmsg.DescribeProducers), func(req kmsg.Request) (kmsg.Response, error, bool) {
		dreq := req.(*kmsg.DescribeProducersRequest)
		resp := req.ResponseKind().(*kmsg.DescribeProducersResponse)
		for _, rt := range dreq.Topics {
			t := kmsg.NewDescribeProducersResponseTopic()
			t.Topic = rt.Topic
			for _, p := range rt.Partitions {
				sp := kmsg.NewDescribeProducersResponseTopicPartition()
				sp.Partition = p
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				t.Partitions = append(t.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, t)
		}
		return resp, nil, true
	})
	held = nil
	if _, err := quick.Load(ctx, "alarms"); !errors.As(err, &held) {
		t.Fatalf("load: %v", err)
	}
	if len(held.Holders) != 0 || held.Lookup == nil || !strings.Contains(held.Error(), "holding transactional id unknown") ||
		!strings.Contains(held.Error(), "READ on the topic") {
		t.Fatalf("describing denied: %+v: %v", held.Holders, held)
	}
}

// Write fences both of the pipeline's transactional ids (two lanes): an
// instance's transaction open under the second one is aborted, its
// checkpoint never becomes visible, and it can commit nothing afterwards.
func TestWriteFencesBothLanes(t *testing.T) {
	s, opts := newStore(t)
	ctx := context.Background()
	ids := TransactionalIDs("alarms")
	if len(ids) != 2 || ids[0] != "alarms" || ids[1] == "alarms" {
		t.Fatalf("transactional ids %q", ids)
	}
	lane, err := kgo.NewClient(append([]kgo.Opt{kgo.TransactionalID(ids[1])}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer lane.Close()
	if err := lane.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := lane.ProduceSync(ctx, s.Record(&Checkpoint{Name: "alarms", GTIDSet: "0-1-99", Flavor: "mariadb"})).FirstErr(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Write(short, "alarms", 2, &Checkpoint{Name: "alarms", GTIDSet: "0-1-7", Flavor: "mariadb"}); err != nil {
		t.Fatalf("write while the second lane has a transaction open: %v", err)
	}
	if err := lane.EndTransaction(ctx, kgo.TryCommit); err == nil {
		t.Fatal("the second lane committed after Write fenced it")
	}
	if got, err := s.Load(ctx, "alarms"); err != nil || got == nil || got.GTIDSet != "0-1-7" {
		t.Fatalf("load after write: %+v %v, want 0-1-7", got, err)
	}
}

// Load succeeds when a record in a newer format is superseded by a later
// set or reset. The failure guarded against: load decodes every record of
// the name, not only the newest: one record in a newer format anywhere in
// the topic's (uncompacted) history makes Load fail even after a checkpoint
// `set` or `reset` (tombstone) written later by this build supersedes it.
// After a rollback from a newer version, the documented way out (reset or
// set the checkpoint with the older build) does not work until compaction
// removes the old record (the active segment is never compacted: days with
// the defaults).
func TestLoadNewerFormatSupersededByLaterRecord(t *testing.T) {
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

// History with a huge count returns every record, without overflow or
// panic. The failure guarded against: history trims with len(all) > 2*n+64:
// for a huge n (a script passing "everything", -n 9223372036854775807)
// 2*n+64 overflows to 62, and with more than 62 checkpoints stored the trim
// slices all[len(all)-n:] with a negative index: a panic. History must
// return every record instead.
func TestHistoryHugeCount(t *testing.T) {
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

// A relay fenced by Write starts again at once (a pause of a few hundred
// milliseconds) and initialises its transactional id again, which aborts
// Write's open transaction: Write's commit is refused (Apache Kafka 4:
// INVALID_TXN_STATE, the epoch it carries being one below the relay's new
// one). Nothing of it was committed, so Write starts over, fencing the
// relay again, and commits. Before, `checkpoint reset --force` failed
// against a running relay under load.
func TestWriteStartsOverWhenARelayTakesItsIDBackMidWrite(t *testing.T) {
	s, opts, c := newStoreCluster(t)
	ctx := context.Background()
	relay, err := kgo.NewClient(append([]kgo.Opt{kgo.TransactionalID("alarms")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	var taken atomic.Bool
	c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !taken.Load() { // Write's first commit: the relay initialises its id first
			c.SleepControl(func() {
				if _, _, err := relay.ProducerID(ctx); err != nil {
					t.Errorf("the relay's initialisation: %v", err)
				}
				taken.Store(true)
			})
		}
		return nil, nil, false
	})
	short, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Write(short, "alarms", 1, &Checkpoint{Name: "alarms", GTIDSet: "0-1-7", Flavor: "mariadb"}); err != nil {
		t.Fatalf("write while the relay took its transactional id back: %v", err)
	}
	if !taken.Load() {
		t.Fatal("the relay did not initialise its transactional id during the write")
	}
	if got, err := s.Load(ctx, "alarms"); err != nil || got == nil || got.GTIDSet != "0-1-7" {
		t.Fatalf("load after write: %+v %v, want 0-1-7", got, err)
	}
	// Write started over after the relay's initialisation: the relay is fenced.
	if err := relay.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	perr := relay.ProduceSync(ctx, s.Record(&Checkpoint{Name: "alarms", GTIDSet: "0-1-99", Flavor: "mariadb"})).FirstErr()
	if cerr := relay.EndTransaction(ctx, kgo.TryCommit); perr == nil && cerr == nil {
		t.Fatal("the relay committed after Write")
	}
}

// A producer that initialises the transactional id before each of Write's
// commits (a relay restarted in a loop by its supervisor): Write gives up
// after writeAttempts commits, saying so, instead of fencing it forever.
func TestWriteGivesUpOnARelayThatKeepsTakingItsIDBack(t *testing.T) {
	s, opts, c := newStoreCluster(t)
	ctx := context.Background()
	var commits atomic.Int32
	c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		commits.Add(1)
		c.SleepControl(func() {
			relay, err := kgo.NewClient(append([]kgo.Opt{kgo.TransactionalID("alarms")}, opts...)...)
			if err != nil {
				t.Error(err)
				return
			}
			defer relay.Close()
			if _, _, err := relay.ProducerID(ctx); err != nil {
				t.Errorf("the relay's initialisation: %v", err)
			}
		})
		return nil, nil, false
	})
	short, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := s.Write(short, "alarms", 1, &Checkpoint{Name: "alarms", GTIDSet: "0-1-7", Flavor: "mariadb"})
	if !errors.Is(err, errTakenOver) || !errors.Is(err, kerr.InvalidTxnState) || !strings.Contains(err.Error(), "keeps starting again") {
		t.Fatalf("write against a relay that keeps taking its id back: %v", err)
	}
	if n := commits.Load(); n != writeAttempts {
		t.Fatalf("%d commits tried, want %d", n, writeAttempts)
	}
}

// One store is read on several goroutines at once (an attempt's load, the
// standby's and the background audit's reads, `check`): franz-go writes
// into the compression option a store's clients are built from as it
// builds each, so the store builds them one at a time (a data race under
// -race otherwise).
func TestLoadsAtOnceFromOneStore(t *testing.T) {
	c := kafkatest.Cluster(t, kfake.NumBrokers(1))
	s := NewStore("checkpoints", kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if err := s.EnsureTopic(ctx, kadm.NewClient(cl), 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, "p", 1, &Checkpoint{Name: "p", GTIDSet: "0-1-1", Flavor: "mariadb"}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for range cap(errs) {
		go func() {
			cp, err := s.Load(ctx, "p")
			if err == nil && (cp == nil || cp.GTIDSet != "0-1-1") {
				err = errors.New("load: not the checkpoint written")
			}
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
