package debezium

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/clients"
)

// Found is where a walked row's record is in Kafka: the first record with
// its id header, and how many have it.
type Found struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Count     int    `json:"count"`
}

// Margin is how long before the earliest walked row's commit time (or its
// record's timestamp as the relay sets it) the output topics are read from:
// Debezium stamps a record with the time it read the change (after the
// commit), but the Connect worker's clock may run behind the database's.
const Margin = 10 * time.Minute

// Published reads the output topics of the walk's rows (read_committed,
// from Margin before the earliest row to their ends) and returns where the
// record of each walked row's event id is, by the "id" header the Outbox
// Event Router and the relay write. Records of other ids are passed over.
func Published(ctx context.Context, k clients.Kafka, timeout, wait time.Duration, rows []Row, warn func(string)) (map[string]Found, []string, error) {
	ids := make(map[string]bool, len(rows))
	topicSet := map[string]bool{}
	var since time.Time
	for _, r := range rows {
		if r.EventID != "" {
			ids[r.EventID] = true
		}
		if r.Topic != "" && r.Partition >= 0 {
			topicSet[r.Topic] = true
		}
		for _, t := range []time.Time{r.Tx.Time, r.Stamp} {
			if !t.IsZero() && (since.IsZero() || t.Before(since)) {
				since = t
			}
		}
	}
	topics := make([]string, 0, len(topicSet))
	for t := range topicSet {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	found := map[string]Found{}
	if len(topics) == 0 {
		return found, topics, nil
	}
	from, ends, err := clients.Range(ctx, k.Admin(), timeout, topics, since.Add(-Margin), wait, warn)
	if err != nil {
		return nil, nil, fmt.Errorf("read the output topics: %w", err)
	}
	err = clients.ReadRange(ctx, k, ends, from, func(r *kgo.Record) {
		for _, h := range r.Headers {
			if h.Key != "id" || !ids[string(h.Value)] {
				continue
			}
			f, ok := found[string(h.Value)]
			if !ok {
				f = Found{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
			}
			f.Count++
			found[string(h.Value)] = f
			return
		}
	}, kgo.FetchMaxBytes(1<<20), kgo.FetchMaxPartitionBytes(1<<20), kgo.MaxConcurrentFetches(1))
	if err != nil {
		return nil, nil, fmt.Errorf("read the output topics: %w", err)
	}
	return found, topics, nil
}
