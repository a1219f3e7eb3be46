package relay

import (
	"errors"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/ha"
	"github.com/outbox-relay/outbox-relay/router"
	"github.com/outbox-relay/outbox-relay/schema"
	"github.com/outbox-relay/outbox-relay/source"
)

// The error policy: every sentinel the relay can end with has one Class,
// and the decisions about an error are derived from its class here and
// nowhere else: whether it is fatal (Run returns it) or retried
// (fatal), whether the loop first commits what ended before it
// (stopsAtTransaction), the exit code of `run` (ExitCode) and the kind
// label of the relay_errors_total / relay_restarts_total metrics and
// of the logs (kind).
//
// This package's sentinels carry their class and kind (classified, made
// by newError); the sentinels of binlog, checkpoint, schema, config,
// router and ha, which must not know the relay's policy, are classified in
// foreign. errclass_test.go parses those packages and fails on a sentinel
// or error type without a class.

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
// that ended before it are committed first (loop.stop), so that the
// checkpoint is just before the one named (which `checkpoint skip` needs).
// Kafka's refusals and fences are not: nothing more may be committed.
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

// classified is a sentinel of this package: its class and kind are data
// on the error (like franz-go's kerr.Error carries Retriable).
type classified struct {
	msg   string
	class Class
	kind  string
}

func (e *classified) Error() string { return e.msg }

// newError returns a sentinel of class c, counted and logged as kind.
func newError(c Class, kind, msg string) error { return &classified{msg: msg, class: c, kind: kind} }

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
	{is: config.ErrInvalid, class: ConfigStop, kind: "config"},
	{is: ha.ErrLeaseLost, class: Transient, kind: "lease_lost"},
	{is: ha.ErrRelayLive, class: Transient, kind: "relay_live"},
}

func isNoAnswer(err error) bool {
	var na *binlog.NoAnswerError
	return errors.As(err, &na)
}

// classOf returns err's class and kind: those of the highest class among
// the sentinels it wraps (of equal classes, this package's first, then
// the first in foreign); ok is false when it wraps none (then Unclassified,
// "kafka").
func classOf(err error) (c Class, kind string, ok bool) {
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
	c, _, _ := classOf(err)
	return c
}

// fatal errors need an operator; retrying cannot fix them.
func fatal(err error) bool { return ClassOf(err).Fatal() }

// kind names an error for metrics and logs.
func kind(err error) string {
	_, k, _ := classOf(err)
	return k
}

// stopsAtTransaction reports whether err stops the relay at a source
// transaction: see Class.StopsAtTransaction.
func stopsAtTransaction(err error) bool { return ClassOf(err).StopsAtTransaction() }

// ExitCode is the exit status of `run` for err (nil: ExitOK).
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	return ClassOf(err).ExitCode()
}
