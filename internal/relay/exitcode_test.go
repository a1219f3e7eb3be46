package relay

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

func TestExitCode(t *testing.T) {
	wrap := func(e error) error { return fmt.Errorf("attempt: %w", e) }
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{wrap(config.ErrInvalid), ExitConfig},
		{wrap(binlog.ErrGrants), ExitConfig},
		{wrap(ErrFlavorMismatch), ExitConfig},
		{wrap(ErrBadRow), ExitData},
		{wrap(binlog.ErrStatementLogged), ExitData},
		{wrap(binlog.ErrUnframed), ExitData},
		{wrap(binlog.ErrRolledBackRows), ExitData},
		{wrap(ErrUnknownXA), ExitData},
		{wrap(binlog.ErrPositionDiverged), ExitData},
		{wrap(binlog.ErrPurged), ExitPurged},
		{wrap(ErrKafkaUnreachable), ExitTransient},
		{wrap(binlog.ErrUnreachable), ExitTransient},
		{wrap(ErrLeaseLost), ExitTransient},
		{wrap(context.DeadlineExceeded), ExitTransient},
		{wrap(ErrFenced), ExitError},
		// A record refused for its content is a data stop; a refusal of a
		// topic or an authorisation stays a configuration one.
		{wrap(classify(kerr.InvalidTimestamp)), ExitData},
		{wrap(classify(kerr.MessageTooLarge)), ExitData},
		{wrap(classify(kerr.TopicAuthorizationFailed)), ExitConfig},
	} {
		if got := ExitCode(c.err); got != c.want {
			t.Errorf("ExitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
	if ExitCode(errors.New("x")) == ExitOK {
		t.Error("an error exits 0")
	}
}
