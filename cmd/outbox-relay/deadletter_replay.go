package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
	"github.com/outbox-relay/outbox-relay/source"
)

// errNotThisPipeline: a record on a (shared) dead-letter topic that is not
// this pipeline's; it is ignored, not replayed.
var errNotThisPipeline = errors.New("not this pipeline's record")

type dlReplayOpts struct {
	path       string
	dryRun     bool
	yes        bool
	db         dbFlags
	skip       []string // event ids to mark replayed without publishing
	fromRecord bool     // rows absent from the table: rebuild from the record
}

// dlItem is one pending dead-letter record and what replay publishes for
// it (nil: ignored or skipped; its offset is committed all the same).
type dlItem struct {
	in, out *kgo.Record
}

func deadLetterReplay(o dlReplayOpts) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := openDeadLetters(ctx, o.path, true)
	if err != nil {
		return err
	}
	cfg, k, pending := d.cfg, d.kafka, d.recs
	skip := map[string]bool{}
	for _, id := range o.skip {
		skip[id] = true
	}
	if len(pending) == 0 {
		if len(skip) > 0 {
			return usageErr("--skip: nothing is pending")
		}
		fmt.Println("dead-letter: nothing pending")
		return nil
	}
	conn, _, err := o.db.connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := source.UTCSession(conn); err != nil { // rows read again route as the relay routed them
		return err
	}
	if err := source.StoredBytesSession(conn); err != nil {
		return err
	}
	now := time.Now().UTC()
	items := make([]dlItem, 0, len(pending))
	var publish, ignored, skipped int
	matched := map[string]bool{}
	for _, r := range pending {
		matched[headerValue(r, "id")] = true
	}
	for id := range skip {
		if !matched[id] {
			return usageErr("--skip %s: no pending dead-letter record has this event id; nothing was replayed", printable(id))
		}
	}
	for _, r := range pending {
		id := headerValue(r, "id")
		where := fmt.Sprintf("%s[%d]@%d  event_id=%s", printable(r.Topic), r.Partition, r.Offset, printable(id))
		if skip[id] {
			skipped++
			fmt.Printf("%s  skipped (--skip): marked replayed, not published\n", where)
			items = append(items, dlItem{in: r})
			continue
		}
		rec, src, err := rerouteDeadLetter(conn, cfg, r, now, o.fromRecord)
		if errors.Is(err, errNotThisPipeline) {
			ignored++
			fmt.Printf("%s  ignored: %s\n", where, printable(err.Error()))
			items = append(items, dlItem{in: r})
			continue
		}
		if err != nil {
			return fmt.Errorf("dead-letter %s[%d]@%d (event id %s): %w; nothing was replayed (fix it, or pass --skip %s to mark it replayed without publishing)",
				printable(r.Topic), r.Partition, r.Offset, printable(id), printableErr{err}, printable(id))
		}
		fmt.Printf("%s -> topic=%s key=%s (row from %s)\n", where, printable(rec.Topic), printable(string(rec.Key)), printable(src))
		items = append(items, dlItem{in: r, out: rec})
		publish++
	}
	counts := fmt.Sprintf("%d to publish, %d skipped, %d ignored (not this pipeline's)", publish, skipped, ignored)
	if o.dryRun {
		fmt.Printf("dead-letter: would replay %d records (dry run): %s\n", publish, counts)
		return nil
	}
	if err := confirm(o.yes, fmt.Sprintf("publish %d dead-lettered records to their topics (%s)", publish, counts)); err != nil {
		return err
	}
	published, done, err := replayDeadLetters(ctx, cfg, k, items)
	if err != nil {
		return deadLetterReplayFailed(err)
	}
	fmt.Printf("dead-letter: replayed %d records (%d skipped, %d ignored as not this pipeline's, %d already replayed by another run)\n",
		published, skipped, ignored, done)
	return nil
}

// deadLetterReplayFailed is the error dead-letter replay ends with when
// replayDeadLetters failed: "nothing was replayed" only when nothing can
// have been committed.
func deadLetterReplayFailed(err error) error {
	if errors.Is(err, errNotProved) {
		return fmt.Errorf("dead-letter replay: %w; Kafka answered its commit: run dead-letter list before replaying again", err)
	}
	return fmt.Errorf("dead-letter replay: %w; nothing was replayed", err)
}

// replayDeadLetters publishes the items' records and commits the replay
// group's offsets past all items in one Kafka transaction. The producer's
// initialisation fences a replay running at the same time (its open
// transaction is aborted); the group's offsets are then read again and
// items an earlier run has replayed meanwhile are dropped, so each record
// is published once. It returns the records published and the items
// dropped.
func replayDeadLetters(ctx context.Context, cfg config.Config, k clients.Kafka, items []dlItem) (int, int, error) {
	var out []*kgo.Record
	for _, it := range items {
		if it.out != nil {
			out = append(out, it.out)
		}
	}
	counts, err := placedCounts(ctx, cfg)
	if err != nil {
		return 0, 0, err
	}
	if len(out) > 0 {
		if err := ensureTopics(ctx, cfg, k.Admin(), out, counts); err != nil {
			return 0, 0, err
		}
	}
	cl, err := kgo.NewClient(k.DeadLetterReplay()...)
	if err != nil {
		return 0, 0, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	wctx := context.WithoutCancel(ctx)
	if _, _, err := cl.ProducerID(wctx); err != nil {
		return 0, 0, fmt.Errorf("init transactional producer: %w", err)
	}
	committed, err := replayedOffsets(wctx, cfg, cl)
	if err != nil {
		return 0, 0, err
	}
	keep := items[:0:0]
	out = out[:0]
	for _, it := range items {
		if it.in.Offset < committed[it.in.Topic][it.in.Partition] {
			continue // replayed by another run since this one read it
		}
		keep = append(keep, it)
		if it.out != nil {
			out = append(out, it.out)
		}
	}
	if len(keep) == 0 {
		return 0, len(items), nil
	}
	// With nothing to produce (all ignored or skipped) the transaction
	// holds only the offsets: kgo's EndTransaction ends only transactions
	// it produced in, so that one is begun and ended here (endOffsetsTxn).
	end := func(try kgo.TransactionEndTry) error { return endOffsetsTxn(wctx, cl, bool(try)) }
	if len(out) > 0 {
		if err := cl.BeginTransaction(); err != nil {
			return 0, 0, fmt.Errorf("begin kafka transaction: %w", err)
		}
		end = func(try kgo.TransactionEndTry) error { return cl.EndTransaction(wctx, try) }
		if err := cl.ProduceSync(wctx, out...).FirstErr(); err != nil {
			_ = end(kgo.TryAbort)
			return 0, 0, fmt.Errorf("produce: %w", err)
		}
	}
	offsets := map[string]map[int32]kgo.EpochOffset{}
	for _, it := range keep {
		r := it.in
		if offsets[r.Topic] == nil {
			offsets[r.Topic] = map[int32]kgo.EpochOffset{}
		}
		if r.Offset+1 > offsets[r.Topic][r.Partition].Offset {
			offsets[r.Topic][r.Partition] = kgo.EpochOffset{Epoch: -1, Offset: r.Offset + 1}
		}
	}
	if err := commitTxnOffsets(wctx, cl, deadLetterGroup(cfg), offsets); err != nil {
		_ = end(kgo.TryAbort)
		return 0, 0, err
	}
	if err := end(kgo.TryCommit); err != nil {
		return 0, 0, fmt.Errorf("commit kafka transaction: %w", err)
	}
	if len(out) > 0 {
		if err := proveCommitted(ctx, cfg, k, kadm.NewClient(cl), out); err != nil {
			return 0, 0, err
		}
	}
	return len(out), len(items) - len(keep), nil
}

// replayedOffsets reads the replay group's committed offsets, waiting for
// transactional commits still being written (RequireStable).
func replayedOffsets(ctx context.Context, cfg config.Config, cl *kgo.Client) (map[string]map[int32]int64, error) {
	cctx, cancel := context.WithTimeout(ctx, cfg.Kafka.RequestTimeout)
	defer cancel()
	resp, err := kadm.NewClient(cl).FetchOffsets(kadm.RequireStable(cctx), deadLetterGroup(cfg))
	if kafkaerr.GroupUnknown(err) {
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("fetch offsets of %s: %w", deadLetterGroup(cfg), err)
	}
	committed := map[string]map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if committed[o.Topic] == nil {
			committed[o.Topic] = map[int32]int64{}
		}
		committed[o.Topic][o.Partition] = o.At
	})
	return committed, nil
}

// rerouteDeadLetter rebuilds the outbox row of a dead-letter record (from
// the table by event id when it is still there, else from the record's
// columns) and routes it with the current settings. A record is this
// pipeline's when its table is in source.tables and its event id is in
// that table; one whose row is not there only on the pipeline's own topic
// or with fromRecord (errNotThisPipeline otherwise).
func rerouteDeadLetter(conn *binlog.Conn, cfg config.Config, r *kgo.Record, now time.Time, fromRecord bool) (*kgo.Record, string, error) {
	table, id := headerValue(r, "source.table"), headerValue(r, "id")
	if !containsString(cfg.Source.Tables, table) {
		return nil, "", fmt.Errorf("%w: its table %q is not in source.tables", errNotThisPipeline, table)
	}
	rc := cfg.Router.For(table)
	rt, err := clients.TableRouter(cfg, rc, table)
	if err != nil {
		return nil, "", err
	}
	if id != "" {
		qt, err := source.QuoteTable(table)
		if err != nil {
			return nil, "", err
		}
		res, err := conn.Execute("SELECT * FROM "+qt+" WHERE "+source.QuoteIdent(rc.EventIDColumn)+" = ?", id)
		if err != nil {
			return nil, "", fmt.Errorf("read outbox row: %w", err)
		}
		if res.RowNumber() > 1 {
			return nil, "", fmt.Errorf("%d rows of %s have event id %s", res.RowNumber(), table, id)
		}
		if res.RowNumber() == 1 {
			rec, err := routeAgain(rt, resultRow(res, 0, now), now)
			return rec, "table " + table, err
		}
	}
	if !fromRecord && r.Topic != "outbox-relay.dead-letter."+cfg.Name {
		return nil, "", fmt.Errorf("%w: its event id is not in %s and topic %s may be shared (--from-record takes it as this pipeline's)", errNotThisPipeline, table, r.Topic)
	}
	if r.Value == nil || headerValue(r, "truncated") == "true" {
		return nil, "", errors.New("the outbox row is gone and the dead-letter record does not carry its columns")
	}
	row, err := rowFromDeadLetter(r.Value, now)
	if err != nil {
		return nil, "", err
	}
	rec, err := routeAgain(rt, row, now)
	return rec, "dead-letter record", err
}

// endOffsetsTxn commits (or aborts) the open transaction of cl's producer
// that holds only group offsets (AddOffsetsToTxn began it; kgo did not).
func endOffsetsTxn(ctx context.Context, cl *kgo.Client, commit bool) error {
	id, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		return fmt.Errorf("producer id: %w", err)
	}
	txnID, _ := cl.OptValue(kgo.TransactionalID).(string)
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = txnID, id, epoch, commit
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("end transaction: %w", err)
	}
	if err := kafkaerr.FromCode(resp.ErrorCode); err != nil {
		return fmt.Errorf("end transaction: %w", err)
	}
	return nil
}
