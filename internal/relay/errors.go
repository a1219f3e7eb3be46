package relay

import "github.com/outbox-relay/outbox-relay/internal/errclass"

// The relay's error policy is internal/errclass: every sentinel has a
// class there, and whether an error is fatal, stops at a source
// transaction, which exit code `run` returns and which kind label metrics
// and logs give it all derive from that class. The relay's own sentinels
// are made with errclass.New; errclass_test.go fails on one without.

// Exit codes of `run` (errclass's), for supervisors.
const (
	ExitOK        = errclass.ExitOK
	ExitError     = errclass.ExitError
	ExitUsage     = errclass.ExitUsage
	ExitData      = errclass.ExitData
	ExitPurged    = errclass.ExitPurged
	ExitTransient = errclass.ExitTransient
	ExitConfig    = errclass.ExitConfig
)

// ExitCode is the exit status of `run` for err (nil: ExitOK).
func ExitCode(err error) int { return errclass.ExitCode(err) }

// Kafka's sentinels (errclass's), which callers branch on.
var (
	// ErrKafkaUnreachable: no broker answered.
	ErrKafkaUnreachable = errclass.ErrKafkaUnreachable
	// ErrFenced: another instance with the same name took over.
	ErrFenced = errclass.ErrFenced
	// ErrRejected: Kafka refuses a record or topic for good.
	ErrRejected = errclass.ErrRejected
	// ErrRecordRefused: Kafka refused a record for its content although the
	// relay's checks passed it (recordcheck.go).
	ErrRecordRefused = errclass.ErrRecordRefused
)
