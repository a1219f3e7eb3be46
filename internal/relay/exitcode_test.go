package relay

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/ha"
	"github.com/outbox-relay/outbox-relay/schema"
	"github.com/outbox-relay/outbox-relay/source"
)

func TestExitCode(t *testing.T) {
	wrap := func(e error) error { return fmt.Errorf("attempt: %w", e) }
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{wrap(config.ErrInvalid), ExitConfig},
		{wrap(source.ErrGrants), ExitConfig},
		{wrap(ErrFlavorMismatch), ExitConfig},
		{wrap(ErrBadRow), ExitData},
		{wrap(binlog.ErrStatementLogged), ExitData},
		{wrap(binlog.ErrUnframed), ExitData},
		{wrap(binlog.ErrRolledBackRows), ExitData},
		{wrap(ErrUnknownXA), ExitData},
		{wrap(binlog.ErrPositionDiverged), ExitData},
		{wrap(binlog.ErrPurged), ExitPurged},
		{wrap(ErrKafkaUnreachable), ExitTransient},
		{wrap(source.ErrUnreachable), ExitTransient},
		{wrap(ha.ErrLeaseLost), ExitTransient},
		{wrap(context.DeadlineExceeded), ExitTransient},
		{wrap(ErrFenced), ExitError},
		// A record refused for its content is a data stop; a refusal of a
		// topic or an authorisation stays a configuration one.
		{wrap(errclass.Kafka(kerr.InvalidTimestamp)), ExitData},
		{wrap(errclass.Kafka(kerr.MessageTooLarge)), ExitData},
		{wrap(errclass.Kafka(kerr.TopicAuthorizationFailed)), ExitConfig},
		// The rest of each exit code's sentinels.
		{wrap(binlog.ErrAccessDenied), ExitConfig},
		{wrap(source.ErrServerConfig), ExitConfig},
		{wrap(binlog.ErrNoColumnNames), ExitConfig},
		{wrap(binlog.ErrPartialRowImage), ExitConfig},
		{wrap(binlog.ErrBadPosition), ExitConfig},
		{wrap(binlog.ErrDuplicateServerID), ExitConfig},
		{wrap(binlog.ErrPacketTooLarge), ExitConfig},
		{wrap(binlog.ErrPacketBound), ExitConfig},
		{wrap(binlog.ErrInsecureLogin), ExitConfig},
		{wrap(ErrRejected), ExitConfig},
		{wrap(ErrPartitionsChanged), ExitConfig},
		{wrap(checkpoint.ErrTopicLayout), ExitConfig},
		{wrap(checkpoint.ErrTablesChanged), ExitConfig},
		{wrap(ErrInvalidOp), ExitData},
		{wrap(binlog.ErrSchemaMismatch), ExitData},
		{wrap(binlog.ErrNoSignedness), ExitData},
		{wrap(schema.ErrUnparsed), ExitData},
		{wrap(checkpoint.ErrCorrupt), ExitData},
		{wrap(checkpoint.ErrLost), ExitData},
		{wrap(binlog.ErrPositionAhead), ExitTransient},
		{wrap(ErrTxnTimedOut), ExitTransient},
		{wrap(checkpoint.ErrCheckpointHeldBack), ExitTransient},
	} {
		if got := ExitCode(c.err); got != c.want {
			t.Errorf("ExitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
	if ExitCode(errors.New("x")) == ExitOK {
		t.Error("an error exits 0")
	}
}
