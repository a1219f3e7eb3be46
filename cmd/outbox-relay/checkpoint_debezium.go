package main

// checkpoint set --from-debezium: take over from Debezium's MySQL connector
// (with the Outbox Event Router) at its committed offset, proven against
// the records in Kafka (internal/debezium).

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/debezium"
	"github.com/outbox-relay/outbox-relay/router"
	"github.com/outbox-relay/outbox-relay/source"
)

// debeziumFlags are set's flags of --from-debezium.
type debeziumFlags struct {
	from                 *bool
	topic, brokers, file *string
	connector, server    *string
	maxRows              *int
	timeout              *time.Duration
	asJSON, dryRun       *bool
	flags                *pflag.FlagSet
}

func addDebeziumFlags(fs *pflag.FlagSet) debeziumFlags {
	d := debeziumFlags{
		from: fs.Bool("from-debezium", false, "take over from a Debezium MySQL connector with the Outbox Event Router: its committed offset "+
			"(--offsets-topic, or --offsets-file), proven against the records in Kafka (docs/adopting.md)"),
		topic:     fs.String("offsets-topic", debezium.DefaultOffsetsTopic, "with --from-debezium: Kafka Connect's offset.storage.topic (distributed workers, Strimzi)"),
		brokers:   fs.String("offsets-brokers", "", "with --from-debezium: the offsets topic's brokers, host:port,... (default kafka.brokers; the relay's TLS and SASL settings apply)"),
		file:      fs.String("offsets-file", "", "with --from-debezium: the offsets file of a standalone worker or Debezium Server (offset.storage.file.filename)"),
		connector: fs.String("connector", "", "with --from-debezium: the connector's name, when several stored offsets"),
		server:    fs.String("server", "", "with --from-debezium: the connector's topic.prefix, when several stored offsets"),
		maxRows:   fs.Int("walk-max-rows", 1_000_000, "with --from-debezium: at most this many outbox rows after Debezium's position to check before the source's head"),
		timeout:   fs.Duration("walk-timeout", 5*time.Minute, "with --from-debezium: how long reading the binlog and the topics may take"),
		asJSON:    fs.Bool("json", false, "with --from-debezium: print the translation as a JSON object on one line"),
		dryRun:    fs.Bool("dry-run", false, "with --from-debezium: print the translation, write nothing"),
		flags:     fs,
	}
	return d
}

// check refuses this mode's flags without --from-debezium, and a bad
// combination with it.
func (d debeziumFlags) check() error {
	var given []string
	d.flags.Visit(func(f *pflag.Flag) {
		switch f.Name {
		case "offsets-topic", "offsets-brokers", "offsets-file", "connector", "server", "walk-max-rows", "walk-timeout", "json", "dry-run":
			given = append(given, "--"+f.Name)
		}
	})
	if !*d.from {
		if len(given) > 0 {
			return usageErr("%s: only with --from-debezium", strings.Join(given, ", "))
		}
		return nil
	}
	if *d.file != "" && (d.flags.Changed("offsets-topic") || *d.brokers != "") {
		return usageErr("give --offsets-file, or --offsets-topic/--offsets-brokers, not both")
	}
	if *d.maxRows < 1 {
		return usageErr("--walk-max-rows %d: want 1 or more", *d.maxRows)
	}
	if *d.timeout <= 0 {
		return usageErr("--walk-timeout %s: want a duration above 0", *d.timeout)
	}
	return nil
}

// keepBefore is how many rows before Debezium's position the walk keeps
// to prove the records are where the relay places them.
const keepBefore = 1000

// readDebeziumOffset reads the stored offsets and picks the connector's.
func readDebeziumOffset(ctx context.Context, cfg config.Config, d debeziumFlags) (off debezium.Offset, where string, err error) {
	var entries []debezium.Entry
	if *d.file != "" {
		if entries, err = debezium.ReadOffsetFile(*d.file); err != nil {
			return off, "", err
		}
		where = "file " + *d.file
	} else {
		kc := cfg
		if *d.brokers != "" {
			kc.Kafka.Brokers = strings.Split(*d.brokers, ",")
		}
		k, err := clients.NewKafka(kc)
		if err != nil {
			return off, "", err
		}
		where = debezium.TopicWhere(*d.topic, kc.Kafka.Brokers)
		if entries, err = debezium.ReadTopic(ctx, k, cfg.Kafka.RequestTimeout, *d.topic, checkpoint.DefaultStableWait); err != nil {
			return off, "", err
		}
	}
	stored, err := debezium.Decode(entries, where)
	if err != nil {
		return off, "", err
	}
	off, err = stored.Select(*d.connector, *d.server)
	return off, where, err
}

// debeziumReport is --json's object.
type debeziumReport struct {
	Store     string          `json:"store"`
	Offset    debezium.Offset `json:"offset"`
	Walked    walkReport      `json:"walked"`
	Published int             `json:"published"`
	Claimed   int             `json:"claimed"`
	Position  struct {
		GTIDSet string              `json:"gtid_set"`
		Partial *checkpoint.Partial `json:"partial"`
	} `json:"position"`
	FirstEvent    *eventReport `json:"first_event"`
	LastPublished *eventReport `json:"last_published"`
	Notes         []string     `json:"notes"`
	Anomalies     []string     `json:"anomalies"`
	Written       bool         `json:"written"`
}

type walkReport struct {
	From         string   `json:"from"`
	To           string   `json:"to"`
	Transactions int      `json:"transactions"`
	Rows         int      `json:"rows"`
	Topics       []string `json:"topics"`
}

type eventReport struct {
	EventID   string `json:"event_id"`
	GTID      string `json:"gtid"`
	Table     string `json:"table"`
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"partition"`
}

func eventOf(r *debezium.Row) *eventReport {
	if r == nil {
		return nil
	}
	return &eventReport{EventID: r.EventID, GTID: r.Tx.GTID, Table: r.Table, Topic: r.Topic, Partition: r.Partition}
}

func checkpointFromDebezium(cfg config.Config, d debeziumFlags, w writeFlags) error {
	ctx, cancel := context.WithTimeout(context.Background(), *d.timeout+2*cfg.Kafka.RequestTimeout)
	defer cancel()
	rep := debeziumReport{Notes: []string{}, Anomalies: []string{}}
	off, where, err := readDebeziumOffset(ctx, cfg, d)
	if err != nil {
		return err
	}
	rep.Offset, rep.Store = off, where
	if off.Snapshot != "" {
		return fmt.Errorf("the offset of %s records a snapshot in progress (snapshot=%s): it is no binlog position to take over; let the "+
			"connector finish its snapshot and stream a transaction, stop it, then run this again", off.Name(), off.Snapshot)
	}
	if len(off.Incremental) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the offset carries an incremental snapshot's state (%s): the rows a snapshot reads are not "+
			"binlog changes and are not taken over", strings.Join(off.Incremental, ", ")))
	}
	if off.Pos > math.MaxUint32 {
		return fmt.Errorf("the offset of %s: binlog position %d is out of range", off.Name(), off.Pos)
	}
	src, err := clients.Source(cfg)
	if err != nil {
		return err
	}
	srv, err := source.Inspect(ctx, src)
	if err != nil {
		return err
	}
	claim := debezium.Claim{File: off.File, Pos: uint32(off.Pos)}
	if off.GTIDs != "" {
		if claim.Set, err = binlog.ParseSet(srv.Flavor, off.GTIDs); err != nil {
			return fmt.Errorf("the offset of %s: its gtids %q are not a GTID set of the source %s (%s): %w", off.Name(), off.GTIDs, srv.Addr, srv.Flavor, err)
		}
		// The walk starts from them when the offset's file is gone, and
		// the new position holds what it starts from: GTIDs the source has
		// not executed (another server's, in a domain or server_uuid of its
		// own, or ahead of this one) would make the relay pass over the
		// source's transactions up to them.
		missing, err := source.Unexecuted(srv, off.GTIDs)
		if err != nil {
			return fmt.Errorf("the offset of %s: compare its gtids with the source %s: %w", off.Name(), srv.Addr, err)
		}
		if missing != "" {
			return fmt.Errorf("refuse to take over from %s: its gtids (%s) name %s, which the source %s has not executed (its binlog holds %s): "+
				"the offset of a connector that read another server, or a source behind the server the connector read (wait until it "+
				"has executed them, or put that server first in source.hosts); nothing written", off.Name(), off.GTIDs, missing, srv.Addr, srv.State)
		}
	}
	// The layout at the walk's start: the tables' current definitions.
	layout, signs, err := checkpointLayout(ctx, src, srv, nil, "server", false, "the start of "+off.File)
	if err != nil {
		return err
	}
	base, err := loadSetBase(ctx, cfg, w)
	if err != nil {
		return err
	}
	k, err := clients.NewKafka(cfg)
	if err != nil {
		return err
	}
	routers := map[string]*router.Router{}
	for _, t := range cfg.Source.Tables {
		if routers[t], err = clients.TableRouter(cfg, cfg.Router.For(t), t); err != nil {
			return fmt.Errorf("router for %s: %w", t, err)
		}
	}
	walkSrc := src
	walkSrc.ServerID = source.ProbeServerID() // never the relay's own
	wctx, wcancel := context.WithTimeout(ctx, *d.timeout)
	defer wcancel()
	opts := debezium.WalkOptions{Source: walkSrc, Server: srv, Head: srv.Head, Layout: layout, Signs: signs, Routers: routers,
		Place: partitionCounts(ctx, cfg, k, base.placed), Claim: claim, MaxRows: *d.maxRows, Keep: keepBefore}
	walk, found, topics, err := proveOffset(wctx, opts, k, cfg, off, &rep)
	if err != nil {
		return err
	}
	res := debezium.Translate(walk, found, off)
	// The connector must be stopped: an offset that moved meanwhile is
	// one still running, which would publish what the relay publishes.
	if again, _, err := readDebeziumOffset(ctx, cfg, d); err != nil || !reflect.DeepEqual(again, off) {
		what := fmt.Sprint(err)
		if err == nil {
			what = again.String()
		}
		res.Anomalies = append(res.Anomalies, fmt.Sprintf("the offset of %s changed while this ran (now: %s): the connector is running; "+
			"stop it first (docs/adopting.md)", off.Name(), what))
	}
	rep.Walked = walkReport{From: walk.From, To: walk.End, Transactions: walk.Transactions, Rows: res.Walked, Topics: topics}
	rep.Published, rep.Claimed = res.Published, res.Claimed
	rep.Position.GTIDSet, rep.Position.Partial = res.Position, res.Partial
	rep.FirstEvent, rep.LastPublished = eventOf(res.First), eventOf(res.Last)
	rep.Notes = append(rep.Notes, res.Notes...)
	rep.Anomalies = append(rep.Anomalies, res.Anomalies...)
	if !*d.asJSON {
		printTranslation(rep)
	}
	if len(rep.Anomalies) > 0 {
		if !*w.force {
			return fmt.Errorf("refuse to take over from %s: the translation is not proven: %s; fix the cause, or pass --force "+
				"to write the position above anyway", off.Name(), strings.Join(rep.Anomalies, "; "))
		}
		fmt.Fprintf(os.Stderr, "warning: not proven, written anyway (--force): %s\n", strings.Join(rep.Anomalies, "; "))
	}
	if *d.dryRun {
		return debeziumDone(rep, d)
	}
	if err := w.guard(cfg, fmt.Sprintf("take over from %s: move the checkpoint of %s from %q to %q%s", off.Name(), cfg.Name, base.from, res.Position,
		partialText(res.Partial))); err != nil {
		return err
	}
	cp := base.next(cfg, srv, res.Position, res.Layout, res.Signs)
	// The tracker's layout marks at the position, and the fingerprint of the
	// last transaction with outbox rows it covers: a source host must prove
	// it holds that one, as after a checkpoint of the relay's own.
	cp.Partial, cp.CommitTime, cp.Provisional, cp.Fingerprint = res.Partial, res.CommitTime, res.Provisional, res.Fingerprint
	from0, store := base.from, base.store
	log := newLogger(cfg.Log, nil)
	if err := writeCheckpoint(cfg, store, cp, log); err != nil {
		return err
	}
	rep.Written = true
	log.Info().Str("name", cfg.Name).Str("from", from0).Str("to", res.Position).Str("debezium", off.Name()).Msg("checkpoint set from Debezium's offset")
	if !*d.asJSON {
		fmt.Printf("checkpoint of %s: %s -> %s%s\n", cfg.Name, from0, res.Position, partialText(res.Partial))
	}
	return debeziumDone(rep, d)
}

func debeziumDone(rep debeziumReport, d debeziumFlags) error {
	if *d.asJSON {
		return writeJSON(os.Stdout, rep)
	}
	return nil
}

// stepBack is how many binlog files before the offset's the walk may start
// from, looking for a row the connector published.
const stepBack = 2

// proveOffset walks the binlog and reads where the walked rows' records
// are: from the start of the offset's binlog file (the GTID set its
// Gtid_list or Previous_gtids event names: certainly at or before the
// connector's position), or, while no walked row has a record, from the
// start of the file before it (at most stepBack files back): the last row
// the connector published is what proves the position and the routing.
// Without the file on the source (purged, or the file of another server)
// it walks from the offset's GTID set, when it has one.
func proveOffset(ctx context.Context, o debezium.WalkOptions, k clients.Kafka, cfg config.Config, off debezium.Offset, rep *debeziumReport) (*debezium.Walk, map[string]debezium.Found, []string, error) {
	conn, err := binlog.Connect(ctx, o.Source, o.Server.Addr)
	if err != nil {
		return nil, nil, nil, err
	}
	defer conn.Close()
	file := off.File
	for back := 0; ; back++ {
		from, prev, err := source.FileStart(conn, o.Server.Flavor, file)
		switch {
		case errors.Is(err, source.ErrNoBinlogFile) && back == 0 && off.GTIDs != "":
			rep.Notes = append(rep.Notes, fmt.Sprintf("%v: walking from the offset's GTID set; no row before it is checked", err))
			from, prev = off.GTIDs, ""
		case err != nil && back == 0:
			return nil, nil, nil, fmt.Errorf("the offset of %s names binlog file %s of %s: %w (without a GTID set in the offset, the source must be the "+
				"server the connector read: put it first in source.hosts)", off.Name(), off.File, o.Server.Addr, err)
		case err != nil:
			return nil, nil, nil, err
		}
		if err := source.CheckNotPurged(o.Server, from); err != nil {
			return nil, nil, nil, err
		}
		o.From = from
		walk, err := debezium.DoWalk(ctx, o)
		if err != nil {
			return nil, nil, nil, err
		}
		found, topics, err := debezium.Published(ctx, k, cfg.Kafka.RequestTimeout, checkpoint.DefaultStableWait, walk.Rows,
			func(msg string) { rep.Notes = append(rep.Notes, msg) })
		if err != nil {
			return nil, nil, nil, err
		}
		proven := len(walk.Rows) == 0 || walk.Dropped > 0
		for _, r := range walk.Rows {
			if _, ok := found[r.EventID]; ok {
				proven = true
				break
			}
		}
		if proven || prev == "" || back == stepBack {
			return walk, found, topics, nil
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("no outbox row from the start of %s to the head has a record: walked again from the start of %s", file, prev))
		file = prev
	}
}

// partitionCounts is the walk's Place: the partition count keys of a topic
// are placed by, the recorded one (checkpoint.Partitions) or the topic's
// now; 0 when the topic does not exist.
func partitionCounts(ctx context.Context, cfg config.Config, k clients.Kafka, placed map[string]int32) func(string) (int32, error) {
	return func(topic string) (int32, error) {
		if n, ok := placed[topic]; ok {
			return n, nil
		}
		cl, err := kgo.NewClient(k.Admin()...)
		if err != nil {
			return 0, err
		}
		defer cl.Close()
		mctx, cancel := context.WithTimeout(ctx, cfg.Kafka.RequestTimeout)
		defer cancel()
		td, err := kadm.NewClient(cl).ListTopics(mctx, topic)
		if err != nil {
			return 0, err
		}
		t, ok := td[topic]
		if !ok || t.Err != nil {
			return 0, nil // not there: no record of it yet
		}
		return int32(len(t.Partitions)), nil
	}
}

func partialText(p *checkpoint.Partial) string {
	if p == nil {
		return ""
	}
	return fmt.Sprintf(" (+%d rows of %s published)", p.Rows, p.GTID)
}

// printTranslation prints what was read and found, for an operator.
func printTranslation(rep debeziumReport) {
	o := rep.Offset
	fmt.Printf("debezium offset: %s in %s: %s\n", o.Name(), rep.Store, o)
	fmt.Printf("walked:          %d transactions, %d outbox rows, from %s to %s\n", rep.Walked.Transactions, rep.Walked.Rows, rep.Walked.From, rep.Walked.To)
	fmt.Printf("in kafka:        %d of them published, in binlog order (topics: %s); the offset covers %d\n", rep.Published,
		strings.Join(rep.Walked.Topics, ", "), rep.Claimed)
	fmt.Printf("new position:    %s%s\n", rep.Position.GTIDSet, partialText(rep.Position.Partial))
	if e := rep.LastPublished; e != nil {
		fmt.Printf("last published:  event_id %s (GTID %s, %s) in %s[%d]\n", printable(e.EventID), e.GTID, e.Table, e.Topic, e.Partition)
	}
	if e := rep.FirstEvent; e != nil {
		fmt.Printf("first event:     event_id %s (GTID %s, %s), the first the relay publishes\n", printable(e.EventID), e.GTID, e.Table)
	} else {
		fmt.Println("first event:     none yet: the relay publishes the next outbox row written")
	}
	for _, n := range rep.Notes {
		fmt.Printf("note:            %s\n", n)
	}
	for _, a := range rep.Anomalies {
		fmt.Printf("NOT PROVEN:      %s\n", a)
	}
}
