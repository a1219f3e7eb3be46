package relay

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// The pipeline (the relay loop) on its own: scripted binlog events (the
// script of script_test.go) go through the real loop into a fake delivery
// that records what the loop hands it. What it checks is the loop's side
// of the delivery interface: which records each batch holds, and the
// checkpoint each batch is sealed with. Kafka's side is tested on brokers
// (sink_*_test.go, the harness of script_test.go).

// fakeDelivery is a delivery that records the loop's calls. With a gate,
// a seal stays in flight until the gate is closed, and records sent
// meanwhile are held (as exactly-once holds them) and produced once it
// has ended; otherwise a seal ends at once (as at-least-once).
type fakeDelivery struct {
	gate   chan struct{}
	out    chan committed
	open   []*kgo.Record // the open batch's records
	held   []*kgo.Record // sent while a seal is in flight
	sealed []sealedBatch
	aborts int

	mu       sync.Mutex
	inflight bool
	log      []string // "produce <id>", "seal <gtid set>", and the test's notes
}

// note appends an entry to the delivery's log.
func (f *fakeDelivery) note(entry string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, entry)
}

// sealedBatch is one batch the loop sealed: its records' event ids (header
// id), in the order produced, and its checkpoint.
type sealedBatch struct {
	ids []string
	cp  *checkpoint.Checkpoint
}

var _ delivery = (*fakeDelivery)(nil)

// fakeTopics is a catalog that knows the topics the scripts route to (3
// partitions, the default record bound), and asks no Kafka.
func fakeTopics() *catalog {
	info := topicInfo{partitions: 3, placeBy: 3, maxBytes: clients.MaxBatchBytes}
	return &catalog{topics: map[string]topicInfo{"outbox.event.order": info, "outbox.event.customer": info}, readAgain: map[string]bool{}}
}

func (f *fakeDelivery) send(_ context.Context, b part) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range b.records {
		if f.inflight {
			f.held = append(f.held, p.rec.Record)
			continue
		}
		f.produce(p.rec.Record)
	}
	if b.seal == nil {
		return false, nil
	}
	cp := b.seal.cp
	sb := sealedBatch{cp: cp}
	for _, r := range f.open {
		sb.ids = append(sb.ids, header(r, "id"))
	}
	f.sealed = append(f.sealed, sb)
	f.open = nil
	f.log = append(f.log, "seal "+cp.GTIDSet)
	if f.gate == nil {
		return false, nil
	}
	f.inflight = true
	go func() {
		<-f.gate
		f.mu.Lock()
		f.inflight = false
		for _, r := range f.held {
			f.produce(r)
		}
		f.held = nil
		f.mu.Unlock()
		f.out <- committed{cp: cp}
	}()
	return true, nil
}

// produce notes r in the open batch; call it with mu held.
func (f *fakeDelivery) produce(r *kgo.Record) {
	f.open = append(f.open, r)
	f.log = append(f.log, "produce "+header(r, "id"))
}

func (f *fakeDelivery) committed() <-chan committed { return f.out }

func (f *fakeDelivery) run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

func (f *fakeDelivery) stop(_ context.Context, clean bool) (*checkpoint.Checkpoint, error) {
	if !clean {
		f.aborts++
		f.open = nil
	}
	return nil, nil
}

// pipeline is one run of the loop on a fake delivery.
type pipeline struct {
	t       *testing.T
	s       *script
	snk     *fakeDelivery
	l       *loop
	events  chan []binlog.Event
	readErr chan error
	cancel  context.CancelFunc
	done    chan error
}

// newPipeline starts the loop on s's source from cp (nil: from the start,
// without a checkpoint); tweak (may be nil) adjusts the configuration.
func newPipeline(t *testing.T, s *script, cp *checkpoint.Checkpoint, snk *fakeDelivery, tweak func(*config.Config)) *pipeline {
	t.Helper()
	cfg := config.Default()
	cfg.Name = "pipeline"
	cfg.Source.Flavor = config.Flavor(s.flavor)
	cfg.Source.Tables = []string{"app.outbox"}
	cfg.Kafka.Brokers = []string{"127.0.0.1:1"} // never dialled: the sink is fake
	// Batches end where the script and its hand-offs say, never by time.
	cfg.Kafka.Batch.MaxWait = time.Hour
	cfg.Kafka.CheckpointInterval = time.Hour
	cfg.Log.ProgressInterval = 0
	if tweak != nil {
		tweak(&cfg)
	}
	r, err := New(cfg, zerolog.Nop(), metrics.New("test"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &binlog.Server{Addr: "127.0.0.1:1", Flavor: s.flavor, Version: "test", ServerID: "1"}
	from := ""
	if cp != nil {
		from = cp.GTIDSet
	}
	if snk.out == nil {
		snk.out = make(chan committed)
	}
	l, err := newLoop(r, srv, cp, from, snk, fakeTopics())
	if err != nil {
		t.Fatal(err)
	}
	l.pos.schema = outboxSchema
	ctx, cancel := context.WithCancel(context.Background())
	p := &pipeline{t: t, s: s, snk: snk, l: l, events: make(chan []binlog.Event), readErr: make(chan error, 1),
		cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- l.run(ctx, context.Background(), p.events, p.readErr) }()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

// hand gives the loop events [from, to) of the script in one hand-off of
// the reader, and waits until the loop has taken them.
func (p *pipeline) hand(from, to int) {
	p.t.Helper()
	p.handEvents(slices.Clone(p.s.events[from:to]))
}

// handEvents gives the loop evs in one hand-off; once it has taken them it
// has handled every hand-off before.
func (p *pipeline) handEvents(evs []binlog.Event) {
	p.t.Helper()
	select {
	case p.events <- evs:
	case err := <-p.done:
		p.done <- err
		p.t.Fatalf("the loop ended before %d events were handed over: %v", len(evs), err)
	case <-time.After(10 * time.Second):
		p.t.Fatalf("the loop did not take %d events", len(evs))
	}
}

// stop is SIGTERM: the loop commits what it holds and returns.
func (p *pipeline) stop() error {
	p.t.Helper()
	p.cancel()
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		return err
	case <-time.After(10 * time.Second):
		p.t.Fatal("the loop did not return after SIGTERM")
		return nil
	}
}

// ids are the event ids of rows.
func ids(rows ...[]outboxRow) []string {
	var out []string
	for _, r := range slices.Concat(rows...) {
		out = append(out, r.id)
	}
	return out
}

// wantBatches compares the sealed batches' records and positions with want.
func (p *pipeline) wantBatches(want ...sealedBatch) {
	p.t.Helper()
	got := p.snk.sealed
	if len(got) != len(want) {
		p.t.Fatalf("%d batches sealed (%s), want %d (%s)", len(got), describeBatches(got), len(want), describeBatches(want))
	}
	for i := range want {
		if !slices.Equal(got[i].ids, want[i].ids) || got[i].cp.GTIDSet != want[i].cp.GTIDSet {
			p.t.Fatalf("batch %d: records %v at %q, want %v at %q (all: %s)", i+1, got[i].ids, got[i].cp.GTIDSet,
				want[i].ids, want[i].cp.GTIDSet, describeBatches(got))
		}
	}
}

func describeBatches(bs []sealedBatch) string {
	var parts []string
	for _, b := range bs {
		parts = append(parts, strings.Join(b.ids, ",")+"@"+b.cp.GTIDSet)
	}
	return strings.Join(parts, " | ")
}

func batch(gtids string, ids ...string) sealedBatch {
	return sealedBatch{ids: ids, cp: &checkpoint.Checkpoint{GTIDSet: gtids}}
}

// One source transaction at the head makes one batch of its rows, in
// order, sealed with a checkpoint at its GTID; nothing more is sealed at
// the stop.
func TestPipelineSealsTransactionWithItsGTID(t *testing.T) {
	for _, flavor := range []string{"mariadb", "mysql"} {
		t.Run(flavor, func(t *testing.T) {
			s := newScript(flavor)
			rows := s.insert("order", "1", 2)
			s.tx(rows, s.insert("customer", "7", 1))
			p := newPipeline(t, s, nil, &fakeDelivery{}, nil)
			p.hand(0, s.through(1))
			if err := p.stop(); err != nil {
				t.Fatal(err)
			}
			p.wantBatches(batch(s.set(1), "e1", "e2", "e3"))
			cp := p.snk.sealed[0].cp
			if cp.Partial != nil || cp.XA != nil || cp.Events != 3 || cp.Name != "pipeline" || cp.Flavor != flavor {
				t.Fatalf("checkpoint %+v: want no partial, no XA, 3 events, name and flavor set", cp)
			}
		})
	}
}

// A transaction that wrote only tables the relay does not capture reaches
// the loop as its end alone: no record, and no batch of its own; the
// position moves past it with the next batch, or at the stop.
func TestPipelineTransactionOfOtherTablesOnlyMovesPosition(t *testing.T) {
	s := newScript("mariadb")
	s.tx(s.insert("order", "1", 1))
	s.tx() // other tables only
	s.tx()
	p := newPipeline(t, s, nil, &fakeDelivery{}, nil)
	p.hand(0, s.through(1))
	p.hand(s.through(1), s.through(3))
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	p.wantBatches(batch(s.set(1), "e1"), batch(s.set(3)))
}

// Rows of a table that is not captured never reach the loop (the reader
// decodes captured tables only): when some do, the loop stops, naming the
// table, and seals nothing of that transaction.
func TestPipelineStopsAtRowsOfTableNotCaptured(t *testing.T) {
	s := newScript("mariadb")
	s.tx(s.insert("order", "1", 1))
	s.tx(s.insert("order", "2", 1))
	other := s.events[s.through(1)]
	other.Table = &binlog.Table{Schema: "app", Name: "audit", Columns: outboxColumns}
	s.events[s.through(1)] = other
	p := newPipeline(t, s, nil, &fakeDelivery{}, nil)
	p.hand(0, s.through(1))
	p.hand(s.through(1), s.through(2))
	select {
	case err := <-p.done:
		p.done <- err
		if err == nil || !strings.Contains(err.Error(), "app.audit") {
			t.Fatalf("loop ended with %v, want an error naming app.audit", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the loop went on after rows of a table it does not capture")
	}
	p.wantBatches(batch(s.set(1), "e1"))
}

// XA: the rows of a prepared transaction are held, not published; the
// checkpoints sealed meanwhile list it as prepared. They are published at
// its XA COMMIT, after the transactions committed in between, in the batch
// sealed at the XA COMMIT's position; then no XA transaction is listed.
func TestPipelineXAPreparedRowsPublishedAtCommit(t *testing.T) {
	s := newScript("mariadb")
	held := s.insert("order", "1", 2)
	s.xaPrepare("x1", held)
	between := s.insert("order", "2", 1)
	s.tx(between)
	s.xaCommit("x1")
	p := newPipeline(t, s, nil, &fakeDelivery{}, nil)
	p.hand(0, s.through(2))
	p.hand(s.through(2), s.through(3))
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	p.wantBatches(batch(s.set(2), ids(between)...), batch(s.set(3), ids(held)...))
	xa := p.snk.sealed[0].cp.XA
	if xa == nil || len(xa.Prepared) != 1 || xa.Prepared[0].XID != "x1" || xa.Prepared[0].GTID != s.gtid(1) || xa.Prepared[0].Rows != 2 {
		t.Fatalf("checkpoint before the XA COMMIT lists %+v, want x1 prepared at %s with 2 rows", xa, s.gtid(1))
	}
	if xa := p.snk.sealed[1].cp.XA; xa != nil {
		t.Fatalf("checkpoint at the XA COMMIT still lists %+v", xa)
	}
}

// A transaction larger than kafka.batch.max_records is sealed in parts,
// each with a partial checkpoint (the transaction's rows published so far)
// at the position before it. A stop inside it drops the rows read after
// the last part; the next run, from that checkpoint, publishes only the
// rest and seals the transaction's GTID without a partial.
func TestPipelinePartialTransactionCutByStopResumes(t *testing.T) {
	s := newScript("mariadb")
	rows := s.insert("order", "1", 5)
	s.tx(rows)
	bound := func(c *config.Config) { c.Kafka.Batch.MaxRecords = 2 }
	p := newPipeline(t, s, nil, &fakeDelivery{}, bound)
	p.hand(0, s.through(1)-1) // the rows, not the commit
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	p.wantBatches(batch("", "e1", "e2"), batch("", "e3", "e4"))
	for i, want := range []int64{2, 4} {
		if got := p.snk.sealed[i].cp.Partial; got == nil || got.GTID != s.gtid(1) || got.Rows != want {
			t.Fatalf("part %d: partial %+v, want %d rows of %s", i+1, got, want, s.gtid(1))
		}
	}

	last := p.snk.sealed[1].cp
	again := newPipeline(t, s, last, &fakeDelivery{}, bound)
	again.hand(0, s.through(1))
	if err := again.stop(); err != nil {
		t.Fatal(err)
	}
	again.wantBatches(batch(s.set(1), "e5"))
	if cp := again.snk.sealed[0].cp; cp.Partial != nil {
		t.Fatalf("the transaction's end sealed with partial %+v", cp.Partial)
	}
}

// Transactions handed over together are one batch, sealed once at the
// last one's position when the reader has nothing more. A commit running
// in the background holds the next transactions' records back, and they
// are sealed together once it has ended.
func TestPipelineBatchesTransactionsIntoOneSeal(t *testing.T) {
	build := func() *script {
		s := newScript("mariadb")
		s.tx(s.insert("order", "1", 1))
		s.tx(s.insert("order", "2", 2))
		s.tx()
		s.tx(s.insert("order", "1", 1))
		return s
	}
	t.Run("one hand-off", func(t *testing.T) {
		s := build()
		p := newPipeline(t, s, nil, &fakeDelivery{}, nil)
		p.hand(0, s.through(4))
		if err := p.stop(); err != nil {
			t.Fatal(err)
		}
		p.wantBatches(batch(s.set(4), "e1", "e2", "e3", "e4"))
	})
	t.Run("behind a commit in the background", func(t *testing.T) {
		s := build()
		snk := &fakeDelivery{gate: make(chan struct{})}
		p := newPipeline(t, s, nil, snk, nil)
		p.hand(0, s.through(1))                                    // sealed at once: the commit starts
		p.hand(s.through(1), s.through(4))                         // routed while it runs: held
		p.handEvents([]binlog.Event{{Kind: binlog.KindHeartbeat}}) // the hand-off before is handled
		snk.note("commit ended")
		close(snk.gate)
		if err := p.stop(); err != nil {
			t.Fatal(err)
		}
		p.wantBatches(batch(s.set(1), "e1"), batch(s.set(4), "e2", "e3", "e4"))
		want := []string{"produce e1", "seal " + s.set(1), "commit ended", "produce e2", "produce e3", "produce e4", "seal " + s.set(4)}
		if !slices.Equal(snk.log, want) {
			t.Fatalf("calls %q, want %q", snk.log, want)
		}
	})
	t.Run("bounded by max_records", func(t *testing.T) {
		s := build()
		p := newPipeline(t, s, nil, &fakeDelivery{}, maxRecords(3))
		p.hand(0, s.through(4))
		if err := p.stop(); err != nil {
			t.Fatal(err)
		}
		// A transaction that would take the batch to the bound seals the
		// batch before it; a transaction that fits stays whole.
		p.wantBatches(batch(s.set(1), "e1"), batch(s.set(3), "e2", "e3"), batch(s.set(4), "e4"))
	})
}
