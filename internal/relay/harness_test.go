package relay

// The harness of script_test.go: one pipeline on its own embedded broker,
// and its attempts, each fed by a fake reader.

import (
	"context"
	"errors"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/ha"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/source"
)

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
	c := kafkatest.Cluster(t, kfake.NumBrokers(1))
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
	todo []int
	next int
	kc   *attemptClients
	cl   *kgo.Client // kc.cl
	d    delivery
	// first and lane are the exactly-once delivery's lanes (lane: the
	// second, kafka.transaction_lanes 2, or nil).
	first, lane *lane
	events      chan []binlog.Event
	readErr     chan error
	cancel      context.CancelFunc // SIGTERM
	done        chan struct{}      // closed when the loop has returned err
	err         error
	endRun      context.CancelCauseFunc // ends the delivery's goroutines
	ran         chan struct{}           // closed once they have
}

// start begins an attempt from the committed checkpoint, with the steps
// and options of Relay.attempt (not its binlog reader).
func (h *harness) start() *attempt { return h.startWith(nil, false) }

// startWith is start under ls, a term's lease (nil: none), as Relay.attempt
// runs it inside an election (the delivery refuses to produce or commit
// once it is lost and fails what its clients buffer), and with
// kafka.delivery at-least-once when alo is set (no transactional id).
func (h *harness) startWith(ls *ha.Lease, alo bool) *attempt {
	t, r, cfg := h.t, h.relay, h.cfg
	t.Helper()
	k := r.kafka
	r.cfg.Kafka.Delivery = cfg.Kafka.Delivery
	if alo {
		cfg.Kafka.Delivery = config.AtLeastOnce
		r.cfg.Kafka.Delivery = config.AtLeastOnce
		var err error
		if k, err = clients.NewKafka(cfg); err != nil {
			t.Fatal(err)
		}
		k = k.WithLogger(r.log)
		r.store = k.CheckpointStore() // at-least-once checkpoints are not transactional
	}
	term := context.Background()
	if ls != nil {
		term = ls.Context()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	limits := &topicLimits{}
	cl, err := kgo.NewClient(producerOpts(k, 0, limits, nil, nil)...) // as Relay.attempt
	if err != nil {
		t.Fatal(err)
	}
	kc := &attemptClients{cl: cl, adm: kadm.NewClient(cl)}
	a := &attempt{h: h, kc: kc, cl: cl, events: make(chan []binlog.Event), readErr: make(chan error, 1), done: make(chan struct{})}
	fail := func(what string, err error) {
		t.Helper()
		kc.close()
		t.Fatalf("start attempt: %s: %v", what, err)
	}
	if err := r.store.EnsureTopic(ctx, kc.adm, cfg.Kafka.ReplicationFactor); err != nil {
		fail("checkpoint topic", err)
	}
	if !alo {
		if _, _, err := cl.ProducerID(ctx); err != nil { // fences the previous attempt, aborts its transaction
			fail("init producer", err)
		}
		if kc.lane, kc.check, err = r.secondLane(ctx, limits, nil); err != nil { // as Relay.attempt: the second transactional id
			fail("second lane", err)
		}
	}
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
	// As Relay.attempt: the delivery's goroutines run beside the loop;
	// records are produced under a context that the term's end does not
	// cancel.
	runCtx, endRun := context.WithCancelCause(context.WithoutCancel(term))
	a.endRun, a.ran = endRun, make(chan struct{})
	a.d = r.newDelivery(runCtx, kc, r.deliveryOptions(ls))
	if eo, ok := a.d.(*exactlyOnce); ok {
		a.first = eo.lanes[0]
		if len(eo.lanes) > 1 {
			a.lane = eo.lanes[1]
		}
	}
	go func() {
		defer close(a.ran)
		_ = a.d.run(runCtx)
	}()
	if ls != nil {
		go func() {
			select {
			case <-ls.Lost():
				endRun(ls.Err())
			case <-a.ran:
			}
		}()
	}
	l, err := newLoop(r, h.srv, a.cp, a.from, a.d, r.newCatalog(kc.adm, limits, nil))
	if err != nil {
		fail("new loop", err)
	}
	l.lease = ls
	l.release = refill // as the reader's Release: the hand-off is filled again
	l.pos.schema = tracker.Tables()
	if a.cp == nil {
		if err := l.commit(ctx); err != nil {
			fail("initial checkpoint", err)
		}
		if alo { // written once acknowledged: wait for it, as a restart would find it
			if _, err := a.d.(*atLeastOnce).finish(ctx); err != nil {
				fail("initial checkpoint", err)
			}
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
	stopCtx, stop := context.WithCancel(term) // SIGTERM, or the term's end
	a.cancel = stop
	go func() {
		defer close(a.done)
		a.err = l.run(stopCtx, runCtx, a.events, a.readErr)
		r.ackTimedOut(a.err, l.lastBatch) // as Relay.attempt does
		a.err = r.sizeRefused(a.err)
	}()
	return a
}

// refill stands for the reader's Release (binlog.Reader.Release), which
// fills a hand-off the loop gave back with later events: it overwrites
// every event of batch with one of another transaction, table and rows, so
// that a loop still pointing into a hand-off it gave back (a held XA row, a
// transaction split across hand-offs, a position or digest) publishes or
// checkpoints what is not the script's, and the harness's checks fail.
func refill(batch []binlog.Event) {
	other := &binlog.Table{Schema: "refilled", Name: "refilled", Columns: []string{"refilled"}}
	for i := range batch {
		batch[i] = binlog.Event{Kind: binlog.KindRows, GTID: "0-9-9", XID: "refilled", Table: other, Op: binlog.OpDelete,
			Rows: [][]any{{"refilled"}}, Digest: &binlog.TxDigest{Sum: "refilled"}, Note: "refilled", File: "refilled", Pos: 9}
	}
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
	// As Relay.attempt: the delivery's goroutines end with the loop, then
	// the open Kafka transactions are aborted (not after a crash: the
	// process died with them open).
	a.endRun(context.Canceled)
	<-a.ran
	if !crashed {
		ctx, cancel := context.WithTimeout(context.Background(), a.h.cfg.Kafka.RequestTimeout)
		if _, err := a.d.stop(ctx, false); err != nil {
			a.h.t.Logf("abort after the attempt: %v", err)
		}
		cancel()
	}
	a.kc.close()
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
