package preflight

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// The topics a router can name: prefix, or the replacement with its group
// references standing for any text.
func TestTopicMatcher(t *testing.T) {
	for _, tc := range []struct {
		rc    config.RouterConfig
		yes   []string
		notes []string
	}{
		{config.RouterConfig{TopicPrefix: "outbox.event."}, []string{"outbox.event.Order"}, []string{"billing.Order", "outbox.eventX"}},
		{config.RouterConfig{TopicReplacement: "events.${routedByValue}"}, []string{"events.Order"}, []string{"outbox.event.Order", "xevents.Order"}},
		{config.RouterConfig{TopicRegex: "^(.*)$", TopicReplacement: "events.$1"}, []string{"events.Order"}, []string{"events-Order"}},
		{config.RouterConfig{TopicRegex: "(Order)", TopicReplacement: "o.$1"}, []string{"o.Order", "Big.o.Order.s"}, []string{"Order"}},
		{config.RouterConfig{TopicRegex: "^(.*)$", TopicReplacement: "a$$b.$1"}, []string{"a$b.x"}, []string{"ab.x"}},
	} {
		m := topicMatcher(tc.rc)
		for _, n := range tc.yes {
			if !m(n) {
				t.Errorf("%+v: %s not matched", tc.rc, n)
			}
		}
		for _, n := range tc.notes {
			if m(n) {
				t.Errorf("%+v: %s matched", tc.rc, n)
			}
		}
	}
}
