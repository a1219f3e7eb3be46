// Package kafkaerr reads Kafka's error codes (franz-go's kerr) for the relay
// and its commands: every question the code asks of a Kafka error is
// answered here, and nowhere else reads a code.
//
// Contract:
//   - KindOf sorts an error by what it means for a request sent again:
//     Retriable (kerr says so), Fenced (another producer owns the
//     transactional id, or the coordinator ended the transaction),
//     RecordRefused (a record's content), Refused (the request itself, for
//     good: authorisation, a topic or its settings), Other (anything else,
//     and every error that is not Kafka's). The codes of each kind are one
//     table (codes).
//   - The predicates answer the narrower questions the callers branch on
//     (a topic that exists, a group not found, a refusal that least
//     privilege allows...); each names the codes it reads.
//   - Nothing here knows the relay's policy (exit codes, retries): that is
//     internal/errclass, which builds on KindOf.
package kafkaerr

import (
	"errors"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Kind is what a Kafka error means for the request that got it.
type Kind uint8

const (
	// Other: not a Kafka error, or a non-retriable one that a new client
	// recovers from (TRANSACTION_ABORTABLE, UNKNOWN_PRODUCER_ID,
	// OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_SERVER_ERROR...).
	Other Kind = iota
	// Retriable: kerr calls it retriable (CORRUPT_MESSAGE among them: a
	// CRC broken on the way).
	Retriable
	// Fenced: the producer's epoch is no longer current: another instance
	// initialised the same transactional id, or the coordinator aborted the
	// transaction (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, and
	// INVALID_TXN_STATE, kfake's answer to a fenced commit and to a produce
	// into a transaction the coordinator aborted).
	Fenced
	// RecordRefused: a record refused for its content, as opposed to the
	// broker, the topic or the transaction.
	RecordRefused
	// Refused: the request itself, whenever it is sent: authorisation
	// (every *_AUTHORIZATION_FAILED and SASL_* answer), and the content of
	// a topic or its settings.
	Refused
)

// codes are the non-retriable codes of each kind but Other; the
// authorisation codes are Refused by their name (refusedByName).
var codes = map[int16]Kind{
	kerr.ProducerFenced.Code:       Fenced,
	kerr.InvalidProducerEpoch.Code: Fenced,
	kerr.InvalidTxnState.Code:      Fenced,

	kerr.MessageTooLarge.Code:    RecordRefused,
	kerr.RecordListTooLarge.Code: RecordRefused,
	kerr.InvalidRecord.Code:      RecordRefused,
	kerr.InvalidTimestamp.Code:   RecordRefused,

	kerr.InvalidTopicException.Code:       Refused,
	kerr.PolicyViolation.Code:             Refused,
	kerr.InvalidRequiredAcks.Code:         Refused,
	kerr.UnsupportedForMessageFormat.Code: Refused,
	kerr.UnsupportedCompressionType.Code:  Refused,
	kerr.InvalidPartitions.Code:           Refused,
	kerr.InvalidReplicationFactor.Code:    Refused,
	kerr.InvalidReplicaAssignment.Code:    Refused,
	kerr.InvalidConfig.Code:               Refused,
}

// KindOf is what err, or the Kafka error it wraps, means (Other when it
// wraps none).
func KindOf(err error) Kind {
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return Other
	}
	if ke.Retriable {
		return Retriable
	}
	if k, ok := codes[ke.Code]; ok {
		return k
	}
	if refusedByName(ke) {
		return Refused
	}
	return Other
}

// refusedByName reports an authorisation refusal.
func refusedByName(ke *kerr.Error) bool {
	return strings.HasSuffix(ke.Message, "_AUTHORIZATION_FAILED") || strings.HasPrefix(ke.Message, "SASL_")
}

// Kafka reports whether err wraps an error Kafka answered with.
func Kafka(err error) bool {
	var ke *kerr.Error
	return errors.As(err, &ke)
}

// Passing reports whether err may go away by itself: a retriable Kafka
// error, or not a Kafka error at all (a connection that failed).
func Passing(err error) bool {
	var ke *kerr.Error
	return !errors.As(err, &ke) || ke.Retriable
}

// Denied reports any authorisation refusal (*_AUTHORIZATION_FAILED).
func Denied(err error) bool {
	var ke *kerr.Error
	return errors.As(err, &ke) && strings.HasSuffix(ke.Message, "_AUTHORIZATION_FAILED")
}

// TopicOrClusterDenied reports TOPIC_AUTHORIZATION_FAILED or
// CLUSTER_AUTHORIZATION_FAILED: the principal may not describe or create.
func TopicOrClusterDenied(err error) bool {
	return errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed)
}

// TopicDenied reports TOPIC_AUTHORIZATION_FAILED.
func TopicDenied(err error) bool { return errors.Is(err, kerr.TopicAuthorizationFailed) }

// AdminRefused reports an answer to CreateTopics or DescribeConfigs that a
// principal without CREATE or DESCRIBE_CONFIGS gets, or that a topic
// policy gives (POLICY_VIOLATION): under least privilege the caller does
// without the request.
func AdminRefused(err error) bool {
	return TopicOrClusterDenied(err) || errors.Is(err, kerr.PolicyViolation)
}

// TopicExists reports TOPIC_ALREADY_EXISTS.
func TopicExists(err error) bool { return errors.Is(err, kerr.TopicAlreadyExists) }

// ErrUnknownTopic is Kafka's UNKNOWN_TOPIC_OR_PARTITION, for answers that
// lack a topic without saying so.
var ErrUnknownTopic error = kerr.UnknownTopicOrPartition

// UnknownTopic reports UNKNOWN_TOPIC_OR_PARTITION.
func UnknownTopic(err error) bool { return errors.Is(err, kerr.UnknownTopicOrPartition) }

// InvalidReplicationFactor reports INVALID_REPLICATION_FACTOR (also the
// answer while the brokers are registered but not yet available).
func InvalidReplicationFactor(err error) bool { return errors.Is(err, kerr.InvalidReplicationFactor) }

// Unsupported reports UNSUPPORTED_VERSION: the brokers do not know the
// request.
func Unsupported(err error) bool { return errors.Is(err, kerr.UnsupportedVersion) }

// GroupUnknown reports GROUP_ID_NOT_FOUND.
func GroupUnknown(err error) bool { return errors.Is(err, kerr.GroupIDNotFound) }

// GroupDenied reports GROUP_AUTHORIZATION_FAILED.
func GroupDenied(err error) bool { return errors.Is(err, kerr.GroupAuthorizationFailed) }

// TxnIDUnknown reports TRANSACTIONAL_ID_NOT_FOUND.
func TxnIDUnknown(err error) bool { return errors.Is(err, kerr.TransactionalIDNotFound) }

// TxnIDDenied reports TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
func TxnIDDenied(err error) bool { return errors.Is(err, kerr.TransactionalIDAuthorizationFailed) }

// CoordinatorMoving reports a coordinator not available, loading or moved
// (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS,
// NOT_COORDINATOR): asked again, it answers.
func CoordinatorMoving(err error) bool {
	return errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.CoordinatorLoadInProgress) ||
		errors.Is(err, kerr.NotCoordinator)
}

// FromCode is the error of a response's error code (nil for 0).
func FromCode(code int16) error { return kerr.ErrorForCode(code) }

// Membership is what a lock group's error means for the member.
type Membership uint8

const (
	// MemberRetry: the group client retries it.
	MemberRetry Membership = iota
	// MemberBadSession: the broker refuses the session timeout
	// (INVALID_SESSION_TIMEOUT: outside group.min/max.session.timeout.ms).
	MemberBadSession
	// MemberReplaced: a newer member joined with this member's instance id
	// (FENCED_INSTANCE_ID).
	MemberReplaced
	// MemberRefused: the group or topic may not be used
	// (GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED,
	// INVALID_GROUP_ID).
	MemberRefused
)

// MembershipOf is what a lock group's error means for the member.
func MembershipOf(err error) Membership {
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return MemberRetry
	}
	switch ke.Code {
	case kerr.InvalidSessionTimeout.Code:
		return MemberBadSession
	case kerr.FencedInstanceID.Code:
		return MemberReplaced
	case kerr.GroupAuthorizationFailed.Code, kerr.TopicAuthorizationFailed.Code, kerr.InvalidGroupID.Code:
		return MemberRefused
	}
	return MemberRetry
}

// TakenOver reports whether err, a transactional produce's or commit's,
// says that another producer of the same transactional id ended the
// transaction: a Fenced answer, INVALID_PRODUCER_ID_MAPPING or
// TRANSACTION_ABORTABLE.
func TakenOver(err error) bool {
	return KindOf(err) == Fenced || errors.Is(err, kerr.InvalidProducerIDMapping) || errors.Is(err, kerr.TransactionAbortable)
}
