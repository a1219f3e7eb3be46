package kafkaerr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Every Kafka code lands in one kind; the codes the relay stops on for good
// are named, the retriable ones stay retriable, errors that are not
// Kafka's are Other.
func TestKindOfEveryCode(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want Kind
	}{
		{kerr.NotLeaderForPartition, Retriable},
		{kerr.CorruptMessage, Retriable},
		{kerr.ProducerFenced, Fenced},
		{kerr.InvalidProducerEpoch, Fenced},
		{kerr.InvalidTxnState, Fenced},
		{kerr.MessageTooLarge, RecordRefused},
		{kerr.InvalidTimestamp, RecordRefused},
		{kerr.TopicAuthorizationFailed, Refused},
		{kerr.TransactionalIDAuthorizationFailed, Refused},
		{kerr.SaslAuthenticationFailed, Refused},
		{kerr.InvalidConfig, Refused},
		{kerr.UnknownServerError, Other},
		{kerr.TransactionAbortable, Other},
		{context.DeadlineExceeded, Other},
		{errors.New("connection reset"), Other},
		{nil, Other},
	} {
		if got := KindOf(fmt.Errorf("produce: %w", tt.err)); got != tt.want {
			t.Errorf("%v: kind %d, want %d", tt.err, got, tt.want)
		}
	}
	for code := int16(-1); code < 140; code++ {
		ke, ok := kerr.ErrorForCode(code).(*kerr.Error)
		if !ok {
			continue
		}
		if k := KindOf(ke); ke.Retriable != (k == Retriable) {
			t.Errorf("%v (retriable %v) is kind %d", ke, ke.Retriable, k)
		}
	}
}

// A lock group's errors: the session timeout, another member with the
// instance id, and a refused group or topic are told apart; the rest is
// retried.
func TestMembershipOf(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want Membership
	}{
		{kerr.InvalidSessionTimeout, MemberBadSession},
		{kerr.FencedInstanceID, MemberReplaced},
		{kerr.GroupAuthorizationFailed, MemberRefused},
		{kerr.TopicAuthorizationFailed, MemberRefused},
		{kerr.InvalidGroupID, MemberRefused},
		{kerr.RebalanceInProgress, MemberRetry},
		{errors.New("x"), MemberRetry},
	} {
		if got := MembershipOf(fmt.Errorf("join: %w", tt.err)); got != tt.want {
			t.Errorf("%v: %d, want %d", tt.err, got, tt.want)
		}
	}
}

// The predicates the callers branch on.
func TestPredicates(t *testing.T) {
	w := func(e error) error { return fmt.Errorf("x: %w", e) }
	for name, ok := range map[string]bool{
		"admin refused, topic":     AdminRefused(w(kerr.TopicAuthorizationFailed)),
		"admin refused, cluster":   AdminRefused(w(kerr.ClusterAuthorizationFailed)),
		"admin refused, policy":    AdminRefused(w(kerr.PolicyViolation)),
		"not admin refused":        !AdminRefused(w(kerr.InvalidConfig)),
		"denied":                   Denied(w(kerr.GroupAuthorizationFailed)),
		"not denied":               !Denied(w(kerr.SaslAuthenticationFailed)),
		"passing, not kafka":       Passing(errors.New("reset")),
		"passing, retriable":       Passing(w(kerr.RequestTimedOut)),
		"not passing":              !Passing(w(kerr.PolicyViolation)),
		"coordinator moving":       CoordinatorMoving(w(kerr.NotCoordinator)),
		"unknown topic":            UnknownTopic(ErrUnknownTopic),
		"from code":                errors.Is(FromCode(kerr.GroupIDNotFound.Code), kerr.GroupIDNotFound) && FromCode(0) == nil,
		"kafka":                    Kafka(w(kerr.UnknownServerError)) && !Kafka(errors.New("x")),
		"txn id denied":            TxnIDDenied(w(kerr.TransactionalIDAuthorizationFailed)),
		"unsupported":              Unsupported(w(kerr.UnsupportedVersion)),
		"invalid replication":      InvalidReplicationFactor(w(kerr.InvalidReplicationFactor)),
		"topic exists":             TopicExists(w(kerr.TopicAlreadyExists)),
		"group unknown and denied": GroupUnknown(w(kerr.GroupIDNotFound)) && GroupDenied(w(kerr.GroupAuthorizationFailed)),
		"txn id unknown":           TxnIDUnknown(w(kerr.TransactionalIDNotFound)),
		"topic or cluster denied":  TopicOrClusterDenied(w(kerr.ClusterAuthorizationFailed)) && TopicDenied(w(kerr.TopicAuthorizationFailed)),
	} {
		if !ok {
			t.Errorf("%s: wrong", name)
		}
	}
}
