package relay

import (
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/router"
	"github.com/outbox-relay/outbox-relay/source"
)

func TestFatalErrors(t *testing.T) {
	for _, err := range []error{
		errclass.Kafka(kerr.ProducerFenced), errclass.Kafka(fmt.Errorf("x: %w", kerr.InvalidProducerEpoch)),
		fmt.Errorf("route: %w", router.ErrBadRow), binlog.ErrPurged, source.ErrServerConfig, ErrFlavorMismatch,
		errclass.Kafka(fmt.Errorf("produce: %w", kerr.MessageTooLarge)), errclass.Kafka(kerr.TopicAuthorizationFailed),
	} {
		if !errclass.Fatal(err) {
			t.Errorf("%v should be fatal", err)
		}
	}
	for _, err := range []error{source.ErrUnreachable, ErrKafkaUnreachable, errors.New("broken pipe"),
		fmt.Errorf("%w: eof", errSourceStream), kerr.NotLeaderForPartition} {
		if errclass.Fatal(err) {
			t.Errorf("%v should be retried", err)
		}
	}
	if !errors.Is(errclass.Kafka(fmt.Errorf("end: %w", kerr.InvalidTxnState)), ErrFenced) {
		t.Error("INVALID_TXN_STATE (kfake's answer to a fenced commit) is not ErrFenced")
	}
	if !errors.Is(errclass.Kafka(kerr.ProducerFenced), ErrFenced) {
		t.Error("classify does not wrap ErrFenced")
	}
}
