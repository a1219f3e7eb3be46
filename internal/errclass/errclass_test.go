package errclass

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Kafka errors are sorted by their kerr properties: retriable ones and
// other recoverable ones end the attempt (returned as they are), fencing
// wraps ErrFenced, refusals wrap ErrRejected.
func TestKafkaClassifiesByWhatTheCodeMeans(t *testing.T) {
	tests := []struct {
		err  error
		want error // nil: returned unchanged
	}{
		{kerr.NotLeaderForPartition, nil},
		{kerr.RequestTimedOut, nil},
		{kerr.CoordinatorLoadInProgress, nil},
		{kerr.NotEnoughReplicas, nil},
		{kerr.UnknownTopicOrPartition, nil},
		{kerr.CorruptMessage, nil}, // Kafka flags it retriable
		{kerr.ConcurrentTransactions, nil},
		{kerr.TransactionAbortable, nil},
		{kerr.UnknownProducerID, nil},
		{kerr.OutOfOrderSequenceNumber, nil},
		{kerr.UnknownServerError, nil},
		{kerr.OperationNotAttempted, nil},
		{context.DeadlineExceeded, nil},
		{kgo.ErrRecordTimeout, nil},
		{errors.New("connection reset"), nil},

		{kerr.ProducerFenced, ErrFenced},
		{kerr.InvalidProducerEpoch, ErrFenced},
		{kerr.TransactionalIDAuthorizationFailed, ErrRejected}, // a missing ACL, not another producer: stop, do not rejoin
		{kerr.InvalidTxnState, ErrFenced},

		{kerr.MessageTooLarge, ErrRejected},
		{kerr.RecordListTooLarge, ErrRejected},
		{kerr.InvalidRecord, ErrRejected},
		{kerr.InvalidTimestamp, ErrRejected},
		{kerr.InvalidTopicException, ErrRejected},
		{kerr.TopicAuthorizationFailed, ErrRejected},
		{kerr.ClusterAuthorizationFailed, ErrRejected},
		{kerr.GroupAuthorizationFailed, ErrRejected},
		{kerr.SaslAuthenticationFailed, ErrRejected},
		{kerr.PolicyViolation, ErrRejected},
		{kerr.InvalidReplicationFactor, ErrRejected},
		{kerr.InvalidConfig, ErrRejected},
		{&kadm.AuthError{Err: kerr.TopicAuthorizationFailed}, ErrRejected},
	}
	for _, tt := range tests {
		in := fmt.Errorf("produce: %w", tt.err)
		got := Kafka(in)
		if tt.want == nil {
			if got != in {
				t.Errorf("%v: classified as %v, want it unchanged", tt.err, got)
			}
			continue
		}
		if !errors.Is(got, tt.want) || !errors.Is(got, tt.err) {
			t.Errorf("%v: %v, want %v wrapping it", tt.err, got, tt.want)
		}
		if other := map[error]error{ErrFenced: ErrRejected, ErrRejected: ErrFenced}[tt.want]; errors.Is(got, other) {
			t.Errorf("%v: also %v", tt.err, other)
		}
		// A record's content (size, timestamp, form) is a data stop, not a
		// configuration one: it names the record (recordcheck.go).
		record := false
		for _, r := range []error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord, kerr.InvalidTimestamp} {
			record = record || errors.Is(tt.err, r)
		}
		if errors.Is(got, ErrRecordRefused) != record {
			t.Errorf("%v: ErrRecordRefused is %v, want %v", tt.err, errors.Is(got, ErrRecordRefused), record)
		}
	}
	if Kafka(nil) != nil {
		t.Error("Kafka(nil) is not nil")
	}
	// Every non-retriable Kafka error is either left to the retry, a fence
	// or a refusal, never two of them; the sorting depends on properties,
	// so a code the table above does not name still lands somewhere.
	for code := int16(-1); code < 140; code++ {
		ke, ok := kerr.ErrorForCode(code).(*kerr.Error)
		if !ok {
			continue
		}
		got := Kafka(ke)
		if ke.Retriable && got != error(ke) {
			t.Errorf("retriable %v classified as %v", ke, got)
		}
		if errors.Is(got, ErrFenced) && errors.Is(got, ErrRejected) {
			t.Errorf("%v is both fenced and rejected", ke)
		}
	}
}
