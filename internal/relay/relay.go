// Package relay wires binlog, router and checkpoint into the running
// pipeline. Run owns a loop of attempts: each attempt fences older producers,
// loads the committed checkpoint, streams the binlog from it and commits
// batches; any error that leaves an outcome unknown ends the attempt and the
// next one resumes from the committed checkpoint, never from memory.
//
// An attempt runs its parts in one errgroup (Relay.attempt): the binlog
// reader feeds the loop (loop.go), whose goroutine owns all pipeline state
// and takes each event one way through assemble (assemble.go), route
// (route.go, asking the topic catalog: catalog.go), the batch policy
// (batch.go) and the delivery (delivery.go: exactly-once or at-least-once,
// each owning its Kafka-side state and goroutines); the only way back is
// the delivery's committed stream. docs/architecture.md draws it.
//
// The error policy lives in internal/errclass: every sentinel has one
// Class, and whether an error is fatal, stops at a source transaction,
// which exit code `run` returns and which kind label metrics and logs give
// it all derive from that class. This package's sentinels are made with
// errclass.New; errclass_test.go fails on one without.
package relay

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/ha"
	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/spans"
	"github.com/outbox-relay/outbox-relay/router"
	"github.com/outbox-relay/outbox-relay/schema"
	"github.com/outbox-relay/outbox-relay/source"
)

// Sentinels callers branch on.
var (
	// ErrFlavorMismatch: the checkpoint was written for another flavor.
	ErrFlavorMismatch = errclass.New(errclass.ConfigStop, "source_config", "checkpoint flavor mismatch")
	// ErrBadRow wraps router.ErrBadRow with table, event id and GTID.
	ErrBadRow = router.ErrBadRow
)

// Relay is one pipeline.
type Relay struct {
	cfg     config.Config
	log     zerolog.Logger
	metrics *metrics.Metrics
	routes  map[tableKey]*route
	kafka   clients.Kafka
	source  binlog.Config
	store   *checkpoint.Store
	// findXAPrepare looks an XA transaction's prepare up in the source's
	// binlogs (source.FindXAPrepare; tests replace it).
	findXAPrepare func(ctx context.Context, srv *binlog.Server, xid, commitGTID string) (*source.XAPrepare, error)
	// refused holds the source hosts whose binlog stream refused a
	// position that their variables said they had (source.go); owned by
	// the goroutine of Run.
	refused map[string]hostRefusal
	// limit is the records bound of batches after Kafka was slow to
	// acknowledge (batchlimit.go); 0: kafka.batch.max_records. tooLarge:
	// the last attempt ended with a batch Kafka refused as too large.
	// Owned by the goroutine of Run.
	limit    int
	tooLarge bool
	// quiet is the catch-up quiet window (0: catchUpQuiet; tests widen it
	// so that a scheduling stall of the scripted reader is not quiet).
	quiet time.Duration
	// had is the checkpoint this process last loaded or committed (nil:
	// none yet); elector its lock group membership (nil in tests that
	// run attempts alone): identity.go. Owned by the goroutine of Run.
	had     *checkpoint.Had
	elector *ha.Elector
	// spans are the relay's own spans (nil: off); set by Run for its
	// duration, read by the route step (route.go) of each attempt.
	spans *spans.Tracer
	// tables are source.tables as checkpoints record them.
	tables []string
}

// New builds a relay from a validated configuration.
func New(cfg config.Config, log zerolog.Logger, m *metrics.Metrics) (*Relay, error) {
	routes := make(map[tableKey]*route, len(cfg.Source.Tables))
	for _, t := range cfg.Source.Tables {
		rc := cfg.Router.For(t)
		rt, err := clients.TableRouter(cfg, rc, t)
		if err != nil {
			return nil, fmt.Errorf("router for %s: %w", t, err)
		}
		db, tbl, _ := strings.Cut(t, ".")
		r := &route{router: rt, invalidOp: string(rc.InvalidOp), table: t}
		if rc.OnError == "dead-letter" {
			r.deadLetter = cfg.DeadLetterTopicFor(t)
		}
		routes[tableKey{db, tbl}] = r
	}
	k, err := clients.NewKafka(cfg)
	if err != nil {
		return nil, err
	}
	k = k.WithLogger(log)
	src, err := clients.Source(cfg)
	if err != nil {
		return nil, err
	}
	return &Relay{
		findXAPrepare: func(ctx context.Context, srv *binlog.Server, xid, commitGTID string) (*source.XAPrepare, error) {
			return source.FindXAPrepare(ctx, src, srv, xid, commitGTID)
		},
		cfg:     cfg,
		log:     log,
		metrics: m,
		routes:  routes,
		kafka:   k,
		source:  src,
		store:   k.CheckpointStore(),
		tables:  checkpoint.TablesOf(cfg.Source.Tables),
	}, nil
}

// Run relays until ctx is canceled (then it commits what it has, writes the
// final checkpoint and returns nil) or a fatal error occurs. Several
// instances with the same name may run: Run first joins the lock group
// (ha.*), waits as a standby and relays only while this instance holds the
// lease; losing it, or being fenced, returns it to standby (see elect and
// docs/ha.md). Errors before the first successful start are returned at
// once, so a misconfiguration fails fast; later ones are retried with
// back-off and jitter.
func (r *Relay) Run(ctx context.Context) error {
	tr, err := spans.New(ctx, r.cfg.Tracing, spans.Options{Pipeline: r.cfg.Name, Version: r.metrics.Version,
		OnError: func(err error) {
			r.log.Warn().Err(err).Msg("tracing: spans not exported (the rows are published; their spans are dropped)")
		}})
	if err != nil {
		return err
	}
	r.spans = tr
	defer func() {
		// The spans ended so far go out, within a bound: a receiver that
		// does not answer does not hold the stop up.
		sctx, cancel := context.WithTimeout(context.Background(), spanShutdown)
		defer cancel()
		if err := tr.Shutdown(sctx); err != nil {
			r.log.Warn().Err(err).Msg("spans not exported at stop")
		}
		r.spans = nil
	}()
	return r.elect(ctx)
}

// spanShutdown bounds the export of the last spans when Run returns.
const spanShutdown = 5 * time.Second

// producerOpts are the options of an attempt's producer of lane
// (clients.Kafka.Producer): batches bounded by limits, every record in the
// partition the loop chose for it, the counts franz-go knows compared with
// place's (nil: not compared), client metrics from m.
func producerOpts(k clients.Kafka, lane int, limits *topicLimits, place *placements, m *metrics.Metrics) []kgo.Opt {
	var part kgo.Partitioner
	if place != nil {
		part = clients.ObservedPartitioner(place)
	}
	return k.Producer(lane, clients.Attempt{BatchMaxBytes: limits.batchMaxBytes, Partitioner: part, Metrics: m})
}

// secondLane initialises the pipeline's second transactional id
// (checkpoint.TransactionalIDs) before the checkpoint is read, whatever
// kafka.transaction_lanes: that fences an older instance's second lane and
// ends its open transaction (a relay restarted with one lane after two must
// not leave one open, holding back the checkpoint topic). With two lanes it
// returns the producer, and a plain client of the same settings for the
// second lane's question before each commit (lanes.go); with one it closes
// it and returns nils, and a principal not allowed the id (so that no relay
// under it wrote with it) is no error. The caller closes both.
func (r *Relay) secondLane(ctx context.Context, limits *topicLimits, place *placements) (lane, check *kgo.Client, err error) {
	id := checkpoint.TransactionalIDs(r.cfg.Name)[1]
	cl, err := kgo.NewClient(producerOpts(r.kafka, 1, limits, place, nil)...)
	if err != nil {
		return nil, nil, fmt.Errorf("create kafka client: %w", err)
	}
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		if r.cfg.Kafka.TransactionLanes < 2 && kafkaerr.TxnIDDenied(err) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("init transactional producer %s (the second lane, kafka.transaction_lanes: grant it WRITE as the pipeline's name, or set 1): %w",
			id, errclass.Kafka(err))
	}
	if r.cfg.Kafka.TransactionLanes < 2 {
		cl.Close()
		return nil, nil, nil
	}
	check, err = kgo.NewClient(r.kafka.Admin()...)
	if err != nil {
		cl.Close()
		return nil, nil, fmt.Errorf("create kafka client: %w", err)
	}
	return cl, check, nil
}

// attemptClients are an attempt's Kafka clients: the producer of the first
// lane, with an admin client over it, and when there is a second lane its
// producer and the client that asks about its transactions.
type attemptClients struct {
	cl, lane, check *kgo.Client
	adm             *kadm.Client
}

// close closes the clients, the second lane's first.
func (c *attemptClients) close() {
	if c.lane != nil {
		c.check.Close()
		c.lane.Close()
	}
	c.cl.Close()
}

// openKafka connects an attempt to Kafka: the producer answers a ping within
// kafka.request_timeout, the checkpoint topic exists, and under exactly-once
// the producer ids are initialised (fencing any older instance and aborting
// its open transaction, so the checkpoint read next is final) and the second
// lane opened. On an error nothing stays open.
func (r *Relay) openKafka(ctx context.Context, limits *topicLimits, place *placements) (*attemptClients, error) {
	cl, err := kgo.NewClient(producerOpts(r.kafka, 0, limits, place, r.metrics)...)
	if err != nil {
		return nil, fmt.Errorf("create kafka client: %w", err)
	}
	kc := &attemptClients{cl: cl, adm: kadm.NewClient(cl)}
	if err := r.connectKafka(ctx, kc, limits, place); err != nil {
		kc.close()
		return nil, err
	}
	return kc, nil
}

func (r *Relay) connectKafka(ctx context.Context, kc *attemptClients, limits *topicLimits, place *placements) error {
	pingCtx, pingCancel := context.WithTimeout(ctx, r.cfg.Kafka.RequestTimeout)
	err := kc.cl.Ping(pingCtx)
	pingCancel()
	if err != nil {
		return fmt.Errorf("%w: %v: %w (check kafka.brokers, kafka.tls and kafka.sasl)", ErrKafkaUnreachable, r.cfg.Kafka.Brokers, err)
	}
	if err := r.store.EnsureTopic(ctx, kc.adm, r.cfg.Kafka.ReplicationFactor); err != nil {
		return errclass.Kafka(err) // not authorised for the checkpoint topic: a configuration stop
	}
	if r.cfg.Kafka.Delivery != config.ExactlyOnce {
		return nil
	}
	if _, _, err := kc.cl.ProducerID(ctx); err != nil {
		return fmt.Errorf("init transactional producer %s: %w", r.cfg.Name, errclass.Kafka(err))
	}
	kc.lane, kc.check, err = r.secondLane(ctx, limits, place)
	return err
}

// deliveryOptions are the options of an attempt's delivery under ls.
func (r *Relay) deliveryOptions(ls *ha.Lease) deliveryOptions {
	return deliveryOptions{timeout: r.cfg.Kafka.RequestTimeout, txnTimeout: r.cfg.Kafka.TransactionTimeout,
		maxUnackedBytes: int64(2 * r.cfg.Kafka.Batch.MaxBytes), log: r.log, metrics: r.metrics, lease: ls}
}

// newDelivery is an attempt's delivery on its clients, producing under
// ctx: at-least-once, one producer; exactly-once, a lane per
// transactional id in use (the second, when kc has one, following the
// first: lanes.go).
func (r *Relay) newDelivery(ctx context.Context, kc *attemptClients, opts deliveryOptions) delivery {
	acct := newAccounting(opts.metrics)
	if r.cfg.Kafka.Delivery != config.ExactlyOnce {
		return newAtLeastOnce(ctx, kc.cl, r.store, opts, acct)
	}
	lanes := []*lane{newLane(ctx, kc.cl, r.store, opts)}
	if kc.lane != nil {
		second := newLane(ctx, kc.lane, r.store, opts)
		second.follow(lanes[0], kc.check)
		lanes = append(lanes, second)
	}
	return newExactlyOnce(lanes, acct)
}

// newCatalog is an attempt's topic catalog, asking through adm.
func (r *Relay) newCatalog(adm *kadm.Client, limits *topicLimits, place *placements) *catalog {
	k := r.cfg.Kafka
	return newCatalog(adm, r.store.Topic(), k.RequestTimeout, k.TopicPartitions, k.ReplicationFactor, r.log, limits, place)
}

// stopAbortTimeout bounds the abort of a stopping relay's open transaction.
// A broker that does not answer has already held the stop for up to
// kafka.request_timeout on the last flush; waiting as long again for the
// abort would pass the service manager's stop timeout (systemd's
// TimeoutStopSec and the pod's grace period, 60 s). An abort left undone is
// safe: the broker aborts the transaction at kafka.transaction_timeout.
const stopAbortTimeout = 5 * time.Second

// abortOpen ends a failed attempt's open Kafka transactions at once, so that
// read_committed consumers of their partitions (and of the shared checkpoint
// topic) are not held up until the broker times them out. It takes
// kafka.request_timeout at most, or stopAbortTimeout once ctx (the run's)
// has ended: the relay is stopping.
func (r *Relay) abortOpen(ctx context.Context, d delivery) {
	timeout := r.cfg.Kafka.RequestTimeout
	if ctx.Err() != nil {
		timeout = min(timeout, stopAbortTimeout)
	}
	actx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := d.stop(actx, false); err != nil {
		r.log.Warn().Err(err).Msg("abort the open kafka transaction of the failed attempt")
	}
}

// attempt runs one pipeline from the committed checkpoint, under ls, the
// term's lease (nil without an election), which its loop and delivery
// check before every produce, checkpoint write and commit.
//
// The attempt's parts run in one errgroup: the delivery's goroutines, the
// binlog reader, the source sampler, the stale-host watcher, the readiness
// watch, the lease watch and the loop. The first to fail ends the others
// with its error as the cause (a lost lease: ha.ErrLeaseLost); the loop's
// end ends them all. attempt returns only once every one has, so nothing
// of one attempt runs on into the next.
func (r *Relay) attempt(ctx context.Context, ls *ha.Lease, started *bool) error {
	limits := &topicLimits{}
	place := newPlacements(r.cfg.Kafka.OnPartitionsAdded, r.log)
	kc, err := r.openKafka(ctx, limits, place)
	if err != nil {
		return err
	}
	defer kc.close()
	cp, placed, cpTopic, err := r.loadCheckpoint(ctx, kc.adm)
	if err != nil {
		return errclass.Kafka(err)
	}
	if cp != nil {
		r.metrics.CheckpointKnown(cp.Time, cp.CommitTime) // purge margin and age from the start, whatever comes next
	}
	place.load(placed) // after a reset too: it moved the position, not the keys

	// The first of source.hosts that has every published transaction; waits
	// while the usable ones are only behind (source.go).
	srv, err := r.chooseSource(ctx, cp)
	if err != nil {
		return err
	}
	from, err := r.startPosition(srv, cp)
	if err != nil {
		return err
	}
	tracker, err := r.tracker(ctx, srv, cp)
	if err != nil {
		return err
	}
	runCtx, endRun := context.WithCancelCause(context.WithoutCancel(ctx))
	defer endRun(context.Canceled)
	g, gctx := errgroup.WithContext(runCtx)
	d := r.newDelivery(runCtx, kc, r.deliveryOptions(ls))
	g.Go(func() error { return d.run(gctx) })
	if lost := ls.Lost(); lost != nil {
		g.Go(func() error {
			select {
			case <-lost:
				return ls.Err() // the cause every part sees
			case <-gctx.Done():
				return nil
			}
		})
	}
	err = r.stream(ctx, gctx, g, attemptStart{srv: srv, cp: cp, from: from, cpTopic: cpTopic, tracker: tracker,
		d: d, topics: r.newCatalog(kc.adm, limits, place), lease: ls, started: started})
	endRun(context.Canceled)
	if werr := g.Wait(); err == nil && werr != nil {
		err = werr
	}
	r.abortOpen(ctx, d)
	return err
}

// attemptStart is where an attempt's loop starts and what it runs with.
type attemptStart struct {
	srv     *binlog.Server
	cp      *checkpoint.Checkpoint
	from    string
	cpTopic checkpoint.TopicState
	tracker *schema.Tracker
	d       delivery
	topics  *catalog
	lease   *ha.Lease
	started *bool
}

// stream runs the attempt's loop and the parts that feed it in g (whose
// context is gctx) until the loop returns, and judges how it ended.
func (r *Relay) stream(ctx, gctx context.Context, g *errgroup.Group, a attemptStart) error {
	srv, cp, from := a.srv, a.cp, a.from
	l, err := newLoop(r, srv, cp, from, a.d, a.topics)
	if err != nil {
		return err
	}
	l.lease = a.lease
	l.pos.schema, l.pos.unsigned = a.tracker.Tables(), a.tracker.Unsigned()
	l.pos.provisional = a.tracker.Provisional()
	if cp == nil {
		// Pin the start position first: a restart before the first batch must
		// resume here, not at a later "now".
		if err := l.commit(ctx); err != nil {
			return fmt.Errorf("write initial checkpoint: %w", err)
		}
		r.markCheckpoint(ctx, a.cpTopic)
	}

	events := make(chan []binlog.Event, 2) // with the reader's batch size, bounds rows in memory
	readErr := make(chan error, 1)         // the loop takes the reader's error from here
	// The reader's own context: a stale host (stale.go) ends the stream,
	// never the delivery's work in hand. Once it ends, go-mysql's complaints
	// about the connection it closes are debug lines (clients.MySQLLogger).
	readCtx, stopReading := context.WithCancel(gctx)
	defer stopReading()
	reader := binlog.NewReader(r.source, srv, a.tracker, clients.MySQLLogger(r.log, readCtx.Done()))
	if done := l.asm.replay.done; done != nil {
		reader.Published(done)
	}
	l.release = reader.Release
	g.Go(func() error { readErr <- reader.Run(readCtx, from, events); return nil })
	g.Go(func() error { r.sampleSource(gctx, srv, reader); return nil }) // behind bytes, binlog retention
	var stale atomic.Pointer[error]
	g.Go(func() error { r.watchStale(gctx, srv, &stale, stopReading); return nil })
	g.Go(func() error {
		// Ready once the source streams: a host that logs in and never
		// starts the binlog stream is connecting, not streaming.
		select {
		case <-reader.Streaming():
			r.metrics.Ready.Store(true)
		case <-gctx.Done():
		}
		return nil
	})

	r.log.Info().Str("source", srv.Addr).Str("flavor", srv.Flavor).Str("server_version", srv.Version).
		Str("from", from).Bool("checkpoint", cp != nil).Str("delivery", string(r.cfg.Kafka.Delivery)).Msg("relay started")
	*a.started = true
	err = l.run(ctx, gctx, events, readErr)
	select {
	case <-reader.Streaming(): // streamed: connecting again counts from its end
		r.metrics.Connecting()
	default: // never streamed: still connecting since before
	}
	r.ackTimedOut(err, l.lastBatch)
	err = r.sizeRefused(err)
	if p := stale.Load(); p != nil && ctx.Err() == nil && !errclass.Fatal(err) {
		return r.judgeStale(srv, from, *p)
	}
	return r.judgeStream(srv, from, err)
}

// tracker starts the schema tracker at the start position: the layout the
// checkpoint recorded, or, starting at the head without a checkpoint, the
// tables' current definitions. Otherwise it knows nothing yet and learns from
// CREATE TABLE statements and column names in the binlog.
func (r *Relay) tracker(ctx context.Context, srv *binlog.Server, cp *checkpoint.Checkpoint) (*schema.Tracker, error) {
	var initial schema.Tables
	var signs schema.Signs
	var provisional schema.Provisional
	switch {
	case cp != nil:
		// At cp.From(): before a prepared XA transaction when it reads again.
		initial, signs, provisional = cp.Layout()
	case r.cfg.Source.Start == "now":
		cur, curSigns, err := source.CurrentColumns(ctx, r.source, srv.Addr)
		if err != nil {
			return nil, err
		}
		initial, signs = cur, curSigns
	}
	t := schema.New(r.cfg.Source.Tables, initial, signs)
	t.SetProvisional(provisional)
	t.SetNameCase(srv.Names)
	return t, nil
}

// startPosition is the checkpoint's GTID set, or source.start without one.
func (r *Relay) startPosition(srv *binlog.Server, cp *checkpoint.Checkpoint) (string, error) {
	if cp != nil {
		if cp.Flavor != srv.Flavor {
			return "", fmt.Errorf("%w: checkpoint of %s was written for %s, the source %s runs %s",
				ErrFlavorMismatch, cp.Name, cp.Flavor, srv.Addr, srv.Flavor)
		}
		// Prepared XA transactions with outbox rows: read again from before
		// the earliest one to collect them (see loop.replaying).
		from := cp.From()
		if err := source.CheckNotPurged(srv, from); err != nil {
			return "", err
		}
		return from, nil
	}
	switch r.cfg.Source.Start {
	case "now":
		return srv.Head, nil
	case "earliest":
		return srv.Earliest, nil
	default:
		if _, err := binlog.ParseSet(srv.Flavor, r.cfg.Source.Start); err != nil {
			return "", fmt.Errorf("source.start: %w", err)
		}
		if err := source.CheckNotPurged(srv, r.cfg.Source.Start); err != nil {
			return "", err
		}
		return r.cfg.Source.Start, nil
	}
}
