package debezium

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/router"
	"github.com/outbox-relay/outbox-relay/schema"
)

// ErrWalk is wrapped by the walk's refusals: a bound reached, or a
// transaction the translation does not handle.
var ErrWalk = errors.New("walk the binlog")

// Tx is a source transaction the walk met with captured rows.
type Tx struct {
	GTID string
	// Before is the GTID set before it (every transaction walked before it
	// included), and the captured tables' layout there: a checkpoint just
	// before it.
	Before     string
	Layout     schema.Tables
	Signs      schema.Signs
	Provision  schema.Provisional
	BeforeTime time.Time // commit time of the transaction before it (zero: none walked)
	// Fingerprint is that of the last transaction with captured rows
	// before it (nil: none walked), as the relay records it.
	Fingerprint *checkpoint.Fingerprint
	Time        time.Time // its commit time
	File        string    // binlog file and offset after its commit
	Pos         uint32
	Rows        int64 // its captured INSERT rows
	// Covered: Debezium's offset is at or after its end (its GTID is in
	// the offset's set; without one, its commit ends at or before the
	// offset's file and position).
	Covered bool
}

// Row is one captured INSERT row, routed as the relay routes it.
type Row struct {
	Tx      *Tx
	N       int64 // its place among Tx's rows, from 1: the partial count once it is published
	EventID string
	Table   string
	Topic   string // "" when the router refuses it (Refused says why)
	// Partition is where the relay places its record: the router's, else
	// its key's by the topic's partition count; -1 when the topic does
	// not exist (no record of it can be in Kafka).
	Partition int32
	Refused   string
	Stamp     time.Time // the record's timestamp as the relay sets it
	// Absent: the columns its binlog image lacks (binlog_row_image MINIMAL
	// or NOBLOB); the relay stops at its transaction rather than publish
	// it. Its event id is read from the columns present ("" when absent).
	Absent []string
}

// Claim is where Debezium's offset says it is, for the walk to mark the
// transactions it covers: by GTID set when the offset has one, else by
// binlog file and position.
type Claim struct {
	Set  mysql.GTIDSet
	File string
	Pos  uint32
}

// covers reports whether the transaction ending at file/pos with gtid is
// covered by the claim.
func (c Claim) covers(flavor, gtid, file string, pos uint32) bool {
	if c.Set != nil {
		one, err := binlog.ParseSet(flavor, gtid)
		return err == nil && c.Set.Contain(one)
	}
	return file != "" && comparePos(file, pos, c.File, c.Pos) <= 0
}

// comparePos orders two binlog positions: files by their numeric suffix
// (name.000123), then offsets.
func comparePos(fa string, pa uint32, fb string, pb uint32) int {
	if fa != fb {
		na, ea := fileSeq(fa)
		nb, eb := fileSeq(fb)
		if ea != nil || eb != nil || na == nb {
			return strings.Compare(fa, fb)
		}
		if na < nb {
			return -1
		}
		return 1
	}
	switch {
	case pa < pb:
		return -1
	case pa > pb:
		return 1
	}
	return 0
}

func fileSeq(f string) (uint64, error) {
	i := strings.LastIndexByte(f, '.')
	return strconv.ParseUint(f[i+1:], 10, 64)
}

// WalkOptions say what to walk and how far.
type WalkOptions struct {
	Source binlog.Config  // the replication connection's settings (a server_id of its own)
	Server *binlog.Server // source.Inspect's
	// From is the GTID set the walk starts after; Head the set it reads up
	// to (the first commit whose set contains it ends the walk, or the
	// server's heartbeat: it has nothing more).
	From, Head string
	// Layout, Signs: the captured tables' layout at From.
	Layout schema.Tables
	Signs  schema.Signs
	// Routers are the captured tables' ("db.table"), as the relay's.
	Routers map[string]*router.Router
	// Place is the partition count keys of topic are placed by; 0 when the
	// topic does not exist.
	Place func(topic string) (int32, error)
	Claim Claim
	// MaxRows bounds the rows kept after Debezium's position; Keep is how
	// many rows the offset covers are kept for the proof (the last ones).
	MaxRows, Keep int
	Log           *slog.Logger
}

// Walk is what the binlog from From to Head holds.
type Walk struct {
	From string
	// End is the GTID set at the walk's end, with the layout there and the
	// commit time of its last transaction.
	End                  string
	EndLayout            schema.Tables
	EndSigns             schema.Signs
	EndProvisional       schema.Provisional
	EndTime              time.Time
	EndFingerprint       *checkpoint.Fingerprint
	Rows                 []Row // in binlog order: the last Keep the offset covers, then every one after
	Dropped              int   // rows the offset covers, walked and not kept
	Transactions         int   // source transactions walked
	OffsetFile, OffsetAt string
	// Disorder names a transaction the offset covers that came after one
	// it does not ("" when none).
	Disorder string
}

// DoWalk reads the binlog from o.From to o.Head with the relay's reader
// and schema tracker, and routes every captured INSERT row with o.Routers.
func DoWalk(ctx context.Context, o WalkOptions) (*Walk, error) {
	w := &Walk{From: o.From, End: o.From, EndLayout: o.Layout, EndSigns: o.Signs}
	from, err := binlog.ParseSet(o.Server.Flavor, o.From)
	if err != nil {
		return nil, fmt.Errorf("%w: start %q: %w", ErrWalk, o.From, err)
	}
	head, err := binlog.ParseSet(o.Server.Flavor, o.Head)
	if err != nil {
		return nil, fmt.Errorf("%w: head %q: %w", ErrWalk, o.Head, err)
	}
	if from.Contain(head) {
		return w, nil // nothing after the start
	}
	tracker := schema.New(o.Source.Tables, o.Layout, o.Signs)
	reader := binlog.NewReader(o.Source, o.Server, tracker, o.Log)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan []binlog.Event, 2)
	readErr := make(chan error, 1)
	go func() { readErr <- reader.Run(rctx, o.From, events) }()
	s := &walkState{o: o, w: w, before: o.From, layout: o.Layout, signs: o.Signs, head: head, places: map[string]int32{}}
	for !s.done {
		select {
		case batch := <-events:
			for i := range batch {
				if err := s.event(&batch[i]); err != nil {
					cancel()
					<-readErr
					return nil, err
				}
				if s.done {
					break
				}
			}
		case err := <-readErr:
			for len(events) > 0 && !s.done { // what it sent before it ended
				for _, ev := range <-events {
					if err := s.event(&ev); err != nil {
						return nil, err
					}
					if s.done {
						return w, nil
					}
				}
			}
			if s.done {
				return w, nil
			}
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: stopped at %s after %d transactions (--walk-timeout): %w", ErrWalk, s.before, w.Transactions, ctx.Err())
			}
			return nil, fmt.Errorf("%w: %w", ErrWalk, err)
		}
	}
	cancel()
	<-readErr
	return w, nil
}

// walkState is the walk's position while it reads.
type walkState struct {
	o      WalkOptions
	w      *Walk
	head   mysql.GTIDSet
	done   bool
	cur    *Tx
	rows   []Row // the current transaction's
	before string
	layout schema.Tables
	signs  schema.Signs
	prov   schema.Provisional
	last   time.Time // commit time of the last transaction walked
	fp     *checkpoint.Fingerprint
	places map[string]int32
	kept   int // rows kept after Debezium's position
	passed bool
}

func (s *walkState) event(ev *binlog.Event) error {
	switch ev.Kind {
	case binlog.KindRows:
		return s.rowsEvent(ev)
	case binlog.KindCommit, binlog.KindPrepare, binlog.KindRollback:
		s.commit(ev)
		if err := s.bound(); err != nil {
			return err
		}
		s.done = ev.Set.Contain(s.head)
	case binlog.KindHeartbeat:
		s.done = s.cur == nil // the server had nothing more
	}
	return nil
}

func (s *walkState) rowsEvent(ev *binlog.Event) error {
	if ev.XID != "" {
		return fmt.Errorf("%w: XA transaction %s (GTID %s) wrote %s: a switch across prepared XA transactions is not translated; "+
			"set the position by hand (checkpoint set --gtid) once it has ended", ErrWalk, ev.XID, ev.GTID, ev.Table)
	}
	if s.cur == nil || s.cur.GTID != ev.GTID {
		s.cur = &Tx{GTID: ev.GTID, Before: s.before, Layout: s.layout, Signs: s.signs, Provision: s.prov, BeforeTime: s.last, Fingerprint: s.fp}
		s.rows = s.rows[:0]
	}
	if ev.Op != binlog.OpInsert {
		return nil // not routed, not counted (the relay's invalid_op)
	}
	table := ev.Table.String()
	rt := s.o.Routers[table]
	if rt == nil {
		return fmt.Errorf("%w: rows of %s, which has no router", ErrWalk, table)
	}
	rows := ev.Rows
	var whole []any // a partial image's row, its absent columns nil
	if ev.Image != nil {
		// Its rows count, and their event ids are looked up: Debezium may
		// have published them. The relay never does: a row the walk's
		// position would leave to the relay stops it at its transaction.
		rows, whole = ev.Image.Rows, make([]any, len(ev.Table.Columns))
	}
	for _, values := range rows {
		s.cur.Rows++
		r := Row{Tx: s.cur, N: s.cur.Rows, Table: table, Partition: -1, Stamp: ev.Time}
		if whole != nil {
			clear(whole)
			for i, c := range ev.Image.Columns {
				if c < len(whole) && i < len(values) {
					whole[c] = values[i]
				}
			}
			values, r.Absent = whole, ev.Absent
		}
		rec, err := rt.Route(router.Row{Columns: ev.Table.Columns, Values: values, CommitTime: ev.Time, Latin1: ev.Table.Latin1})
		r.EventID = rec.EventID
		switch {
		case r.Absent != nil:
			r.Refused = fmt.Sprintf("its binlog image lacks column(s) %s (binlog_row_image MINIMAL or NOBLOB)", strings.Join(r.Absent, ", "))
		case err != nil:
			r.Refused = err.Error()
		default:
			r.Topic, r.Stamp = rec.Topic, rec.Timestamp
			n, err := s.place(rec.Topic)
			if err != nil {
				return err
			}
			switch {
			case rec.HasPartition:
				r.Partition = rec.Partition
			case n > 0:
				r.Partition = clients.KeyPartition(rec.Key, n)
			}
		}
		s.rows = append(s.rows, r)
	}
	if s.kept+len(s.rows) > s.o.MaxRows {
		return fmt.Errorf("%w: more than %d outbox rows to check before the source's head (%s, at transaction %s): raise --walk-max-rows",
			ErrWalk, s.o.MaxRows, s.o.Head, ev.GTID)
	}
	return nil
}

// place is the partition count of topic, asked once.
func (s *walkState) place(topic string) (int32, error) {
	if n, ok := s.places[topic]; ok {
		return n, nil
	}
	n, err := s.o.Place(topic)
	if err != nil {
		return 0, fmt.Errorf("%w: partitions of %s: %w", ErrWalk, topic, err)
	}
	s.places[topic] = n
	return n, nil
}

// commit ends the transaction being read: its rows join the walk's.
func (s *walkState) commit(ev *binlog.Event) {
	w := s.w
	w.Transactions++
	covered := s.o.Claim.covers(s.o.Server.Flavor, ev.GTID, ev.File, ev.Pos)
	if covered {
		w.OffsetFile, w.OffsetAt = ev.File, ev.Set.String()
		if s.passed && w.Disorder == "" {
			w.Disorder = ev.GTID
		}
	} else {
		s.passed = true
	}
	if s.cur != nil && s.cur.GTID == ev.GTID {
		tx := s.cur
		tx.Time, tx.File, tx.Pos, tx.Covered = ev.Time, ev.File, ev.Pos, covered
		w.Rows = append(w.Rows, s.rows...)
		if !covered {
			s.kept += len(s.rows)
		}
		s.rows = nil
		s.cur = nil
	}
	if covered && len(w.Rows) > 2*s.o.Keep {
		// Only the last Keep rows before Debezium's position are needed.
		n := len(w.Rows) - s.o.Keep
		w.Dropped += n
		w.Rows = append(w.Rows[:0:0], w.Rows[n:]...)
	}
	if ev.Digest != nil && ev.XID == "" && ev.Kind == binlog.KindCommit {
		s.fp = &checkpoint.Fingerprint{GTID: ev.GTID, Before: s.before, Tables: ev.Digest.Tables, Rows: int64(ev.Digest.Rows), Digest: ev.Digest.Sum}
	}
	s.before, s.layout, s.signs, s.prov, s.last = ev.Set.String(), ev.Schema, ev.Unsigned, ev.Provisional, ev.Time
	w.End, w.EndLayout, w.EndSigns, w.EndProvisional, w.EndTime, w.EndFingerprint = s.before, ev.Schema, ev.Unsigned, ev.Provisional, ev.Time, s.fp
}

func (s *walkState) bound() error {
	if s.kept > s.o.MaxRows {
		return fmt.Errorf("%w: more than %d outbox rows to check before the source's head (%s): raise --walk-max-rows", ErrWalk, s.o.MaxRows, s.o.Head)
	}
	return nil
}
