package relay

import (
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
)

// Partition counts of the output topics.
//
// A keyed record goes to murmur2(key) % partitions, so one aggregate stays
// in one partition only while its topic's partition count stays the same.
// Partitions added to a topic (kafka-topics --alter, CreatePartitions) would
// send an aggregate's later records elsewhere than its earlier ones, and a
// consumer would read them out of order. So the relay records, in each
// checkpoint, the count it places each output topic's keys by, and every
// attempt compares it with the topic's count when it first writes to it;
// while running, the partitioner sees the count franz-go's metadata refresh
// brings (within kafka's metadata.max.age, 5 min). What a difference does is
// kafka.on_partitions_added: keep (the default) places keys by the recorded
// count (the new partitions get no keyed records) and logs a warning; adopt
// takes the new count, from the next attempt; stop stops the relay
// (ErrPartitionsChanged). A topic with fewer partitions than recorded
// (deleted and created again) stops it unless adopt says otherwise.

// ErrPartitionsChanged: an output topic's partition count is not the one
// the checkpoint recorded and kafka.on_partitions_added does not allow
// going on (a configuration stop, exit 78).
var ErrPartitionsChanged = errclass.New(errclass.ConfigStop, "partitions_changed", "output topic partition count changed")

// placements holds, for one attempt, the partition count each output
// topic's keys are placed by. The loop's goroutine learns topics (learn);
// franz-go's goroutines read the counts in the partitioner.
type placements struct {
	policy config.PartitionsAdded
	log    zerolog.Logger

	mu       sync.Mutex
	recorded map[string]int32 // what the checkpoint recorded, then what this attempt uses; copied on write
	slots    map[string]*topicSlot

	changed atomic.Pointer[string] // a topic whose count changed while running, once noted
}

// topicSlot is one topic's count as the partitioner reads it.
type topicSlot struct {
	count  atomic.Int32 // 0: not placed by a recorded count (not learned yet)
	warned atomic.Bool  // a change seen while running was logged
}

func newPlacements(policy config.PartitionsAdded, log zerolog.Logger) *placements {
	if policy == "" {
		policy = config.PartitionsKeep
	}
	return &placements{policy: policy, log: log, slots: map[string]*topicSlot{}}
}

// load takes the counts a checkpoint recorded.
func (p *placements) load(recorded map[string]int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.recorded = recorded
}

// snapshot is the counts for the next checkpoint (nil: none); the map is
// never changed afterwards.
func (p *placements) snapshot() map[string]int32 {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.recorded
}

func (p *placements) slot(topic string) *topicSlot {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.slots[topic]
	if s == nil {
		s = &topicSlot{}
		p.slots[topic] = s
	}
	return s
}

// learn sets topic's count: actual, or the one recorded before, as
// kafka.on_partitions_added says, and returns it: the count the relay
// places topic's keys by. An error stops the relay.
func (p *placements) learn(topic string, actual int32) (int32, error) {
	if p == nil || actual <= 0 {
		return actual, nil
	}
	p.mu.Lock()
	recorded, ok := p.recorded[topic]
	p.mu.Unlock()
	use := actual
	switch {
	case !ok || recorded == actual:
	case p.policy == config.PartitionsAdopt:
		p.log.Warn().Str("topic", topic).Int32("recorded_partitions", recorded).Int32("partitions", actual).
			Msg("output topic partition count changed: adopting the new count (kafka.on_partitions_added: adopt); an aggregate's records from before this point may be in another partition than its later ones")
	case actual < recorded:
		return 0, fmt.Errorf("%w: topic %s has %d partitions, fewer than the %d the checkpoint places keys by (deleted and created again?): "+
			"create it again with %d partitions, or set kafka.on_partitions_added: adopt for one start to place keys by %d from now on",
			ErrPartitionsChanged, topic, actual, recorded, recorded, actual)
	case p.policy == config.PartitionsStop:
		return 0, fmt.Errorf("%w: topic %s has %d partitions, the checkpoint places keys by %d (kafka.on_partitions_added: stop): "+
			"set kafka.on_partitions_added: keep to go on with %d (no aggregate split), or adopt for one start to place keys by %d from now on",
			ErrPartitionsChanged, topic, actual, recorded, recorded, actual)
	default: // keep
		use = recorded
		p.log.Warn().Str("topic", topic).Int32("recorded_partitions", recorded).Int32("partitions", actual).
			Msg("output topic has more partitions than the checkpoint places keys by: keyed records keep going to the first recorded_partitions (murmur2(key) % recorded_partitions), so no aggregate is split; to spread them over all partitions, once consumers have read what was published, start once with kafka.on_partitions_added: adopt")
	}
	s := p.slot(topic)
	s.count.Store(use)
	s.warned.Store(false)
	if !ok || recorded != use {
		p.mu.Lock()
		next := maps.Clone(p.recorded)
		if next == nil {
			next = map[string]int32{}
		}
		next[topic] = use
		p.recorded = next
		p.mu.Unlock()
	}
	return use, nil
}

// observe compares the count keys of s are placed by (the learned count,
// by which the relay chose each record's partition) with n, the count
// franz-go knows when it sends a record of topic; a difference, seen once,
// is logged and noted for changedWhileRunning. The record keeps its
// partition: with fewer partitions than that (the topic created again while
// running) franz-go fails a record placed beyond n, and the attempt with
// it: the next one stops at the topic (learn), never placing a key
// elsewhere.
func (p *placements) observe(topic string, s *topicSlot, n int) {
	c := int(s.count.Load())
	if c == 0 || c == n {
		return
	}
	if !s.warned.Swap(true) {
		t := topic
		p.changed.CompareAndSwap(nil, &t)
		p.log.Warn().Str("topic", topic).Int("placed_partitions", c).Int("partitions", n).
			Msg("output topic partition count changed while running: keyed records keep going by the count this attempt started with (see kafka.on_partitions_added)")
	}
}

// changedWhileRunning is an error ending the attempt when a topic's count
// changed while running and kafka.on_partitions_added is not keep (adopt:
// the next attempt adopts it; stop: ErrPartitionsChanged); nil otherwise.
func (p *placements) changedWhileRunning() error {
	if p == nil {
		return nil
	}
	t := p.changed.Load()
	if t == nil {
		return nil
	}
	s := p.slot(*t)
	placed := s.count.Load()
	switch {
	case p.policy == config.PartitionsStop:
		return fmt.Errorf("%w: topic %s: its partition count changed while running, keys are placed by %d (kafka.on_partitions_added: stop): "+
			"set kafka.on_partitions_added: keep to go on with %d (no aggregate split), or adopt for one start", ErrPartitionsChanged, *t, placed, placed)
	case p.policy == config.PartitionsAdopt:
		return fmt.Errorf("topic %s: its partition count changed while running (kafka.on_partitions_added: adopt): starting again to adopt it", *t)
	}
	return nil
}

// Observe is topic's check for the producer's partitioner
// (clients.ObservedPartitioner): the count franz-go knows, compared with
// the learned one for each record.
func (p *placements) Observe(topic string) func(known int) {
	s := p.slot(topic)
	return func(known int) { p.observe(topic, s, known) }
}
