// Package errclass is the relay's error policy: every sentinel and error
// type the relay can end with has one Class, and every decision about an
// error is derived from its class here and nowhere else: whether it is
// fatal (Run returns it) or retried, whether the relay first commits what
// ended before it (StopsAtTransaction), the exit code of `run` (ExitCode)
// and the kind label of the relay_errors_total / relay_restarts_total
// metrics and of the logs (Kind). Kafka's error codes get their class
// through Kafka (internal/kafkaerr sorts the codes).
//
// The sentinels of the relay and of internal/ha carry their class (New,
// as franz-go's Kafka errors carry Retriable); those of binlog,
// checkpoint, schema, config, router and source, which must not know the
// relay's policy, are classified in one table (foreign). The relay's
// errclass_test.go parses those packages and fails on a sentinel or error
// type without a class.
package errclass

import (
	"errors"
	"fmt"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
	"github.com/outbox-relay/outbox-relay/router"
	"github.com/outbox-relay/outbox-relay/schema"
	"github.com/outbox-relay/outbox-relay/source"
)

// Class is what an error means for the run.
type Class uint8

// The classes, in ascending precedence: an error that wraps sentinels of
// several classes (a commit that failed after a stop, errors.Join) has the
// highest of them.
const (
	// Unclassified: no sentinel names it (a Kafka or network error):
	// retried like Transient.
	Unclassified Class = iota
	// Transient: retrying may fix it; the attempt ends and the next one
	// resumes from the committed checkpoint. Exit 75 if it ends the run.
	Transient
	// DataStop: a row, a transaction or the checkpoint the relay cannot
	// publish past. Fatal, at the transaction; exit 65.
	DataStop
	// Purged: the binlogs the checkpoint needs are gone. Fatal, at the
	// transaction; exit 66.
	Purged
	// ConfigStop: the configuration, or the source's or the checkpoint
	// topic's settings, are wrong. Fatal, at the transaction; exit 78.
	ConfigStop
	// Refused: Kafka refuses a request for good (authorisation, a topic).
	// Fatal, but not at a source transaction: the Kafka transaction it
	// was sent in is what failed. Exit 78.
	Refused
	// RecordRefused: Kafka refuses a record for its content although the
	// relay's checks passed it. Fatal, not at a transaction; exit 65.
	RecordRefused
	// Fenced: another producer took the transactional id over. Run returns
	// the instance to standby; exit 1 if it ends the run.
	Fenced
)

// Fatal reports whether errors of class c need an operator: retrying
// cannot fix them.
func (c Class) Fatal() bool { return c > Transient }

// StopsAtTransaction reports whether an error of class c stops the relay
// at a source transaction it cannot publish (a bad row, a shape it does not
// handle, a source or checkpoint it cannot go on from): the transactions
// that ended before it are committed first, so that the checkpoint is just
// before the one named (which `checkpoint skip` needs). Kafka's refusals
// and fences are not: nothing more may be committed.
func (c Class) StopsAtTransaction() bool {
	switch c {
	case DataStop, Purged, ConfigStop:
		return true
	}
	return false
}

// ExitCode is the exit status of `run` ending with an error of class c.
func (c Class) ExitCode() int {
	switch c {
	case DataStop, RecordRefused:
		return ExitData
	case Purged:
		return ExitPurged
	case ConfigStop, Refused:
		return ExitConfig
	case Fenced:
		return ExitError
	}
	return ExitTransient
}

// classified is a sentinel that carries its class and kind as data.
type classified struct {
	msg   string
	class Class
	kind  string
}

func (e *classified) Error() string { return e.msg }

// New returns a sentinel of class c, counted and logged as kind.
func New(c Class, kind, msg string) error { return &classified{msg: msg, class: c, kind: kind} }

// Carries reports whether err is a sentinel made by New.
func Carries(err error) bool {
	_, ok := err.(*classified)
	return ok
}

// rule classifies a sentinel (is) or an error type (as) of another package.
type rule struct {
	is    error
	as    func(error) bool
	class Class
	kind  string
}

// foreign classifies the other packages' sentinels and error types. Their
// wrappers (checkpoint.HeldBackError, NotTransactionalError,
// config.ValidationError, schema.ErrProvisional inside
// binlog.ErrSchemaMismatch) match through the sentinels they wrap.
var foreign = []rule{
	{is: router.ErrBadRow, class: DataStop, kind: "bad_row"},
	{is: binlog.ErrStatementLogged, class: DataStop, kind: "transaction_shape"},
	{is: binlog.ErrUnframed, class: DataStop, kind: "transaction_shape"},
	{is: binlog.ErrRolledBackRows, class: DataStop, kind: "transaction_shape"},
	{is: binlog.ErrMalformedRows, class: DataStop, kind: "transaction_shape"},
	{is: binlog.ErrPurged, class: Purged, kind: "purged"},
	{is: source.ErrUnreachable, class: Transient, kind: "source_unreachable"},
	{as: isNoAnswer, class: Transient, kind: "source_unreachable"},
	{is: binlog.ErrDuplicateServerID, class: ConfigStop, kind: "source_config"},
	{is: binlog.ErrPacketTooLarge, class: ConfigStop, kind: "source_config"},
	{is: binlog.ErrPacketBound, class: ConfigStop, kind: "source_config"},
	{is: binlog.ErrPayloadBound, class: ConfigStop, kind: "source_config"},
	{is: binlog.ErrPayloadCorrupt, class: DataStop, kind: "transaction_shape"},
	{is: binlog.ErrChecksumMismatch, class: DataStop, kind: "transaction_shape"},
	// A source whose answers go-mysql cannot read, or that would take more
	// memory than the bound: not a MySQL server the relay goes on with.
	{is: binlog.ErrAnswerBound, class: ConfigStop, kind: "source_config"},
	{is: binlog.ErrBrokenAnswer, class: ConfigStop, kind: "source_config"},
	{is: binlog.ErrMalformedEvent, class: ConfigStop, kind: "source_config"},
	{is: binlog.ErrInsecureLogin, class: ConfigStop, kind: "source_config"},
	{is: binlog.ErrPositionAhead, class: Transient, kind: "source_position"},
	{is: binlog.ErrPositionDiverged, class: DataStop, kind: "source_position"},
	{is: source.ErrForeignHistory, class: DataStop, kind: "source_position"},
	{is: source.ErrUnproven, class: Purged, kind: "purged"},
	{is: source.ErrNotInBinlogs, class: Transient, kind: "source_position"},
	// A binlog file asked for by name (checkpoint set --from-debezium's
	// walk; never the relay's stream, which reads by GTID) is gone.
	{is: source.ErrNoBinlogFile, class: DataStop, kind: "source_position"},
	{is: checkpoint.ErrCheckpointHeldBack, class: Transient, kind: "checkpoint_held_back"},
	{is: binlog.ErrAccessDenied, class: ConfigStop, kind: "source_config"},
	{is: source.ErrServerConfig, class: ConfigStop, kind: "source_config"},
	{is: source.ErrGrants, class: ConfigStop, kind: "source_config"},
	// Only the source sampler and preflight read the retention: a gauge
	// left unknown, a warning.
	{is: source.ErrRDSRetentionDenied, class: Transient, kind: "source_config"},
	{is: binlog.ErrNoColumnNames, class: ConfigStop, kind: "source_config"},
	// A session's binlog_row_image, met at its transaction: the start-up
	// check of the global value (source.ErrServerConfig) at run time.
	{is: binlog.ErrPartialRowImage, class: ConfigStop, kind: "source_config"},
	{is: binlog.ErrBadPosition, class: ConfigStop, kind: "source_config"},
	{is: binlog.ErrSchemaMismatch, class: DataStop, kind: "schema"},
	{is: binlog.ErrNoSignedness, class: DataStop, kind: "schema"},
	{is: schema.ErrUnparsed, class: DataStop, kind: "schema"},
	{is: schema.ErrProvisional, class: DataStop, kind: "schema"},
	// The reader skips an ignored statement; it never ends an attempt.
	{is: schema.ErrIgnored, class: Transient, kind: "schema"},
	{is: checkpoint.ErrCorrupt, class: DataStop, kind: "checkpoint"},
	{is: checkpoint.ErrNotTransactional, class: DataStop, kind: "checkpoint"},
	{is: checkpoint.ErrNewerFormat, class: DataStop, kind: "checkpoint"},
	{is: checkpoint.ErrLost, class: DataStop, kind: "checkpoint"},
	{is: checkpoint.ErrTopicLayout, class: ConfigStop, kind: "checkpoint"},
	{is: checkpoint.ErrTablesChanged, class: ConfigStop, kind: "checkpoint"},
	// Kafka has not yet made a committed checkpoint visible: Kafka's.
	{is: checkpoint.ErrNotVisible, class: Transient, kind: "kafka"},
	// A commit answered but not seen by the broker's log: the attempt ends
	// and the next one's fencing aborts the transaction.
	{is: checkpoint.ErrCommitNotProved, class: Transient, kind: "kafka"},
	{is: config.ErrInvalid, class: ConfigStop, kind: "config"},
}

func isNoAnswer(err error) bool {
	var na *binlog.NoAnswerError
	return errors.As(err, &na)
}

// Of returns err's class and kind: those of the highest class among the
// sentinels it wraps (of equal classes, a carried class first, then the
// first in foreign); ok is false when it wraps none (then Unclassified,
// "kafka").
func Of(err error) (c Class, kind string, ok bool) {
	c, kind = Unclassified, "kafka"
	walk(err, func(e error) {
		if s, is := e.(*classified); is && (!ok || s.class > c) {
			c, kind, ok = s.class, s.kind, true
		}
	})
	for _, r := range foreign {
		if ok && r.class <= c {
			continue
		}
		if r.is != nil && errors.Is(err, r.is) || r.as != nil && r.as(err) {
			c, kind, ok = r.class, r.kind, true
		}
	}
	return c, kind, ok
}

// walk calls f on err and every error it wraps, depth first.
func walk(err error, f func(error)) {
	if err == nil {
		return
	}
	f(err)
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		walk(u.Unwrap(), f)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			walk(e, f)
		}
	}
}

// ClassOf is err's class (Unclassified for nil or an error no sentinel
// names).
func ClassOf(err error) Class {
	c, _, _ := Of(err)
	return c
}

// Fatal reports whether err needs an operator; retrying cannot fix it.
func Fatal(err error) bool { return ClassOf(err).Fatal() }

// Kind names an error for metrics and logs.
func Kind(err error) string {
	_, k, _ := Of(err)
	return k
}

// StopsAtTransaction reports whether err stops the relay at a source
// transaction: see Class.StopsAtTransaction.
func StopsAtTransaction(err error) bool { return ClassOf(err).StopsAtTransaction() }

// ExitCode is the exit status of `run` for err (nil: ExitOK).
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	return ClassOf(err).ExitCode()
}

// Kafka's sentinels: what Kafka's answers become (Kafka).
var (
	// ErrKafkaUnreachable: no broker answered.
	ErrKafkaUnreachable = New(Transient, "kafka_unreachable", "kafka unreachable")
	// ErrFenced: another instance with the same name took over. Fatal: the
	// fenced instance must never commit again.
	ErrFenced = New(Fenced, "fenced", "producer fenced by another instance with the same name")
	// ErrRejected: Kafka refuses a record or topic for good (too large,
	// invalid, not authorised); retrying the same request cannot succeed.
	ErrRejected = New(Refused, "rejected", "kafka refused the request for good")
	// ErrRecordRefused: Kafka refused a record for its content (its size,
	// its timestamp, its form) although the relay's checks passed it. It
	// also wraps ErrRejected (fatal). A data stop: the operator looks at the
	// row or the topic's settings (docs/outbox-table.md "Record
	// timestamps").
	ErrRecordRefused = New(RecordRefused, "record_refused", "kafka refused a record")
)

// Kafka gives a Kafka error its class by what it means
// (kafkaerr.KindOf): a fence wraps ErrFenced, a refusal for good
// ErrRejected, a record refused for its content ErrRejected and
// ErrRecordRefused. Retriable errors, errors that are not Kafka's (a
// connection, a timeout) and the other non-retriable ones (a new client
// from the checkpoint recovers from them) are returned as they are: the
// attempt ends and the next one resumes from the checkpoint.
func Kafka(err error) error {
	switch kafkaerr.KindOf(err) {
	case kafkaerr.RecordRefused:
		return fmt.Errorf("%w: %w: %w", ErrRejected, ErrRecordRefused, err)
	case kafkaerr.Fenced:
		return fmt.Errorf("%w: %w", ErrFenced, err)
	case kafkaerr.Refused:
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	return err
}
