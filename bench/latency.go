package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

type latencyResult struct {
	samples  []time.Duration // sorted
	achieved float64         // events per second the writers committed
	// lastP50 is the median latency of the last tenth of the events to
	// arrive: a relay that does not keep up has it growing with the run.
	lastP50 time.Duration
	// gc sums up the broker's GC pauses during the timed part ("" unknown).
	gc string
	// events: each event's commit and arrival (-latency-steps only).
	events []eventTimes
}

func (l latencyResult) quantile(q float64) time.Duration {
	if len(l.samples) == 0 {
		return 0
	}
	i := int(q * float64(len(l.samples)-1))
	return l.samples[i]
}

// latency runs the relay (delivery, otherwise defaults) and writers committing at
// rate events/s for d, perTx events per transaction; a read_committed
// consumer records, per event, the time from the writer's COMMIT returning to
// the record's arrival.
func (h *harness) latency(delivery string, rate, perTx int, d time.Duration) (latencyResult, error) {
	return h.latencyOf(h.bin, delivery, rate, perTx, d)
}

// latencyOf is latency with the relay binary bin.
func (h *harness) latencyOf(bin, delivery string, rate, perTx int, d time.Duration) (latencyResult, error) {
	db, from, err := h.load("single", 0)
	if err != nil {
		return latencyResult{}, err
	}
	cfg := h.relayConfig("lat", db, from)
	cfg.Kafka.Delivery = config.Delivery(delivery)
	topic := cfg.Router.TopicPrefix + "alarm"
	if err := h.createTopic(topic); err != nil {
		return latencyResult{}, err
	}
	// DELIVERY-RATE-PERTX[-b], -2, -3 ... for the same run repeated
	name := fmt.Sprintf("%s-%d-%d", delivery, rate, perTx)
	if bin == h.binB {
		name += "-b"
	}
	if h.latencyNames == nil {
		h.latencyNames = map[string]int{}
	}
	if h.latencyNames[name]++; h.latencyNames[name] > 1 {
		name += fmt.Sprintf("-%d", h.latencyNames[name])
	}
	var extra []string
	if h.latencyProfiles != "" {
		extra = append(extra, "--cpuprofile", filepath.Join(h.latencyProfiles, name+".pprof"))
	}
	cmd, err := h.relayCommandOf(bin, cfg, extra...)
	if err != nil {
		return latencyResult{}, err
	}
	if h.latencySteps != "" {
		cmd.Env = append(os.Environ(), "OUTBOX_RELAY_STEPTRACE="+filepath.Join(h.latencySteps, name+".steps"))
	}
	if err := cmd.Start(); err != nil {
		return latencyResult{}, err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	store := checkpoint.NewStore(cfg.Kafka.CheckpointTopic, kgo.SeedBrokers(h.broker))
	for deadline := time.Now().Add(time.Minute); ; { // wait for the relay to pin its start
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cp, err := store.Load(ctx, cfg.Name)
		cancel()
		if cp != nil {
			break
		}
		if time.Now().After(deadline) {
			return latencyResult{}, fmt.Errorf("relay %s wrote no checkpoint within a minute (last error: %v)", cfg.Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	total := int(float64(rate)*d.Seconds()) / perTx * perTx
	cons, err := kgo.NewClient(kgo.SeedBrokers(h.broker), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(10*time.Millisecond))
	if err != nil {
		return latencyResult{}, err
	}
	defer cons.Close()
	// Warm up: one event through relay, broker and consumer before timing,
	// so consumer start-up (metadata, offsets) is not counted.
	if err := h.db.Exec(fmt.Sprintf(`INSERT INTO %s.outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ('warm-up', 'alarm', 'dev-0', 'AlarmCreated', '{}')`, db)); err != nil {
		return latencyResult{}, err
	}
	wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
	for warm := 0; warm == 0 && wctx.Err() == nil; {
		warm = cons.PollFetches(wctx).NumRecords()
	}
	wcancel()
	writers := 4
	if rate <= 100 {
		writers = 1
	}
	// Warm up at the measured rate for latencyWarmUp, not counted: the
	// broker's JIT compiles its transaction path in the first thousands of
	// transactions, which a long-running broker has done long ago.
	warm := int(float64(rate)*latencyWarmUp.Seconds()) / perTx * perTx
	if _, err := h.measureLatency(cons, db, "w", writers, warm, rate, perTx, latencyWarmUp); err != nil {
		return latencyResult{}, fmt.Errorf("warm up: %w", err)
	}
	gc := markGC(h.brokerDir)
	var pauses func() []gcPauseAt
	if h.latencySteps != "" {
		pauses = gc.watch()
	}
	res, err := h.measureLatency(cons, db, "l", writers, total, rate, perTx, d)
	res.gc = gc.summary()
	if err == nil && h.latencySteps != "" {
		err = h.writeSteps(name, res.events, pauses())
	}
	return res, err
}

// latencyWarmUp is how long the load runs before a latency run is timed.
const latencyWarmUp = 3 * time.Second

// measureLatency commits total events (ids prefix-i) at rate and returns
// the latencies cons observed for them.
func (h *harness) measureLatency(cons *kgo.Client, db, prefix string, writers, total, rate, perTx int, d time.Duration) (latencyResult, error) {
	var commits sync.Map // event id -> time.Time
	recvd := make(chan []time.Duration, 1)
	var events []eventTimes // -latency-steps: read once recvd has answered
	go func() {
		var lat []time.Duration
		ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
		defer cancel()
		for len(lat) < total && ctx.Err() == nil {
			fs := cons.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				var id string
				for _, hd := range r.Headers {
					if hd.Key == "id" {
						id = string(hd.Value)
					}
				}
				if !strings.HasPrefix(id, prefix+"-") {
					return // the warm-up's
				}
				for ctx.Err() == nil {
					if t, ok := commits.Load(id); ok {
						lat = append(lat, now.Sub(t.(time.Time)))
						if h.latencySteps != "" {
							events = append(events, eventTimes{id: id, commit: t.(time.Time), arrival: now})
						}
						return
					}
					// the writer records its commit time right after COMMIT
					// returns; a record can arrive a moment before that
					runtime.Gosched()
				}
			})
		}
		recvd <- lat
	}()
	res, err := h.pacedLatency(db, prefix, writers, total, rate, perTx, &commits, recvd)
	if err == nil {
		res.events = events // the consumer has answered on recvd
	}
	return res, err
}

// pacedLatency commits total events at rate per second over writers
// connections, perTx outbox rows (one INSERT) and an alarm record per
// transaction, noting each event's commit time in commits, and returns the
// latencies the consumer behind recvd measured, in arrival order, sorted,
// with the rate achieved.
func (h *harness) pacedLatency(db, prefix string, writers, total, rate, perTx int, commits *sync.Map, recvd <-chan []time.Duration) (latencyResult, error) {
	began := time.Now()
	txs := total / perTx
	err := h.parallel(writers, txs, func(c *client.Conn, i int) error {
		due := began.Add(time.Duration(float64(i*perTx) / float64(rate) * float64(time.Second)))
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		var q strings.Builder
		fmt.Fprintf(&q, "BEGIN; INSERT INTO %s.alarm_record (device_id, temp) VALUES ('dev-%d', %d); "+
			"INSERT INTO %s.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ", db, i%1000, 80+i%40, db)
		ids := make([]string, perTx)
		for j := range ids {
			k := i*perTx + j
			ids[j] = fmt.Sprintf("%s-%d", prefix, k)
			if j > 0 {
				q.WriteByte(',')
			}
			fmt.Fprintf(&q, "('%s', 'alarm', 'dev-%d', 'AlarmCreated', '"+payload+"')", ids[j], k%1000, k%1000, 80+k%40)
		}
		q.WriteString("; COMMIT")
		if err := execMulti(c, q.String()); err != nil {
			return err
		}
		now := time.Now()
		for _, id := range ids {
			commits.Store(id, now)
		}
		return nil
	})
	if err != nil {
		return latencyResult{}, err
	}
	achieved := float64(txs*perTx) / time.Since(began).Seconds()
	lat := <-recvd
	if len(lat) < txs*perTx {
		return latencyResult{}, fmt.Errorf("received %d of %d events", len(lat), txs*perTx)
	}
	last := slices.Clone(lat[len(lat)-len(lat)/10:])
	slices.Sort(last)
	slices.Sort(lat)
	res := latencyResult{samples: lat, achieved: achieved}
	if len(last) > 0 {
		res.lastP50 = last[len(last)/2]
	}
	return res, nil
}
