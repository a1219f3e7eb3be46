package config

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

var lineRef = regexp.MustCompile(` \(line \d+\)`)

// Each configuration that would route every row into the relay's own
// topics, or Kafka's, is refused for that reason, at the key that says it;
// one where only a crafted aggregate type reaches one (an empty prefix: the
// aggregate type is the topic; a prefix next to the checkpoint topic) is
// allowed: such a row is a bad row at run time.
func TestValidateRefusesTopicsThatReachTheRelaysOwn(t *testing.T) {
	lookup := env(map[string]string{"RELAY_MYSQL_PASSWORD": "s3cret"})
	for file, want := range map[string]string{
		"topic-prefix-relay-namespace.bad.yaml":           `router.topic_prefix: "outbox-relay.": every row would be routed to outbox-relay.*`,
		"topic-prefix-kafka-internal.bad.yaml":            `router.topic_prefix: "__": every row would be routed to __*`,
		"topic-prefix-next-to-checkpoint-topic.good.yaml": "",
		"topic-replacement-kafka-internal.bad.yaml":       `router.topic_replacement: "__consumer_offsets": topic __consumer_offsets starts with "__"`,
		"dead-letter-topic-is-checkpoint-topic.bad.yaml":  `router.dead_letter_topic: "outbox-relay.checkpoints": is the checkpoint or lock topic`,
		"dead-letter-topic-of-another-pipeline.bad.yaml":  `router.dead_letter_topic: "outbox-relay.dead-letter.other": is in the relay's namespace`,
		"per-table-topic-prefix-reserved.bad.yaml":        `router.tables.app.outbox.topic_prefix: "outbox-relay.lock.": every row would be routed to outbox-relay.*`,
		"topic-prefix-empty.good.yaml":                    "",
		"topic-replacement-own-dead-letter.good.yaml":     "",
	} {
		raw, err := os.ReadFile("testdata/" + file)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Parse(raw, lookup)
		msg := ""
		if err != nil {
			msg = lineRef.ReplaceAllString(err.Error(), "")
		}
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v, want valid", file, err)
		case want != "" && !strings.Contains(msg, want):
			t.Errorf("%s: %v\nwant an error containing %s", file, err, want)
		}
	}
}

func TestReservedTopicsAreThePipelinesOwnAndTheNamespaces(t *testing.T) {
	cfg := Default()
	cfg.Name = "alarms"
	cfg.Source.Tables = []string{"app.a", "app.b"}
	cfg.Kafka.CheckpointTopic = "cp"
	cfg.HA.LockTopic = "lock"
	cfg.Router.Tables = map[string]RouterConfig{"app.b": {DeadLetterTopic: "dlq.b"}}
	res := cfg.ReservedTopics()
	for _, topic := range []string{"cp", "lock", "dlq.b", "outbox-relay.dead-letter.alarms", "outbox-relay.dead-letter.other",
		"outbox-relay.checkpoints", "outbox-relay.lock.alarms", "__consumer_offsets"} {
		if res.Refuses(topic) == "" {
			t.Errorf("%s is not reserved", topic)
		}
	}
	if got := cfg.DeadLetterTopicFor("app.a"); got != "outbox-relay.dead-letter.alarms" {
		t.Errorf("dead-letter topic of app.a %q", got)
	}
}
