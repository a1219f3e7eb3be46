package relay

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/router"
)

// Records the broker refuses for what they are.
//
// A topic refuses a record for its own content: larger than the topic's
// max.message.bytes, or (message.timestamp.type CreateTime) a timestamp
// further ahead of the broker's clock than message.timestamp.after.max.ms
// (Apache Kafka 4: 1 h by default) or further behind than
// message.timestamp.before.max.ms. Inside a Kafka transaction one refused
// record fails the whole transaction, the valid records before it with it,
// and every restart would meet it again. So the relay learns these settings
// with the topic (DescribeConfigs, catalog.ensure) and checks each record
// before producing it: a record the topic would refuse is a bad row (named
// with table, event id, GTID and topic, and subject to router.on_error),
// and the rows before it are published. A refusal the checks did not
// foresee (a setting changed while the relay ran, the broker's clock off
// from the relay's) ends the attempt once: the next one reads the topics'
// settings again (sizeRefused); the same refusal again stops the relay with
// ErrRecordRefused (exit 65), naming the topic, partition and the event ids
// of the refused batch.

// checkStamp is a bad row when topic (as last read) would refuse rec's
// timestamp.
func checkStamp(rec *kgo.Record, info topicInfo) error {
	if !info.stamps.bounded() {
		return nil
	}
	if why := info.stamps.refuses(rec.Timestamp, time.Now()); why != "" {
		return fmt.Errorf("%w: topic %s would refuse the record: %s; fix the source's clock or router.timestamp_column, or the topic's setting (docs/outbox-table.md \"Record timestamps\")",
			router.ErrBadRow, rec.Topic, why)
	}
	return nil
}
