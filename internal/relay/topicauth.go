package relay

import (
	"fmt"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/errclass"
)

// Least privilege on Kafka: with topics created beforehand, the relay's
// principal needs WRITE on the event topics, READ and WRITE on the
// checkpoint topic, and WRITE on its transactional id. Creating a topic and
// describing its configuration are then best effort: the broker's refusal
// is logged once per topic and the relay goes on with what metadata says
// (partition counts) and franz-go's defaults (the record size bound).

// noteCreateRefused logs that creating topic was refused although the
// topic exists: once per sink and topic (the sink caches what it learnt).
func noteCreateRefused(log zerolog.Logger, topic string, createErr error) {
	log.Warn().Str("topic", topic).AnErr("refused", createErr).
		Msg("kafka refused to create the topic (no CREATE permission, or a topic policy): using it as it exists; create topics beforehand to silence this")
}

// missingTopic is the error for a topic that does not exist when the
// broker refused to create it.
func missingTopic(topic string, createErr, describeErr error) error {
	return fmt.Errorf("%w: topic %s does not exist and creating it was refused (%v): create it beforehand, or grant the relay's principal CREATE: %w",
		errclass.ErrRejected, topic, createErr, describeErr)
}
