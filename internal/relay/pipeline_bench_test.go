package relay

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/mysqlsource"
	"github.com/outbox-relay/outbox-relay/schema"
	"github.com/outbox-relay/outbox-relay/source"
)

// The pipeline's hot path, decode -> route -> produce, in benchmarks of
// one-row outbox transactions (a business row and an outbox row each, as
// bench's one-row shape) that the binlog reader reads from the MySQL 8
// double over its replication protocol:
//
//   - BenchmarkPipelineOneRowTransaction: the reader decodes and frames
//     them, the loop routes them and hands their records to a delivery that
//     counts them (Kafka's client and broker are not in it). Its allocs/op
//     (per transaction) hold the double's own, serving the stream: what
//     BenchmarkDoubleStream, the same stream read by go-mysql's syncer alone
//     (raw mode, nothing decoded), allocates is the double's and go-mysql's
//     reading; the rest is the relay's. Its ns/op is the double's pace more
//     than the relay's.
//   - BenchmarkLoopOneRowTransaction: the loop's part alone (route ->
//     produce), on hand-offs the reader made before the timer.
//
// Each runs with the payload a LONGTEXT (MariaDB's JSON, as bench's
// MariaDB logs it) and a MySQL JSON column (binary JSON the reader renders
// as text).

// countingDelivery counts what the loop hands it; a seal ends at once.
type countingDelivery struct {
	records int
	want    int
	done    chan struct{}
	out     chan committed
}

func (d *countingDelivery) send(_ context.Context, b part) (bool, error) {
	d.records += len(b.records)
	if d.records >= d.want && d.done != nil {
		close(d.done)
		d.done = nil
	}
	return false, nil
}
func (d *countingDelivery) committed() <-chan committed { return d.out }
func (d *countingDelivery) run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
func (d *countingDelivery) stop(context.Context, bool) (*checkpoint.Checkpoint, error) {
	return nil, nil
}

// payloadTypes are the outbox's payload columns the benchmarks run with.
var payloadTypes = []struct {
	name string
	typ  mysqlsource.ColumnType
}{{"longtext", mysqlsource.Longtext}, {"json", mysqlsource.JSON}}

// doubleWithTransactions is a MySQL double holding n one-row transactions
// into app.outbox, whose payload is of type payload.
func doubleWithTransactions(b *testing.B, n int, payload mysqlsource.ColumnType) *mysqlsource.Primary {
	b.Helper()
	p, err := mysqlsource.Start(mysqlsource.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	cols := append([]mysqlsource.Column(nil), mysqlsource.OutboxColumns...)
	cols[5].Type = payload
	outbox, err := p.CreateTable("app", "outbox", cols, "")
	if err != nil {
		b.Fatal(err)
	}
	business, err := p.CreateTable("app", "alarm_record", []mysqlsource.Column{{Name: "id", Type: mysqlsource.Bigint},
		{Name: "device_id", Type: mysqlsource.Varchar64}, {Name: "temp", Type: mysqlsource.Int}}, "")
	if err != nil {
		b.Fatal(err)
	}
	at := time.Now().UTC()
	for i := range n {
		dev := "dev-" + strconv.Itoa(i%1000)
		tx := mysqlsource.Tx{Time: at, Inserts: []mysqlsource.Insert{
			{Table: business, Rows: [][]any{{int64(i + 1), dev, int64(80 + i%40)}}},
			{Table: outbox, Rows: [][]any{{int64(i + 1), "e-" + strconv.Itoa(i), "alarm", dev, "AlarmCreated",
				`{"deviceId":"` + dev + `","level":"CRITICAL","temperature":` + strconv.Itoa(80+i%40) +
					`,"firmware":"4.2.1","site":"plant-7","note":"over-temperature"}`, at.Add(time.Duration(i/100) * time.Millisecond)}}},
		}}
		if _, err := p.Commit(tx); err != nil {
			b.Fatal(err)
		}
	}
	return p
}

// benchRelay is a relay reading p's app.outbox into a delivery that is
// never dialled, its source's configuration and the source.
func benchRelay(b *testing.B, ctx context.Context, p *mysqlsource.Primary) (*Relay, binlog.Config, *binlog.Server) {
	b.Helper()
	cfg := doubleConfig(b, "bench", 2002, p.Addr())
	cfg.Kafka.Brokers = []string{"127.0.0.1:1"} // never dialled
	cfg.Kafka.Batch.MaxWait = time.Hour
	cfg.Kafka.CheckpointInterval = time.Hour
	cfg.Log.ProgressInterval = 0
	r, err := New(cfg, zerolog.Nop(), metrics.New("bench"))
	if err != nil {
		b.Fatal(err)
	}
	src, err := clients.Source(cfg)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := source.Inspect(ctx, src)
	if err != nil {
		b.Fatal(err)
	}
	return r, src, srv
}

// benchTopics is a catalog that knows the benchmarks' topic.
func benchTopics() *catalog {
	return &catalog{topics: map[string]topicInfo{"outbox.event.alarm": {partitions: 6, placeBy: 6, maxBytes: clients.MaxBatchBytes}},
		readAgain: map[string]bool{}}
}

// runLoop runs a loop of r on srv into a counting delivery until it has
// b.N records, fed from events (their batches given back to release, when
// not nil, as the attempt gives them back to its reader); the timer runs
// from its start.
func runLoop(b *testing.B, ctx context.Context, r *Relay, srv *binlog.Server, events chan []binlog.Event, readErr chan error,
	release func([]binlog.Event), feed func()) {
	b.Helper()
	d := &countingDelivery{want: b.N, done: make(chan struct{}), out: make(chan committed)}
	done := d.done
	l, err := newLoop(r, srv, nil, "", d, benchTopics())
	if err != nil {
		b.Fatal(err)
	}
	l.release = release
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	loopDone := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() { loopDone <- l.run(ctx, context.Background(), events, readErr) }()
	go feed()
	select {
	case <-done:
	case err := <-loopDone:
		b.Fatalf("the loop ended after %d of %d records: %v", d.records, b.N, err)
	}
	b.StopTimer()
	cancel()
	<-loopDone
}

func BenchmarkPipelineOneRowTransaction(b *testing.B) {
	for _, pt := range payloadTypes {
		b.Run(pt.name, func(b *testing.B) {
			p := doubleWithTransactions(b, b.N, pt.typ)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r, src, srv := benchRelay(b, ctx, p)
			events, readErr := make(chan []binlog.Event, 2), make(chan error, 1)
			reader := binlog.NewReader(src, srv, schema.New(src.Tables, nil, nil), nil)
			runLoop(b, ctx, r, srv, events, readErr, reader.Release, func() { readErr <- reader.Run(ctx, "", events) })
		})
	}
}

// BenchmarkDoubleStream reads the stream of BenchmarkPipelineOneRowTransaction
// with go-mysql's syncer in raw mode, nothing decoded: the double's and
// go-mysql's part of the pipeline's figures.
func BenchmarkDoubleStream(b *testing.B) {
	for _, pt := range payloadTypes {
		b.Run(pt.name, func(b *testing.B) {
			p := doubleWithTransactions(b, b.N, pt.typ)
			syncer := p.RawSyncer(2003)
			defer syncer.Close()
			set, _ := mysql.ParseMysqlGTIDSet("")
			b.ReportAllocs()
			b.ResetTimer()
			stream, err := syncer.StartSyncGTID(set)
			if err != nil {
				b.Fatal(err)
			}
			for xids := 0; xids < b.N; {
				ev, err := stream.GetEvent(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				if ev.Header.EventType == replication.XID_EVENT {
					xids++
				}
			}
		})
	}
}

// BenchmarkLoopOneRowTransaction is the loop's part of the pipeline alone
// (route -> produce): the reader's hand-offs of 10,000 one-row
// transactions of the double, read before the timer, handed to the loop
// over and over until b.N transactions are through.
func BenchmarkLoopOneRowTransaction(b *testing.B) {
	for _, pt := range payloadTypes {
		b.Run(pt.name, func(b *testing.B) {
			const recorded = 10000
			p := doubleWithTransactions(b, recorded, pt.typ)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r, src, srv := benchRelay(b, ctx, p)
			// The reader's hand-offs, recorded.
			events := make(chan []binlog.Event, 2)
			rctx, stopReading := context.WithCancel(ctx)
			reader := binlog.NewReader(src, srv, schema.New(src.Tables, nil, nil), nil)
			readDone := make(chan error, 1)
			go func() { readDone <- reader.Run(rctx, "", events) }()
			var handoffs [][]binlog.Event
			for commits := 0; commits < recorded+2; { // and the two CREATE TABLEs
				batch := <-events
				for _, ev := range batch {
					if ev.Kind == binlog.KindCommit {
						commits++
					}
				}
				handoffs = append(handoffs, batch)
			}
			stopReading()
			<-readDone
			feed := make(chan []binlog.Event)
			stop := make(chan struct{})
			defer close(stop)
			runLoop(b, ctx, r, srv, feed, make(chan error, 1), nil, func() {
				for {
					for _, h := range handoffs {
						select {
						case feed <- h:
						case <-stop:
							return
						}
					}
				}
			})
		})
	}
}
