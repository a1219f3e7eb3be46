package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/outbox-relay/outbox-relay/router"
)

// The relay's own topics, which no row may be routed to (router.Reserved):
// a configuration whose fixed part of the topic already points into them
// is refused here; a row that names one at run time is a bad row.

// DefaultDeadLetterPrefix starts the default dead-letter topic of every
// pipeline: outbox-relay.dead-letter.<name>.
const DefaultDeadLetterPrefix = router.RelayNamespace + "dead-letter."

// DeadLetterTopicFor is table's dead-letter topic (router.on_error
// dead-letter): its router.dead_letter_topic, else
// outbox-relay.dead-letter.<name>.
func (c Config) DeadLetterTopicFor(table string) string {
	if t := c.Router.For(table).DeadLetterTopic; t != "" {
		return t
	}
	return DefaultDeadLetterPrefix + c.Name
}

// ReservedTopics is what no routed record of this pipeline may be: its
// checkpoint, lock and dead-letter topics, any topic in the relay's
// namespace (outbox-relay.: every pipeline's default names) and Kafka's
// internal topics (__...).
func (c Config) ReservedTopics() router.Reserved {
	names := []string{c.Kafka.CheckpointTopic, c.HA.LockTopic}
	for _, t := range c.Source.Tables {
		names = append(names, c.DeadLetterTopicFor(t))
	}
	slices.Sort(names)
	return router.NewReserved(slices.Compact(names)...)
}

// topicHead is the fixed start of every topic r routes to, and whether
// there is one: topic_prefix, or the text of topic_replacement before its
// first $ under the default topic_regex (which matches every aggregate
// type Kafka takes as a topic). A custom topic_regex has none: a value it
// does not match is the topic as it is (Debezium's rule). constant is set
// when the replacement refers to no group: every topic is head.
func (r RouterConfig) topicHead() (head string, known, constant bool) {
	if r.TopicReplacement == "" {
		return r.TopicPrefix, true, false
	}
	if r.TopicRegex != "" {
		return "", false, false
	}
	i := strings.IndexByte(r.TopicReplacement, '$')
	if i < 0 {
		return r.TopicReplacement, true, true
	}
	return r.TopicReplacement[:i], true, false
}

// validateReserved checks that the topics of table's settings r (key:
// where they are, "router." or "router.tables.<t>.") are not all the
// relay's own or Kafka's by their configuration alone, and that its
// dead-letter topic is not another of the relay's topics. A configuration
// where only some aggregate types lead to a reserved topic (an empty
// prefix: the aggregate type is the topic; a dead-letter topic next to the
// event topics) is allowed: a row routed to one is a bad row at run time.
func (c Config) validateReserved(key string, r RouterConfig, res router.Reserved, bad func(string, ...any)) {
	head, known, constant := r.topicHead()
	field := "topic_prefix"
	if r.TopicReplacement != "" {
		field = "topic_replacement"
	}
	switch {
	case !known:
	case constant:
		if why := res.Refuses(head); why != "" {
			bad("%s%s: %q: %s", key, field, head, why)
		}
	default:
		if p := res.Confines(head); p != "" {
			bad("%s%s: %q: every row would be routed to %s, the relay's own topics or Kafka's, where no row may go: "+
				"choose a prefix outside %s* and %s*", key, field, head, p, router.RelayNamespace, router.KafkaInternalPrefix)
		}
	}
	if r.OnError != OnErrorDeadLetter || r.DeadLetterTopic == "" {
		return
	}
	dl := r.DeadLetterTopic
	switch {
	case dl == c.Kafka.CheckpointTopic || dl == c.HA.LockTopic:
		bad("%sdead_letter_topic: %q: is the checkpoint or lock topic: choose a topic of its own", key, dl)
	case strings.HasPrefix(dl, router.KafkaInternalPrefix):
		bad("%sdead_letter_topic: %q: starts with %q, the prefix of Kafka's internal topics", key, dl, router.KafkaInternalPrefix)
	case strings.HasPrefix(dl, router.RelayNamespace) && dl != DefaultDeadLetterPrefix+c.Name:
		bad("%sdead_letter_topic: %q: is in the relay's namespace (%s*), where only %s%s is this pipeline's: leave it empty for that one, or choose one outside",
			key, dl, router.RelayNamespace, DefaultDeadLetterPrefix, c.Name)
	}
}

// checkReservedNames reports reserved-topic problems of the router and its
// per-table entries.
func (c Config) checkReservedNames(tables []string, bad func(string, ...any)) {
	res := c.ReservedTopics()
	c.validateReserved("router.", c.Router, res, bad)
	for _, t := range tables {
		c.validateReserved(fmt.Sprintf("router.tables.%s.", t), c.Router.For(t), res, bad)
	}
}
