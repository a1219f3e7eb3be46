package checkpoint

// A checkpoint held back: transactions left open on the checkpoint partition
// hide the records after them from read_committed readers; Load and History
// wait for them, then name them (their transactional ids and producers).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
)

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
	return kafkaerr.Passing(err)
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
	if kafkaerr.Denied(err) {
		return " (not permitted: grant the relay's principal " + acl + ")"
	}
	if kafkaerr.Unsupported(err) {
		return " (the brokers do not support it: Kafka 3.0 or newer does)"
	}
	return ""
}
