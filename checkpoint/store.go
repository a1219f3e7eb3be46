package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Store reads and describes checkpoints in one topic.
type Store struct {
	topic      string
	opts       []kgo.Opt // connection options (brokers, TLS, SASL)
	stableWait time.Duration
	// txnOnly: Load accepts only a checkpoint written in a transaction
	// (see TransactionalOnly).
	txnOnly bool
	// describeWait bounds Describe's wait for a topic just created; 0:
	// DescribeWait.
	describeWait time.Duration
}

// NewStore returns a store for topic; opts carry the connection settings.
// Its Load and History wait up to DefaultStableWait for open transactions.
func NewStore(topic string, opts ...kgo.Opt) *Store {
	return &Store{topic: topic, opts: opts, stableWait: DefaultStableWait}
}

// Topic is the checkpoint topic's name.
func (s *Store) Topic() string { return s.topic }

// Record returns the record that stores cp; produce it last in the Kafka
// transaction it belongs to.
func (s *Store) Record(cp *Checkpoint) *kgo.Record {
	return &kgo.Record{Topic: s.topic, Partition: 0, Key: []byte(cp.Name), Value: cp.Encode()}
}

// Tombstone returns the record that deletes name's checkpoint.
func (s *Store) Tombstone(name string) *kgo.Record {
	return &kgo.Record{Topic: s.topic, Partition: 0, Key: []byte(name)}
}

// ErrTopicLayout is returned when the checkpoint topic exists with more than
// one partition: ordering of checkpoints would not hold.
var ErrTopicLayout = errors.New("checkpoint topic layout")

// EnsureTopic creates the compacted, single-partition checkpoint topic if it
// is missing, and checks its partition count if it exists.
func (s *Store) EnsureTopic(ctx context.Context, adm *kadm.Client, replication int16) error {
	resp, err := adm.CreateTopic(ctx, 1, replication, map[string]*string{
		"cleanup.policy": kadm.StringPtr("compact"),
	}, s.topic)
	if err == nil && resp.Err == nil {
		return nil
	}
	if err == nil {
		err = resp.Err
	}
	// A principal without CREATE (or a topic policy) gets an authorization
	// or policy error: the topic may have been created beforehand, which
	// the partition check below tells.
	refused := errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) || errors.Is(err, kerr.PolicyViolation)
	if !errors.Is(err, kerr.TopicAlreadyExists) && !refused {
		return fmt.Errorf("create checkpoint topic %s: %w", s.topic, err)
	}
	details, err := adm.ListTopics(ctx, s.topic)
	if err != nil {
		return fmt.Errorf("describe checkpoint topic %s: %w", s.topic, err)
	}
	d, ok := details[s.topic]
	if refused && (!ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition)) {
		return fmt.Errorf("%w: checkpoint topic %s does not exist and creating it was refused (%v): create it compacted with 1 partition, or grant CREATE",
			ErrTopicLayout, s.topic, err)
	}
	if !ok || d.Err != nil {
		return fmt.Errorf("describe checkpoint topic %s: %w", s.topic, topicErr(ok, d.Err))
	}
	if n := len(d.Partitions); n != 1 {
		return fmt.Errorf("%w: topic %s has %d partitions, need exactly 1", ErrTopicLayout, s.topic, n)
	}
	return nil
}

// DefaultStableWait is how long Load and History wait, by default, for the
// transactions open on the checkpoint partition to end (see Load).
const DefaultStableWait = 10 * time.Second

// WithStableWait returns a copy of s whose Load and History wait at most d
// for open transactions on the checkpoint partition to end; 0 (or less)
// waits until their context ends.
func (s *Store) WithStableWait(d time.Duration) *Store {
	c := *s
	c.stableWait = max(d, 0)
	return &c
}

// ErrCheckpointHeldBack is returned (wrapped in a *HeldBackError) by Load
// and History when a transaction on the checkpoint partition stays open
// longer than they wait: the records after its first one, newer
// checkpoints of any pipeline among them, are not yet visible to
// read_committed readers, so the newest visible checkpoint may not be the
// newest committed one. Typically another pipeline sharing the topic
// crashed between producing its checkpoint record and committing: the
// broker aborts that transaction after the pipeline's transaction timeout,
// and at once when a relay of that pipeline starts again. Not fatal: retry.
var ErrCheckpointHeldBack = errors.New("checkpoint topic held back by an open transaction")

// Holder is a transaction open on the checkpoint partition.
type Holder struct {
	// TransactionalID is the producer's transactional id, the name of the
	// pipeline that opened it; "" when it could not be found (see
	// HeldBackError.Lookup).
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	// StartOffset is the transaction's first offset in the partition.
	StartOffset int64
	// Started is when the transaction began and Timeout its transaction
	// timeout, when the coordinator said (zero otherwise).
	Started time.Time
	Timeout time.Duration
}

// HeldBackError says which transactions keep the checkpoint partition's
// last stable offset below its high watermark. It wraps
// ErrCheckpointHeldBack.
type HeldBackError struct {
	Topic         string
	StableOffset  int64 // last stable offset when the wait ended
	HighWatermark int64 // high watermark when the wait began
	Waited        time.Duration
	// Holders are the open transactions found; empty when they could not
	// be described, or ended meanwhile.
	Holders []Holder
	// Lookup is why holders or their transactional ids are unknown
	// (describing producers or transactions is not permitted or not
	// supported by the brokers); nil when the lookup worked.
	Lookup error
	// Visible is, from Load, the newest checkpoint of the name below the
	// last stable offset: possibly older than the newest committed one.
	// Nil when there is none (or from History).
	Visible *Checkpoint
}

// Unwrap makes errors.Is(err, ErrCheckpointHeldBack) hold.
func (e *HeldBackError) Unwrap() error { return ErrCheckpointHeldBack }

func (e *HeldBackError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: topic %s: offsets %d to %d are not visible to read_committed readers after %s (last stable offset %d, high watermark %d)",
		ErrCheckpointHeldBack, e.Topic, e.StableOffset, e.HighWatermark-1, e.Waited.Round(time.Millisecond), e.StableOffset, e.HighWatermark)
	if len(e.Holders) == 0 {
		b.WriteString("; holding transactional id unknown")
		if e.Lookup != nil {
			fmt.Fprintf(&b, " (%v)", e.Lookup)
		} else {
			b.WriteString(" (no open transaction found any more: it may just have ended)")
		}
	}
	for i, h := range e.Holders {
		sep := "; held by"
		if i > 0 {
			sep = ", and by"
		}
		id := fmt.Sprintf("transactional id %q", h.TransactionalID)
		if name, ok := strings.CutSuffix(h.TransactionalID, "#2"); ok && name != "" {
			id += fmt.Sprintf(" (pipeline %s's second transaction lane)", name)
		}
		if h.TransactionalID == "" {
			id = "a transaction of unknown transactional id"
		}
		fmt.Fprintf(&b, "%s %s (producer id %d, from offset %d", sep, id, h.ProducerID, h.StartOffset)
		if !h.Started.IsZero() {
			fmt.Fprintf(&b, ", open since %s", h.Started.UTC().Format(time.RFC3339))
			if h.Timeout > 0 {
				fmt.Fprintf(&b, ", aborted by the broker after its transaction timeout of %s, around %s", h.Timeout, h.Started.Add(h.Timeout).UTC().Format(time.RFC3339))
			}
		}
		b.WriteString(")")
	}
	if len(e.Holders) > 0 && e.Lookup != nil {
		fmt.Fprintf(&b, " (transactional ids unknown: %v)", e.Lookup)
	}
	b.WriteString("; a newer checkpoint may be among the invisible records: wait, or start the pipeline that holds the transaction again (its start aborts it)")
	return b.String()
}

// Load returns the newest committed checkpoint for name, or nil when there
// is none (never written, or reset: a reset marker, or a tombstone).
//
// It first waits until every transaction with a record below the
// partition's high watermark has ended (the last stable offset reaches it),
// so that no committed checkpoint of name is hidden behind another
// pipeline's open transaction; it waits at most the store's stable wait
// (DefaultStableWait, see WithStableWait) or until ctx ends, and then
// returns a *HeldBackError wrapping ErrCheckpointHeldBack, never an older
// checkpoint. Naming the holders takes up to 3 s more. A relay calls it
// after initialising its transactional producer, which aborts the
// pipeline's own earlier transaction, so only other pipelines' transactions
// can hold it back.
func (s *Store) Load(ctx context.Context, name string) (*Checkpoint, error) {
	cp, _, err := s.LoadWithReset(ctx, name)
	return cp, err
}

// LoadWithReset is Load that also says whether the newest record of name
// is a reset marker (Checkpoint.IsReset): then cp is nil and reset is the
// marker's Operator (who reset it, when, from which position).
func (s *Store) LoadWithReset(ctx context.Context, name string) (cp *Checkpoint, reset *Operator, err error) {
	var last stored
	err = s.scan(ctx, name, func(r stored) { last = r })
	if hb, ok := errors.AsType[*HeldBackError](err); ok {
		hb.Visible, _, _ = last.decodeReset()
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, err
	}
	if s.txnOnly && last.found && !last.txn {
		return nil, nil, notTransactional(name, last) // one it cannot decode: that error
	}
	return last.decodeReset()
}

// stored is one record of a name as read: only the newest ones are
// decoded, so that a record a later one supersedes (one in a newer format
// written before a rollback, then reset or set by this build) is never
// looked at.
type stored struct {
	offset int64
	value  []byte // nil: a tombstone
	found  bool
	txn    bool // written in a transaction
}

// decodeReset returns the checkpoint r holds, nil for a tombstone, a
// reset marker (and then its Operator) or no record.
func (r stored) decodeReset() (*Checkpoint, *Operator, error) {
	cp, err := r.decode()
	if cp != nil && cp.IsReset() {
		return nil, cp.Operator, nil
	}
	return cp, nil, err
}

// decode returns the record r holds (a reset marker too), nil for a
// tombstone or no record.
func (r stored) decode() (*Checkpoint, error) {
	if !r.found || r.value == nil {
		return nil, nil
	}
	cp, err := Decode(r.value)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint at offset %s: %w", strconv.FormatInt(r.offset, 10), err)
	}
	return cp, nil
}

// LoadVisible returns the newest checkpoint of name that read_committed
// readers see now, without waiting for open transactions to end: behind one
// it may be older than the newest committed checkpoint, which Load reports
// instead of returning. For diagnostics, and for readers that know the open
// transaction can never commit (a killed relay's own, before anything
// fenced it).
func (s *Store) LoadVisible(ctx context.Context, name string) (*Checkpoint, error) {
	c := *s
	c.stableWait = noWait
	var last stored
	if err := c.scan(ctx, name, func(r stored) { last = r }); err != nil {
		return nil, err
	}
	cp, _, err := last.decodeReset()
	return cp, err
}

// noWait as the stable wait reads up to the last stable offset as it is.
const noWait = -1

// History returns up to n of the newest committed checkpoints for name,
// oldest first, as far back as the topic (after compaction) still holds. It
// waits for open transactions like Load. Only the records it returns are
// decoded.
func (s *Store) History(ctx context.Context, name string, n int) ([]*Checkpoint, error) {
	if n < 1 {
		return nil, fmt.Errorf("checkpoint history: count %d: want 1 or more", n)
	}
	var all []stored
	slack := 64 + min(n, 1<<16) // trim now and then; n may be math.MaxInt
	err := s.scan(ctx, name, func(r stored) {
		if r.value == nil {
			all = all[:0]
			return
		}
		all = append(all, r)
		if len(all) > n && len(all)-n > slack {
			all = append(all[:0], all[len(all)-n:]...)
		}
	})
	if err != nil {
		return nil, err
	}
	if len(all) > n {
		all = all[len(all)-n:]
	}
	out := make([]*Checkpoint, 0, len(all))
	for _, r := range all {
		cp, err := r.decode()
		if err != nil {
			return nil, err
		}
		if cp.IsReset() { // like a tombstone: the history starts after it
			out = out[:0]
			continue
		}
		out = append(out, cp)
	}
	return out, nil
}

// diagnoseBudget bounds what a held-back Load does after its wait: naming
// the holders and reading the visible checkpoint.
const diagnoseBudget = 3 * time.Second

// scan calls fn, in offset order, for each committed record of name (a nil
// value for a tombstone). It reads up to a last stable
// offset at or past the high watermark it found first; when the wait for
// that ends, it reads up to the last stable offset with a bounded context of
// its own and returns a *HeldBackError.
func (s *Store) scan(ctx context.Context, name string, fn func(stored)) error {
	cl, err := kgo.NewClient(s.opts...)
	if err != nil {
		return fmt.Errorf("load checkpoint: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	start, end, held, err := s.stable(ctx, adm)
	if err != nil {
		return err
	}
	if held != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), diagnoseBudget)
		defer cancel()
		held.Holders, held.Lookup = s.holders(dctx, adm, held.HighWatermark)
		if err := s.read(dctx, name, start, held.StableOffset, fn); err != nil {
			return fmt.Errorf("%w (reading the visible part: %v)", held, err)
		}
		return held
	}
	return s.read(ctx, name, start, end, fn)
}

// read calls fn for each record of name in [start, end), end at most the
// last stable offset.
func (s *Store) read(ctx context.Context, name string, start, end int64, fn func(stored)) error {
	if end <= start {
		return nil
	}
	opts := append([]kgo.Opt{
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.topic: {0: kgo.NewOffset().At(start)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // so the last offset below the LSO is seen even when it is a marker
	}, s.opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("load checkpoint: %w", err)
	}
	defer cl.Close()
	for {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("load checkpoint: %w", err)
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return fmt.Errorf("load checkpoint: fetch %s: %w", s.topic, ferr)
		}
		done := false
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= end {
				done = true
			}
			if r.Attrs.IsControl() || string(r.Key) != name || r.Offset >= end {
				return
			}
			fn(stored{offset: r.Offset, value: r.Value, found: true, txn: r.Attrs.IsTransactional()})
		})
		if done {
			return nil
		}
	}
}

// stable returns the partition's log start offset and a last stable offset
// at or past its high watermark at the start: every transaction with a
// record below that watermark has ended. It polls the last stable offset
// until then, for at most the stable wait; when that ends first it returns
// a HeldBackError to fill in. Both offsets are 0 when the topic does not
// exist yet.
func (s *Store) stable(ctx context.Context, adm *kadm.Client) (start, end int64, held *HeldBackError, err error) {
	hwm, ok, err := s.offset(ctx, adm.ListEndOffsets)
	if err != nil || !ok {
		return 0, 0, nil, err
	}
	start, _, err = s.offset(ctx, adm.ListStartOffsets)
	if err != nil {
		return 0, 0, nil, err
	}
	if s.stableWait == noWait {
		lso, _, err := s.offset(ctx, adm.ListCommittedOffsets)
		return start, lso, nil, err
	}
	began := time.Now()
	var timeout <-chan time.Time
	if s.stableWait > 0 {
		t := time.NewTimer(s.stableWait)
		defer t.Stop()
		timeout = t.C
	}
	delay := 5 * time.Millisecond
	lso := int64(-1)
	for {
		l, _, err := s.offset(ctx, adm.ListCommittedOffsets)
		switch {
		case err == nil:
			if lso = l; lso >= hwm {
				return start, lso, nil, nil
			}
		case ctx.Err() == nil && !transient(err):
			return 0, 0, nil, err
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return 0, 0, nil, fmt.Errorf("load checkpoint: %w", ctx.Err())
			}
		case <-timeout:
		case <-time.After(delay):
			delay = min(2*delay, 250*time.Millisecond)
			continue
		}
		if lso < 0 {
			return 0, 0, nil, fmt.Errorf("load checkpoint: last stable offset of %s: %w", s.topic, ctx.Err())
		}
		return start, lso, &HeldBackError{Topic: s.topic, StableOffset: lso, HighWatermark: hwm, Waited: time.Since(began)}, nil
	}
}

// transient reports whether err may go away by itself: a retriable Kafka
// error, or not a Kafka error at all (a connection that failed).
func transient(err error) bool {
	var ke *kerr.Error
	return !errors.As(err, &ke) || ke.Retriable
}

// offset returns partition 0's offset from list; ok is false when the topic
// does not exist.
func (s *Store) offset(ctx context.Context, list func(context.Context, ...string) (kadm.ListedOffsets, error)) (int64, bool, error) {
	l, err := list(ctx, s.topic)
	if err != nil {
		return 0, false, fmt.Errorf("load checkpoint: list offsets of %s: %w", s.topic, err)
	}
	o, ok := l.Lookup(s.topic, 0)
	if !ok {
		return 0, false, nil // topic missing
	}
	if o.Err != nil {
		return 0, false, fmt.Errorf("load checkpoint: list offsets of %s: %w", s.topic, o.Err)
	}
	return o.Offset, true, nil
}

// holders finds the transactions open on the partition with a first record
// below hwm, and their transactional ids. The error says why some of that
// is unknown (not permitted, not supported).
func (s *Store) holders(ctx context.Context, adm *kadm.Client, hwm int64) ([]Holder, error) {
	described, err := adm.DescribeProducers(ctx, kadm.TopicsSet{s.topic: {0: {}}})
	if err != nil {
		return nil, fmt.Errorf("describe producers of %s: %w%s", s.topic, err, hint(err, "READ on the topic"))
	}
	p, ok := described[s.topic].Partitions[0]
	if !ok {
		return nil, fmt.Errorf("describe producers of %s: no answer for partition 0", s.topic)
	}
	if p.Err != nil {
		return nil, fmt.Errorf("describe producers of %s: %w%s", s.topic, p.Err, hint(p.Err, "READ on the topic"))
	}
	var hs []Holder
	var pids []int64
	for _, ap := range p.ActiveProducers.Sorted() {
		// Apache Kafka lists every producer with state on the partition;
		// those without an open transaction have no start offset.
		if ap.CurrentTxnStartOffset < 0 || ap.CurrentTxnStartOffset >= hwm {
			continue
		}
		hs = append(hs, Holder{ProducerID: ap.ProducerID, ProducerEpoch: ap.ProducerEpoch, StartOffset: ap.CurrentTxnStartOffset})
		pids = append(pids, ap.ProducerID)
	}
	if len(hs) == 0 {
		return nil, nil
	}
	listed, err := adm.ListTransactions(ctx, pids, nil)
	if err != nil && len(listed) == 0 {
		return hs, fmt.Errorf("list transactions: %w%s", err, hint(err, "DESCRIBE on the transactional ids"))
	}
	err = nil // some brokers answered: what they listed is enough
	byPID := map[int64]string{}
	for _, t := range listed.Sorted() {
		byPID[t.ProducerID] = t.TxnID
	}
	var ids []string
	var missing []string
	for i := range hs {
		if id, ok := byPID[hs[i].ProducerID]; ok {
			hs[i].TransactionalID = id
			ids = append(ids, id)
		} else {
			missing = append(missing, strconv.FormatInt(hs[i].ProducerID, 10))
		}
	}
	if len(ids) > 0 {
		if dt, err := adm.DescribeTransactions(ctx, ids...); err == nil || len(dt) > 0 {
			for i := range hs {
				if d, ok := dt[hs[i].TransactionalID]; ok && d.Err == nil && d.ProducerID == hs[i].ProducerID && d.StartTimestamp > 0 {
					hs[i].Started = time.UnixMilli(d.StartTimestamp)
					hs[i].Timeout = time.Duration(d.TimeoutMillis) * time.Millisecond
				}
			}
		}
	}
	if len(missing) > 0 {
		err = fmt.Errorf("producer ids %s not among the transactions listed (listing shows only transactional ids the client may DESCRIBE)", strings.Join(missing, ", "))
	}
	return hs, err
}

// hint suggests the ACL that an authorisation error lacks.
func hint(err error, acl string) string {
	if ke, ok := errors.AsType[*kerr.Error](err); ok && strings.HasSuffix(ke.Message, "_AUTHORIZATION_FAILED") {
		return " (not permitted: grant the relay's principal " + acl + ")"
	}
	if errors.Is(err, kerr.UnsupportedVersion) {
		return " (the brokers do not support it: Kafka 3.0 or newer does)"
	}
	return ""
}

// TransactionalIDs are the transactional ids the pipeline name writes its
// Kafka transactions under: name, and with kafka.transaction_lanes 2 also
// name followed by "#2" ('#' is in no pipeline name, so the id is no other
// pipeline's). A relay initialises both at every start, whatever its lanes,
// and Write fences both.
func TransactionalIDs(name string) []string {
	return []string{name, name + "#2"}
}

// Write commits cp for name (nil writes a tombstone: no checkpoint) in a
// Kafka transaction whose transactional id is name, the relay's own, after
// initialising its second one (TransactionalIDs): it fences a running relay
// of that name in both its lanes, which then stops, and aborts their open
// transactions. lanes is the pipeline's kafka.transaction_lanes: with 1, a
// principal not allowed the second id (so no relay under it wrote with it)
// is not an error.
//
// The order is the relay's own (name, then the second id, then the write):
// a relay that initialises name after Write did fences Write, whose commit
// then fails; one that initialised name before is fenced in its first
// lane, and its second lane never commits after a first-lane commit
// failed (or, name being initialised by another, at all: see the relay's
// check before a second-lane commit).
func (s *Store) Write(ctx context.Context, name string, lanes int, cp *Checkpoint) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.TransactionalID(name)}, s.opts...)...)
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	defer cl.Close()
	if _, _, err := cl.ProducerID(ctx); err != nil {
		return fmt.Errorf("write checkpoint: init transactional producer %s: %w", name, err)
	}
	if err := s.fence(ctx, TransactionalIDs(name)[1]); err != nil {
		if lanes > 1 || !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
			return fmt.Errorf("write checkpoint: %w", err)
		}
	}
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	rec := s.Tombstone(name)
	if cp != nil {
		rec = s.Record(cp)
	}
	written, err := cl.ProduceSync(ctx, rec).First()
	if err != nil {
		_ = cl.EndTransaction(ctx, kgo.TryAbort)
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("write checkpoint: commit: %w", err)
	}
	return s.AwaitVisible(ctx, kadm.NewClient(cl), written.Offset)
}

// fence initialises the transactional id: a producer that used it can
// commit nothing more, and its open transaction is aborted (or, already
// being committed, completed) before this returns.
func (s *Store) fence(ctx context.Context, id string) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.TransactionalID(id)}, s.opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, _, err := cl.ProducerID(ctx); err != nil {
		return fmt.Errorf("init transactional producer %s: %w", id, err)
	}
	return nil
}

// ErrNotVisible is returned by AwaitVisible when its context ends before a
// committed checkpoint record is visible to read_committed readers (an older
// open transaction on the topic holds the last stable offset below it). The
// record stays committed: it becomes visible once that transaction ends.
var ErrNotVisible = errors.New("committed checkpoint not yet visible")

// AwaitVisible waits until the checkpoint record at offset is below the
// topic's last stable offset, so that Load returns it (or something newer).
// A broker answers a transaction's commit before it has written the commit
// markers; a reader that comes right after would still see the previous
// checkpoint. It polls every few milliseconds until ctx ends, or until a
// Kafka error that retrying cannot fix (not authorised).
func (s *Store) AwaitVisible(ctx context.Context, adm *kadm.Client, offset int64) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var lso int64 = -1
	for {
		l, err := adm.ListCommittedOffsets(ctx, s.topic)
		if err == nil {
			if o, ok := l.Lookup(s.topic, 0); ok && o.Err == nil {
				if lso = o.Offset; lso > offset {
					return nil
				}
			} else if ok {
				err = o.Err
			}
		}
		if err != nil && ctx.Err() == nil && !transient(err) {
			return fmt.Errorf("await checkpoint at offset %d of %s: %w", offset, s.topic, err)
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return fmt.Errorf("await checkpoint at offset %d of %s (last stable offset %d): %w: %w", offset, s.topic, lso, ErrNotVisible, err)
		case <-tick.C:
		}
	}
}
