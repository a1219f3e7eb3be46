package router

import (
	"fmt"
	"strings"
)

// Topics a row may never be routed to.
//
// The relay produces its own records (checkpoints, dead letters) inside the
// same Kafka transactions as the rows' records, and Kafka keeps its own
// state in topics named "__..." (__consumer_offsets, __transaction_state).
// A row whose aggregate type names one of those topics (with an empty
// router.topic_prefix, or a topic_regex the value does not match, the
// value is the topic) would have the relay write a forged checkpoint or
// dead letter, or into Kafka's internals, with its own rights: such a row
// is a bad row, and a configuration whose fixed part already points into
// those names is refused by config.Validate (ReachableFrom).

// RelayNamespace is the prefix of every topic and group the relay names by
// default, for any pipeline: the checkpoint topic outbox-relay.checkpoints,
// the lock topic outbox-relay.lock and its groups outbox-relay.lock.<name>,
// the dead-letter topics outbox-relay.dead-letter.<name> (and their
// consumer groups).
const RelayNamespace = "outbox-relay."

// KafkaInternalPrefix starts the names of Kafka's own topics.
const KafkaInternalPrefix = "__"

// Reserved names the topics no routed record may go to: Names exactly (the
// pipeline's own checkpoint, lock and dead-letter topics, wherever they are
// configured) and every topic starting with one of Prefixes (any pipeline's
// default names, Kafka's internal topics). It is data: the relay passes
// its configuration's names in (see NewReserved).
type Reserved struct {
	Names    []string
	Prefixes []string
}

// NewReserved is the reserved set of a pipeline whose own topics are
// names (checkpoint, lock and dead-letter topics; empty strings are
// skipped): those, and every topic in RelayNamespace or starting with
// KafkaInternalPrefix.
func NewReserved(names ...string) Reserved {
	r := Reserved{Prefixes: []string{RelayNamespace, KafkaInternalPrefix}}
	for _, n := range names {
		if n != "" && r.prefixOf(n) == "" {
			r.Names = append(r.Names, n)
		}
	}
	return r
}

// prefixOf returns the prefix of r that topic starts with, "" if none.
func (r Reserved) prefixOf(topic string) string {
	for _, p := range r.Prefixes {
		if p != "" && strings.HasPrefix(topic, p) {
			return p
		}
	}
	return ""
}

// Refuses says why topic is reserved, "" when a record may go there.
func (r Reserved) Refuses(topic string) string {
	for _, n := range r.Names {
		if topic == n {
			return fmt.Sprintf("topic %s is one of the relay's own topics (checkpoint, lock or dead-letter): a row may not be routed there", topic)
		}
	}
	switch p := r.prefixOf(topic); p {
	case "":
		return ""
	case KafkaInternalPrefix:
		return fmt.Sprintf("topic %s starts with %q, the prefix of Kafka's internal topics: a row may not be routed there", clip(topic), p)
	default:
		return fmt.Sprintf("topic %s starts with %q, the relay's own topics' prefix: a row may not be routed there", clip(topic), p)
	}
}

// Confines returns the reserved prefix that every topic made of head and
// a row's value starts with ("" when a value can lead elsewhere): head is
// the fixed start of every routed topic (router.topic_prefix, or the text
// of topic_replacement before its first group reference). A head that only
// lets a crafted value reach a reserved topic (the empty prefix, a prefix
// one value away from the dead-letter topic) confines nothing: such rows
// are refused one by one (Refuses).
func (r Reserved) Confines(head string) string {
	if p := r.prefixOf(head); p != "" {
		return p + "*"
	}
	return ""
}
