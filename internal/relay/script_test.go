package relay

// A test harness for the relay loop: a scripted binlog (the binlog.Event
// values binlog.Reader would send for it) runs through the real loop and
// sink onto an embedded Kafka broker (kfake). Attempts start from the
// committed checkpoint as Relay.attempt starts them; one ends by SIGTERM
// (its run context canceled: it must commit what it holds) or by a crash
// (it dies between two events, its Kafka transaction left open for the
// next attempt's producer initialisation to abort). verify compares what a
// read_committed consumer sees with the outbox rows the script committed,
// and checks every checkpoint written.
//
//	s := newScript("mariadb")
//	s.tx(s.insert("order", "1", 2)) // BEGIN; 2 outbox rows; COMMIT
//	h := newHarness(t, s, nil)
//	a := h.start()                  // an attempt from the committed checkpoint
//	a.feed(s.through(1) - 1)        // the reader sends the rows event, not the commit
//	a.term()                        // SIGTERM: a partial checkpoint
//	h.start().finish()              // restart, read to the end, SIGTERM
//	h.verify()

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/schema"
	"github.com/outbox-relay/outbox-relay/source"
)

// The captured table, with the default outbox columns.
var (
	outboxColumns = []string{"event_id", "aggregate_type", "aggregate_id", "event_type", "payload", "created_at"}
	outboxTable   = &binlog.Table{Schema: "app", Name: "outbox", Columns: outboxColumns}
	outboxSchema  = schema.Tables{"app.outbox": outboxColumns}
)

const mysqlUUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"

// outboxRow is one row inserted into app.outbox.
type outboxRow struct{ id, aggType, aggID string }

// script is a source binlog: its events in binlog order, and the outbox
// rows its committed transactions wrote, in commit order.
type script struct {
	flavor string
	n      int // source transactions so far
	events []binlog.Event
	ends   []int // ends[n-1]: index of the n-th transaction's last event
	want   []outboxRow
	held   map[string][]outboxRow // rows of XA transactions prepared and not yet ended
	rows   int                    // outbox rows written so far
	start  time.Time
}

// newScript starts a script whose transactions commit a second apart from
// now on: the loop reads them at the source's head (see behind).
func newScript(flavor string) *script {
	return &script{flavor: flavor, held: map[string][]outboxRow{}, start: time.Now().UTC().Truncate(time.Second)}
}

// behind makes s's transactions an hour old: the loop catches up (the
// batch is due at its bounds, or once the reader stays quiet).
func (s *script) behind() *script {
	s.start = s.start.Add(-time.Hour)
	return s
}

// gtid is the GTID of the n-th source transaction (from 1).
func (s *script) gtid(n int) string {
	if s.flavor == "mysql" {
		return mysqlUUID + ":" + strconv.Itoa(n)
	}
	return "0-1-" + strconv.Itoa(n)
}

// set is the GTID set of the first n source transactions, as the server
// renders it.
func (s *script) set(n int) string {
	v := "0-1-" + strconv.Itoa(n)
	switch {
	case n == 0:
		return ""
	case s.flavor == "mysql":
		v = mysqlUUID + ":1-" + strconv.Itoa(n)
	}
	set, err := binlog.ParseSet(s.flavor, v)
	if err != nil {
		panic(err)
	}
	return set.String()
}

// through is the number of events up to the end of the n-th transaction:
// a.feed(s.through(n)) sends the first n transactions.
func (s *script) through(n int) int { return s.ends[n-1] + 1 }

// end is the GTID set of the whole script.
func (s *script) end() string { return s.set(s.n) }

// insert returns n new outbox rows of one aggregate: one rows event's worth.
func (s *script) insert(aggType, aggID string, n int) []outboxRow {
	out := make([]outboxRow, n)
	for i := range out {
		s.rows++
		out[i] = outboxRow{id: "e" + strconv.Itoa(s.rows), aggType: aggType, aggID: aggID}
	}
	return out
}

// tx appends a transaction (BEGIN ... COMMIT) with one rows event per
// argument; without any, one that writes other tables only.
func (s *script) tx(rows ...[]outboxRow) string {
	for _, r := range rows {
		s.want = append(s.want, r...)
	}
	return s.group(binlog.KindCommit, "", false, rows)
}

// xaPrepare appends XA START xid; rows; XA END; XA PREPARE: one group.
func (s *script) xaPrepare(xid string, rows ...[]outboxRow) string {
	s.held[xid] = slices.Concat(rows...)
	return s.group(binlog.KindPrepare, xid, false, rows)
}

// xaCommit appends XA COMMIT xid, a group of its own, which commits the
// rows of its prepare.
func (s *script) xaCommit(xid string) string {
	s.want = append(s.want, s.held[xid]...)
	delete(s.held, xid)
	return s.group(binlog.KindCommit, xid, false, nil)
}

// xaRollback appends XA ROLLBACK xid.
func (s *script) xaRollback(xid string) string {
	delete(s.held, xid)
	return s.group(binlog.KindRollback, xid, false, nil)
}

// xaOnePhase appends XA START xid; rows; XA END; XA COMMIT xid ONE PHASE.
func (s *script) xaOnePhase(xid string, rows ...[]outboxRow) string {
	s.want = append(s.want, slices.Concat(rows...)...)
	return s.group(binlog.KindCommit, xid, true, rows)
}

// group appends one source transaction's events as binlog.Reader sends
// them: a rows event per element of rows, then its end (kind) carrying the
// GTID set including it and the captured tables' layout.
func (s *script) group(kind binlog.Kind, xid string, onePhase bool, rows [][]outboxRow) string {
	s.n++
	gtid, at := s.gtid(s.n), s.start.Add(time.Duration(s.n)*time.Second)
	for _, rs := range rows {
		ev := binlog.Event{Kind: binlog.KindRows, GTID: gtid, XID: xid, Table: outboxTable, Op: binlog.OpInsert, Time: at, Size: 100}
		for _, r := range rs {
			ev.Rows = append(ev.Rows, []any{r.id, r.aggType, r.aggID, "created", []byte(payload(r.id)), at.Format(time.DateTime)})
		}
		s.events = append(s.events, ev)
	}
	set, err := binlog.ParseSet(s.flavor, s.set(s.n))
	if err != nil {
		panic(err)
	}
	s.events = append(s.events, binlog.Event{Kind: kind, GTID: gtid, XID: xid, OnePhase: onePhase, Set: set,
		Schema: outboxSchema, Time: at, Size: 50})
	s.ends = append(s.ends, len(s.events)-1)
	return gtid
}

func payload(id string) string { return `{"id":"` + id + `"}` }

// harness is one pipeline on its own embedded broker.
type harness struct {
	t     *testing.T
	s     *script
	cfg   config.Config
	relay *Relay
	srv   *binlog.Server
	kafka *kfake.Cluster
	// batch is how many events the reader hands the loop at once; 0: all
	// that feed is given (a catch-up). The events channel is unbuffered, so
	// no batch is ever waiting when the loop ends one: it commits at the end
	// of every batch that ends a source transaction, and this decides where
	// Kafka transactions end (besides max_records and the ticker).
	batch int
}

// newHarness starts a broker for s; tweak (may be nil) adjusts the
// configuration.
func newHarness(t *testing.T, s *script, tweak func(*config.Config)) *harness {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cfg := config.Default()
	cfg.Name = "pipeline"
	cfg.Source.Flavor = config.Flavor(s.flavor)
	cfg.Source.Tables = []string{"app.outbox"}
	cfg.Source.Start = "earliest"
	cfg.Kafka.Brokers = c.ListenAddrs()
	cfg.Kafka.ReplicationFactor = 1
	cfg.Kafka.RequestTimeout = 5 * time.Second
	// No commit by time unless a test asks for it: batches end where the
	// script and the reader's batches say.
	cfg.Kafka.Batch.MaxWait = time.Minute
	cfg.Kafka.CheckpointInterval = time.Minute
	cfg.Log.ProgressInterval = 0
	if tweak != nil {
		tweak(&cfg)
	}
	r, err := New(cfg, zerolog.Nop(), metrics.New("test"))
	if err != nil {
		t.Fatal(err)
	}
	// The scripted source has no binlog to look an XA prepare up in.
	r.findXAPrepare = func(context.Context, *binlog.Server, string, string) (*source.XAPrepare, error) { return nil, nil }
	srv := &binlog.Server{Addr: "127.0.0.1:1", Flavor: s.flavor, Version: "test", ServerID: "1"}
	if s.flavor == "mysql" {
		srv.ServerID = mysqlUUID
	}
	return &harness{t: t, s: s, cfg: cfg, relay: r, srv: srv, kafka: c, batch: 1}
}

// errCrash is what a crashed attempt's reader reports.
var errCrash = errors.New("crash (test)")

// attempt is one run of the loop, fed by a fake reader.
type attempt struct {
	h    *harness
	cp   *checkpoint.Checkpoint // loaded at the start
	from string                 // start position (Relay.startPosition)
	// todo are the script's events a reader started at from sends (every
	// transaction from does not contain), as indexes, in order; next is
	// the next to send.
	todo    []int
	next    int
	cl      *kgo.Client
	snk     sink
	laneCl  *kgo.Client // the second lane (kafka.transaction_lanes 2), or nil
	checkCl *kgo.Client // its question's client (lanes.go)
	lane    *exactlyOnceSink
	events  chan []binlog.Event
	readErr chan error
	cancel  context.CancelFunc // SIGTERM
	done    chan struct{}      // closed when the loop has returned err
	err     error
}

// start begins an attempt from the committed checkpoint, with the steps
// and options of Relay.attempt (not its binlog reader).
func (h *harness) start() *attempt {
	t, r, cfg := h.t, h.relay, h.cfg
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	limits := &topicLimits{}
	cl, err := kgo.NewClient(producerOpts(r.kafka, 0, limits, nil, nil)...) // as Relay.attempt
	if err != nil {
		t.Fatal(err)
	}
	a := &attempt{h: h, cl: cl, events: make(chan []binlog.Event), readErr: make(chan error, 1), done: make(chan struct{})}
	fail := func(what string, err error) {
		t.Helper()
		cl.Close()
		t.Fatalf("start attempt: %s: %v", what, err)
	}
	if err := r.store.EnsureTopic(ctx, kadm.NewClient(cl), cfg.Kafka.ReplicationFactor); err != nil {
		fail("checkpoint topic", err)
	}
	if _, _, err := cl.ProducerID(ctx); err != nil { // fences the previous attempt, aborts its transaction
		fail("init producer", err)
	}
	laneCl, checkCl, err := r.secondLane(ctx, limits, nil) // as Relay.attempt: the second transactional id
	if err != nil {
		fail("second lane", err)
	}
	a.laneCl, a.checkCl = laneCl, checkCl
	if a.cp, err = r.store.Load(ctx, cfg.Name); err != nil {
		fail("load checkpoint", err)
	}
	if a.from, err = r.startPosition(h.srv, a.cp); err != nil {
		fail("start position", err)
	}
	tracker, err := r.tracker(ctx, h.srv, a.cp)
	if err != nil {
		fail("schema tracker", err)
	}
	opts := sinkOptions{timeout: cfg.Kafka.RequestTimeout,
		txnTimeout: cfg.Kafka.TransactionTimeout, parts: cfg.Kafka.TopicPartitions, repl: cfg.Kafka.ReplicationFactor,
		maxUnacked: int64(2 * cfg.Kafka.Batch.MaxRecords), limits: limits, traced: r.spans != nil}
	first := newExactlyOnceSink(context.Background(), cl, r.store, opts)
	a.snk = first
	l, err := newLoop(r, h.srv, a.cp, a.from, a.snk)
	if err != nil {
		fail("new loop", err)
	}
	if laneCl != nil {
		a.lane = newLane(context.Background(), laneCl, checkCl, r.store, opts, first)
		l.addLane(a.lane)
	}
	l.schema = tracker.Tables()
	if a.cp == nil {
		if err := l.commit(ctx); err != nil {
			fail("initial checkpoint", err)
		}
	}
	from, err := binlog.ParseSet(h.s.flavor, a.from)
	if err != nil {
		fail("start position", err)
	}
	for i, ev := range h.s.events {
		if one, _ := binlog.ParseSet(h.s.flavor, ev.GTID); !from.Contain(one) {
			a.todo = append(a.todo, i)
		}
	}
	runCtx, stop := context.WithCancel(context.Background())
	a.cancel = stop
	go func() {
		defer close(a.done)
		a.err = l.run(runCtx, a.events, a.readErr)
		r.ackTimedOut(a.err, l.lastBatch) // as Relay.attempt does
		a.err = r.sizeRefused(a.err)
	}()
	return a
}

// feed sends the events the reader has not sent yet whose script index is
// below until, in batches of h.batch, and returns once the loop has taken
// the last batch (or has returned).
func (a *attempt) feed(until int) {
	var batch []binlog.Event
	for a.next < len(a.todo) && a.todo[a.next] < until {
		batch = append(batch, a.h.s.events[a.todo[a.next]])
		a.next++
		if len(batch) == a.h.batch || a.next == len(a.todo) || a.todo[a.next] >= until {
			select {
			case a.events <- batch: // unbuffered: the loop has it
			case <-a.done:
				return
			}
			batch = nil
		}
	}
}

// feedAll sends everything left.
func (a *attempt) feedAll() { a.feed(len(a.h.s.events)) }

// term delivers SIGTERM and returns what the loop returns.
func (a *attempt) term() error {
	a.cancel()
	return a.wait()
}

// crash makes the attempt die where it is: its reader fails, and the loop's
// Kafka transaction is neither committed nor aborted (the client closes as
// the process would exit).
func (a *attempt) crash() error {
	a.readErr <- errCrash
	return a.end(true)
}

// finish reads to the end of the script and stops with SIGTERM, which must
// succeed.
func (a *attempt) finish() {
	a.h.t.Helper()
	a.feedAll()
	if err := a.term(); err != nil {
		a.h.t.Fatalf("SIGTERM after the whole script: %v", err)
	}
}

// wait waits for the loop to return by itself and cleans up after it as
// Relay.attempt does: an open Kafka transaction is aborted.
func (a *attempt) wait() error { return a.end(false) }

func (a *attempt) end(crashed bool) error {
	a.h.t.Helper()
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		// Where it is stuck: every goroutine's stack (a rare hang is
		// otherwise left without a trace).
		var stacks strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&stacks, 2)
		a.h.t.Fatalf("the loop did not return; goroutines:\n%s", stacks.String())
	}
	snks := []sink{a.snk}
	if a.lane != nil {
		snks = append(snks, a.lane)
	}
	for _, snk := range snks {
		if !crashed && snk.isOpen() {
			ctx, cancel := context.WithTimeout(context.Background(), a.h.cfg.Kafka.RequestTimeout)
			if err := snk.abort(ctx); err != nil {
				a.h.t.Logf("abort after the attempt: %v", err)
			}
			cancel()
		}
	}
	a.cl.Close()
	if a.laneCl != nil {
		a.laneCl.Close()
		a.checkCl.Close()
	}
	return a.err
}

// running reports whether the loop has not returned yet.
func (a *attempt) running() bool {
	select {
	case <-a.done:
		return false
	default:
		return true
	}
}

// stopEvery runs the script in a chain of attempts: the k-th reads up to
// script event k (1, 2, ... len-1) and is then stopped by stop (term or
// crash); the last reads to the end and stops with SIGTERM.
func (h *harness) stopEvery(stop func(*attempt) error, want error) {
	h.t.Helper()
	for k := 1; k < len(h.s.events); k++ {
		a := h.start()
		a.feed(k)
		if err := stop(a); !errors.Is(err, want) {
			h.t.Fatalf("stopped after event %d: %v, want %v", k, err, want)
		}
	}
	h.start().finish()
}

// waitCheckpoint polls the committed checkpoint until ok accepts it.
func (h *harness) waitCheckpoint(what string, ok func(*checkpoint.Checkpoint) bool) *checkpoint.Checkpoint {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		cp := h.load()
		if cp != nil && ok(cp) {
			return cp
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no committed checkpoint %s; the last is %+v", what, cp)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *harness) load() *checkpoint.Checkpoint {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cp, err := h.relay.store.Load(ctx, h.cfg.Name)
	if err != nil {
		h.t.Fatal(err)
	}
	return cp
}

func (h *harness) history() []*checkpoint.Checkpoint {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	all, err := h.relay.store.History(ctx, h.cfg.Name, 1<<20)
	if err != nil {
		h.t.Fatal(err)
	}
	return all
}

// verify checks the end state: every committed outbox row published once
// (read_committed), nothing else, each aggregate in commit order; the
// checkpoint at the script's end; no checkpoint ever moved backwards; no
// transaction left open.
func (h *harness) verify() {
	h.t.Helper()
	h.verifyPublished(h.s.want)
	cp := h.load()
	if cp == nil || cp.GTIDSet != h.s.end() || cp.Partial != nil {
		h.t.Errorf("final checkpoint %+v, want gtid_set %q and nothing partial", cp, h.s.end())
	} else if cp.Events != int64(len(h.s.want)) {
		h.t.Errorf("final checkpoint counts %d events, %d published", cp.Events, len(h.s.want))
	}
	var prepared []string
	if cp != nil && cp.XA != nil {
		for _, p := range cp.XA.Prepared {
			prepared = append(prepared, p.XID)
		}
	}
	if want := slices.Sorted(maps.Keys(h.s.held)); !slices.Equal(slices.Sorted(slices.Values(prepared)), want) {
		h.t.Errorf("final checkpoint lists prepared XA transactions %v, want %v", prepared, want)
	}
	h.verifyHistory()
	h.verifyNoOpenTransaction()
}

// verifyHistory checks that no checkpoint moved backwards: the GTID set
// never shrinks, and at the same GTID set a partial transaction's count of
// published rows never drops (nor is forgotten).
func (h *harness) verifyHistory() {
	h.t.Helper()
	all := h.history()
	for i := 1; i < len(all); i++ {
		prev, cur := all[i-1], all[i]
		ps, err1 := binlog.ParseSet(h.s.flavor, prev.GTIDSet)
		cs, err2 := binlog.ParseSet(h.s.flavor, cur.GTIDSet)
		if err := errors.Join(err1, err2); err != nil {
			h.t.Fatal(err)
		}
		if !cs.Contain(ps) {
			h.t.Errorf("checkpoint %d moved backwards: gtid_set %q after %q", i, cur.GTIDSet, prev.GTIDSet)
			continue
		}
		if ps.Contain(cs) && prev.Partial != nil &&
			(cur.Partial == nil || cur.Partial.GTID != prev.Partial.GTID || cur.Partial.Rows < prev.Partial.Rows) {
			h.t.Errorf("checkpoint %d moved backwards at %q: partial %+v after %+v", i, cur.GTIDSet, cur.Partial, prev.Partial)
		}
	}
}

// verifyPublished reads the outbox topics read_committed and compares them
// with want.
func (h *harness) verifyPublished(want []outboxRow) {
	h.t.Helper()
	recs := h.consume()
	seen := map[string]int{}
	got := map[string][]string{} // topic/key -> event ids, in offset order
	for _, r := range recs {
		id := header(r, "id")
		seen[id]++
		k := r.Topic + "/" + string(r.Key)
		got[k] = append(got[k], id)
		if string(r.Value) != payload(id) {
			h.t.Errorf("record %s has value %s", id, r.Value)
		}
	}
	wantOrder := map[string][]string{}
	wanted := map[string]bool{}
	for _, w := range want {
		wanted[w.id] = true
		k := h.cfg.Router.TopicPrefix + w.aggType + "/" + w.aggID
		wantOrder[k] = append(wantOrder[k], w.id)
		if seen[w.id] == 0 {
			h.t.Errorf("row %s (%s/%s) not published", w.id, w.aggType, w.aggID)
		}
	}
	for id, n := range seen {
		switch {
		case !wanted[id]:
			h.t.Errorf("record %s published %d times, but its row was never committed", id, n)
		case n > 1:
			h.t.Errorf("row %s published %d times", id, n)
		}
	}
	if h.t.Failed() {
		return
	}
	for k, ids := range wantOrder {
		if !slices.Equal(got[k], ids) {
			h.t.Errorf("aggregate %s published in the order %v, committed %v", k, got[k], ids)
		}
	}
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// outboxTopics are the topics the relay created for outbox rows.
func (h *harness) outboxTopics(ctx context.Context, adm *kadm.Client) []string {
	h.t.Helper()
	all, err := adm.ListTopics(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, name := range all.Names() {
		if strings.HasPrefix(name, h.cfg.Router.TopicPrefix) {
			out = append(out, name)
		}
	}
	return out
}

// consume returns every record of the outbox topics a read_committed
// consumer sees, up to each partition's last stable offset, in offset order
// per partition.
func (h *harness) consume() []*kgo.Record {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.cfg.Kafka.Brokers...))
	if err != nil {
		h.t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics := h.outboxTopics(ctx, adm)
	if len(topics) == 0 {
		return nil
	}
	starts, err1 := adm.ListStartOffsets(ctx, topics...)
	ends, err2 := adm.ListCommittedOffsets(ctx, topics...)
	if err := errors.Join(err1, err2, starts.Error(), ends.Error()); err != nil {
		h.t.Fatal(err)
	}
	parts := map[string]map[int32]kgo.Offset{}
	left := map[string]int64{} // topic/partition -> end offset still to reach
	ends.Each(func(o kadm.ListedOffset) {
		start, _ := starts.Lookup(o.Topic, o.Partition)
		if o.Offset > start.Offset {
			if parts[o.Topic] == nil {
				parts[o.Topic] = map[int32]kgo.Offset{}
			}
			parts[o.Topic][o.Partition] = kgo.NewOffset().At(start.Offset)
			left[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.Offset
		}
	})
	if len(parts) == 0 {
		return nil
	}
	c, err := kgo.NewClient(kgo.SeedBrokers(h.cfg.Kafka.Brokers...), kgo.ConsumePartitions(parts),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		h.t.Fatal(err)
	}
	defer c.Close()
	var out []*kgo.Record
	for len(left) > 0 {
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			h.t.Fatalf("consume the outbox topics: %v (partitions not read to the end: %v)", err, left)
		}
		fs.EachError(func(topic string, p int32, err error) { h.t.Fatalf("consume %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			k := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
			if end, ok := left[k]; ok && r.Offset+1 >= end {
				delete(left, k)
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out
}

// verifyNoOpenTransaction checks that on every outbox and checkpoint
// partition the last stable offset (what read_committed consumers read up
// to) is the high watermark: no transaction is left open.
func (h *harness) verifyNoOpenTransaction() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.cfg.Kafka.Brokers...))
	if err != nil {
		h.t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics := append(h.outboxTopics(ctx, adm), h.cfg.Kafka.CheckpointTopic)
	hwm, err1 := adm.ListEndOffsets(ctx, topics...)
	lso, err2 := adm.ListCommittedOffsets(ctx, topics...)
	if err := errors.Join(err1, err2, hwm.Error(), lso.Error()); err != nil {
		h.t.Fatal(err)
	}
	hwm.Each(func(o kadm.ListedOffset) {
		if s, _ := lso.Lookup(o.Topic, o.Partition); s.Offset != o.Offset {
			h.t.Errorf("%s/%d: last stable offset %d, high watermark %d: a transaction is open", o.Topic, o.Partition, s.Offset, o.Offset)
		}
	})
}

// matrix runs the script build makes, for both flavors, each way on a
// broker of its own and verifies each: straight through (one event per
// batch, and all at once), SIGTERM after every event, a crash after every
// event (each stop followed by a restart from the committed checkpoint).
func matrix(t *testing.T, build func(flavor string) *script, tweak func(*config.Config)) {
	for _, flavor := range []string{"mariadb", "mysql"} {
		for _, batch := range []int{1, 0} {
			name := fmt.Sprintf("matrix/%s/batch=%d", flavor, batch)
			if batch == 0 {
				name = "matrix/" + flavor + "/batch=all"
			}
			run := func(name string, f func(h *harness)) {
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					h := newHarness(t, build(flavor), tweak)
					h.batch = batch
					f(h)
					h.verify()
				})
			}
			run(name+"/straight", func(h *harness) { h.start().finish() })
			run(name+"/sigterm-after-every-event", func(h *harness) { h.stopEvery((*attempt).term, nil) })
			run(name+"/crash-after-every-event", func(h *harness) { h.stopEvery((*attempt).crash, errCrash) })
		}
	}
}
