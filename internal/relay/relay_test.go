package relay

import (
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/router"
	"github.com/outbox-relay/outbox-relay/source"
)

func TestFatalErrors(t *testing.T) {
	for _, err := range []error{
		classify(kerr.ProducerFenced), classify(fmt.Errorf("x: %w", kerr.InvalidProducerEpoch)),
		fmt.Errorf("route: %w", router.ErrBadRow), binlog.ErrPurged, source.ErrServerConfig, ErrFlavorMismatch,
		classify(fmt.Errorf("produce: %w", kerr.MessageTooLarge)), classify(kerr.TopicAuthorizationFailed),
	} {
		if !fatal(err) {
			t.Errorf("%v should be fatal", err)
		}
	}
	for _, err := range []error{source.ErrUnreachable, ErrKafkaUnreachable, errors.New("broken pipe"),
		fmt.Errorf("%w: eof", errSourceStream), kerr.NotLeaderForPartition} {
		if fatal(err) {
			t.Errorf("%v should be retried", err)
		}
	}
	if !errors.Is(classify(fmt.Errorf("end: %w", kerr.InvalidTxnState)), ErrFenced) {
		t.Error("INVALID_TXN_STATE (kfake's answer to a fenced commit) is not ErrFenced")
	}
	if !errors.Is(classify(kerr.ProducerFenced), ErrFenced) {
		t.Error("classify does not wrap ErrFenced")
	}
}
