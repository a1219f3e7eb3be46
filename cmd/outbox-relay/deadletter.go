package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
	"github.com/outbox-relay/outbox-relay/router"
)

// deadLetterGroup is the consumer group whose committed offsets mark the
// dead-letter records already replayed.
func deadLetterGroup(cfg config.Config) string { return "outbox-relay.dead-letter." + cfg.Name }

// deadLetterTopics are the dead-letter topics of cfg's tables.
func deadLetterTopics(cfg config.Config) []string {
	var out []string
	for _, t := range cfg.Source.Tables {
		topic := cfg.Router.For(t).DeadLetterTopic
		if topic == "" {
			topic = "outbox-relay.dead-letter." + cfg.Name
		}
		if !containsString(out, topic) {
			out = append(out, topic)
		}
	}
	return out
}

func newDeadLetterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dead-letter list|replay --config FILE",
		Short: "list dead-lettered rows, or publish them to their routed topics after a fix",
		Long: `Rows the router could not handle under router.on_error dead-letter are on the
dead-letter topic (router.dead_letter_topic, default
outbox-relay.dead-letter.<name>) with headers naming the error, the table and
the GTID. "list" shows them; "replay" routes each pending one again with the
current settings (from its outbox row, read by event id, else from the
columns the dead-letter record carries) and publishes it to its routed topic
with its original event id and a "replayed" header, in one Kafka transaction
that also commits the consumer group outbox-relay.dead-letter.<name>: a
replayed record is not pending any more. A row that still fails stops the
replay and nothing is published; --skip EVENT_ID marks such a record
replayed without publishing it.

A dead-letter topic may be shared (router.dead_letter_topic): a record is
this pipeline's when its source table is in source.tables and its event id
is in that table; a record whose row is not there is this pipeline's only
on its own topic (outbox-relay.dead-letter.<name>) or with --from-record.
Other records are ignored (counted) and not pending for this pipeline any
more. Two replays at once publish each record once: the second fences the
first's Kafka transaction and re-reads what is already replayed.`,
		Example: `  outbox-relay dead-letter list --config relay.yaml
  outbox-relay dead-letter replay --config relay.yaml --dry-run
  outbox-relay dead-letter replay --config relay.yaml --yes`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRun,
	}
	list := &cobra.Command{Use: "list --config FILE [--all] [--json]", Short: "list the pending (or --all) dead-lettered rows", Args: noArgs,
		Example: `  outbox-relay dead-letter list --config relay.yaml
  outbox-relay dead-letter list --config relay.yaml --all --json | jq .error`}
	listPath := configFlag(list)
	all := list.Flags().Bool("all", false, "also list records already replayed")
	asJSON := list.Flags().Bool("json", false, "print a JSON array of the records (topic, partition, offset, time, event_id, table, gtid, error, replayed) on one line")
	list.RunE = func(*cobra.Command, []string) error { return deadLetterList(*listPath, *all, *asJSON) }
	rp := &cobra.Command{Use: "replay --config FILE [--dry-run] [--yes] [--skip EVENT_ID] [--from-record]", Short: "publish the pending dead-lettered rows to their routed topics", Args: noArgs,
		Example: `  outbox-relay dead-letter replay --config relay.yaml --dry-run
  outbox-relay dead-letter replay --config relay.yaml --yes`}
	rpPath := configFlag(rp)
	dry := rp.Flags().Bool("dry-run", false, "show where each record would go; publish nothing")
	yes := rp.Flags().Bool("yes", false, "do not ask for confirmation (required when stdin is not a terminal)")
	var db dbFlags
	addDBFlags(rp, &db, "read outbox rows from", "a replica is fine: dead-letter replay only reads")
	skip := rp.Flags().StringSlice("skip", nil, "event id of a pending record to mark replayed without publishing it (repeat, or comma-separated): "+
		"one that can no longer be rebuilt, or was handled another way")
	fromRecord := rp.Flags().Bool("from-record", false, "records of this pipeline's tables whose row is not in the table are this pipeline's: "+
		"rebuild them from the columns they carry (default: only on the pipeline's own topic outbox-relay.dead-letter.<name>)")
	rp.RunE = func(*cobra.Command, []string) error {
		return deadLetterReplay(dlReplayOpts{path: *rpPath, dryRun: *dry, yes: *yes, db: db, skip: *skip, fromRecord: *fromRecord})
	}
	cmd.AddCommand(list, rp)
	return cmd
}

// dlRecord is one dead-letter record as listed.
type dlRecord struct {
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Time      time.Time `json:"time"`
	EventID   string    `json:"event_id"`
	Table     string    `json:"table"`
	GTID      string    `json:"gtid"`
	Error     string    `json:"error"`
	Replayed  bool      `json:"replayed"`
}

// deadLetters is what both dead-letter commands start from: the pipeline's
// configuration, Kafka options, the group's committed offsets and the
// dead-letter records up to the topics' ends (from the committed offsets
// when from is non-nil, from the start otherwise).
type deadLetters struct {
	cfg       config.Config
	kafka     clients.Kafka
	committed map[string]map[int32]int64
	recs      []*kgo.Record
}

func openDeadLetters(ctx context.Context, path string, fromCommitted bool) (*deadLetters, error) {
	cfg, err := loadConfigFile(path)
	if err != nil {
		return nil, err
	}
	k, err := clients.NewKafka(cfg)
	if err != nil {
		return nil, err
	}
	committed, ends, err := deadLetterOffsets(ctx, cfg, k)
	if err != nil {
		return nil, err
	}
	d := &deadLetters{cfg: cfg, kafka: k, committed: committed}
	from := map[string]map[int32]int64(nil)
	if fromCommitted {
		from = committed
	}
	if err := clients.ReadRange(ctx, k, ends, from, func(r *kgo.Record) { d.recs = append(d.recs, r) }); err != nil {
		return nil, err
	}
	return d, nil
}

func deadLetterList(path string, all, asJSON bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := openDeadLetters(ctx, path, false)
	if err != nil {
		return err
	}
	committed, recs := d.committed, d.recs
	n := 0
	out := []dlRecord{}
	for _, r := range recs {
		d := dlRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Time: r.Timestamp,
			EventID: headerValue(r, "id"), Table: headerValue(r, "source.table"), GTID: headerValue(r, "source.gtid"),
			Error: headerValue(r, "error"), Replayed: r.Offset < committed[r.Topic][r.Partition]}
		if d.Replayed && !all {
			continue
		}
		n++
		if asJSON {
			out = append(out, d)
			continue
		}
		state := "pending"
		if d.Replayed {
			state = "replayed"
		}
		fmt.Printf("%s  %s[%d]@%d  %s  event_id=%s table=%s gtid=%s\n    error: %s\n", state, printable(d.Topic), d.Partition, d.Offset,
			d.Time.UTC().Format(time.RFC3339), printable(d.EventID), printable(d.Table), printable(d.GTID), printable(d.Error))
	}
	if asJSON {
		return writeJSON(os.Stdout, out)
	}
	fmt.Printf("dead-letter: %d records listed\n", n)
	return nil
}

// deadLetterOffsets returns the replay group's committed offsets and the
// last stable offsets of the dead-letter topics' partitions.
func deadLetterOffsets(ctx context.Context, cfg config.Config, k clients.Kafka) (map[string]map[int32]int64, map[string]map[int32]int64, error) {
	cl, err := kgo.NewClient(k.Admin()...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	cctx, cancel := context.WithTimeout(ctx, cfg.Kafka.RequestTimeout)
	defer cancel()
	topics := deadLetterTopics(cfg)
	ends, err := adm.ListCommittedOffsets(cctx, topics...)
	if err != nil {
		return nil, nil, fmt.Errorf("list dead-letter offsets: %w", err)
	}
	end := map[string]map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return // a topic that does not exist yet: nothing dead-lettered
		}
		if end[o.Topic] == nil {
			end[o.Topic] = map[int32]int64{}
		}
		end[o.Topic][o.Partition] = o.Offset
	})
	resp, err := adm.FetchOffsets(cctx, deadLetterGroup(cfg))
	if kafkaerr.GroupUnknown(err) {
		err = nil // never replayed: nothing committed (kfake says so; Apache Kafka answers empty)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("fetch offsets of %s: %w", deadLetterGroup(cfg), err)
	}
	committed := map[string]map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if committed[o.Topic] == nil {
			committed[o.Topic] = map[int32]int64{}
		}
		committed[o.Topic][o.Partition] = o.At
	})
	return committed, end, nil
}

// rowFromDeadLetter decodes the JSON object of columns the relay wrote:
// strings stay strings, numbers keep their text.
func rowFromDeadLetter(value []byte, at time.Time) (router.Row, error) {
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	var cols map[string]any
	if err := dec.Decode(&cols); err != nil {
		return router.Row{}, fmt.Errorf("decode dead-letter columns: %w", err)
	}
	names := make([]string, 0, len(cols))
	for k := range cols {
		names = append(names, k)
	}
	sort.Strings(names)
	row := router.Row{CommitTime: at}
	for _, k := range names {
		v := cols[k]
		switch t := v.(type) {
		case json.Number:
			v = t.String()
		case map[string]any, []any, bool:
			return router.Row{}, fmt.Errorf("decode dead-letter columns: column %s holds %T, not a column value", k, v)
		}
		row.Columns = append(row.Columns, k)
		row.Values = append(row.Values, v)
	}
	if len(row.Columns) == 0 {
		return row, errors.New("decode dead-letter columns: no columns")
	}
	return row, nil
}

// commitTxnOffsets adds group's offsets to cl's open transaction
// (AddOffsetsToTxn, then TxnOffsetCommit as a non-member, generation -1):
// they are committed if and only if the transaction is.
func commitTxnOffsets(ctx context.Context, cl *kgo.Client, group string, offsets map[string]map[int32]kgo.EpochOffset) error {
	id, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		return fmt.Errorf("producer id: %w", err)
	}
	txnID, _ := cl.OptValue(kgo.TransactionalID).(string)
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = txnID, id, epoch, group
	addResp, err := add.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("add offsets to transaction: %w", err)
	}
	if err := kafkaerr.FromCode(addResp.ErrorCode); err != nil {
		return fmt.Errorf("add offsets to transaction: %w", err)
	}
	topics := make([]string, 0, len(offsets))
	for t := range offsets {
		topics = append(topics, t)
	}
	// v6+ names topics by id.
	details, err := kadm.NewClient(cl).ListTopics(ctx, topics...)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch, req.Generation = txnID, group, id, epoch, -1
	for t, ps := range offsets {
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic, rt.TopicID = t, details[t].ID
		for p, o := range ps {
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, o.Offset, o.Epoch
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("commit offsets in transaction: %w", err)
	}
	for i, t := range resp.Topics {
		name := t.Topic
		if name == "" && i < len(req.Topics) {
			name = req.Topics[i].Topic
		}
		for _, p := range t.Partitions {
			if err := kafkaerr.FromCode(p.ErrorCode); err != nil {
				return fmt.Errorf("commit offset of %s[%d] in transaction: %w", name, p.Partition, err)
			}
		}
	}
	return nil
}
