package relay

import (
	"errors"
	"fmt"
)

// Batch bound after a slow broker.
//
// The delivery waits at most kafka.request_timeout for Kafka to acknowledge a
// batch (exactly-once: the flush before EndTxn; at-least-once: the wait once
// twice the bound is unacknowledged). A broker slower than one batch per
// request_timeout (a producer quota, a slow or distant cluster) would fail
// every attempt on the same first batch, and the relay would never move. So
// an attempt that ended because Kafka did not acknowledge in time halves the
// records bound of the attempts after it (down to one record), with a
// warning; the bound doubles again, up to kafka.batch.max_records, after
// each minute in which no commit (or wait for acknowledgements) took a
// quarter of request_timeout or more. Correctness does not depend on it: a
// batch is a batch whatever its size.

// batchLimit is the records bound of the next attempt's batches.
func (r *Relay) batchLimit() int {
	if r.limit <= 0 || r.limit > r.cfg.Kafka.Batch.MaxRecords {
		return r.cfg.Kafka.Batch.MaxRecords
	}
	return r.limit
}

// ackTimedOut halves the bound when the attempt ended with err because
// Kafka did not acknowledge in time: half the records of the batch it
// committed last (which kafka.batch.max_bytes may have made smaller than
// the bound), and at most half the bound.
func (r *Relay) ackTimedOut(err error, last int) {
	if !errors.Is(err, errAckTimeout) {
		return
	}
	limit := r.batchLimit()
	if last > 0 {
		limit = min(limit, last)
	}
	if limit <= 1 {
		return
	}
	r.limit = limit / 2
	r.log.Warn().Int("max_records", r.cfg.Kafka.Batch.MaxRecords).Int("batch_limit", r.limit).
		Dur("request_timeout", r.cfg.Kafka.RequestTimeout).
		Msg("kafka did not acknowledge a batch within kafka.request_timeout: the next batches are smaller until commits are fast again (a slow broker or a producer quota: lower kafka.batch.max_records or raise kafka.request_timeout)")
}

// sizeRefused lets one attempt that ended with a record Kafka refused for
// its content (ErrRecordRefused: MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE,
// INVALID_TIMESTAMP, INVALID_RECORD: a topic's
// max.message.bytes or timestamp bounds changed while the relay ran) be
// retried: the next attempt reads the topics' settings again, and its
// checks (recordcheck.go) send a row over them to the dead-letter topic, or
// stop naming it. The same refusal again stays ErrRecordRefused (fatal).
func (r *Relay) sizeRefused(err error) error {
	refused := errors.Is(err, ErrRecordRefused)
	if !refused || r.tooLarge {
		r.tooLarge = refused
		return err
	}
	r.tooLarge = true
	r.log.Warn().Err(err).Msg("kafka refused a record: starting again with the topics' settings (max.message.bytes, message.timestamp.*) read anew")
	return fmt.Errorf("kafka refused a record (retried once with the topics' settings read again): %v", err)
}
