package preflight

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
)

// check lists ACL items for the topics of per-table prefixes and regexes
// too. The failure guarded against: checkACLs lists the event topics as the
// existing topics that start with the global router.topic_prefix: the
// topics of a table with its own topic_prefix, or of
// topic_regex/topic_replacement, get no "acl topic" item, so `check` cannot
// say their WRITE is missing (the relay then fails at its first record
// there). With topic_prefix "" every topic the principal sees counts as an
// event topic and needs WRITE, the lock topic (READ only) among them.
func TestACLItemsFollowPerTableTopics(t *testing.T) {
	kc := kafkatest.Cluster(t, kfake.NumBrokers(1))
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tp := range []string{"outbox.event.Order", "billing.Invoice", "events.Shipment", "outbox-relay.checkpoints", "outbox-relay.lock"} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, tp); err != nil {
			t.Fatal(err)
		}
	}
	raw := `name: a
source:
  hosts: ["db:3306"]
  user: r
  server_id: 7
  tables: [app.orders, app.billing, app.ship]
kafka:
  brokers: ["` + kc.ListenAddrs()[0] + `"]
router:
  tables:
    app.billing:
      topic_prefix: billing.
    app.ship:
      topic_regex: "^(.*)$"
      topic_replacement: "events.$1"
`
	cfg, err := config.Parse([]byte(raw), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	checkACLs(ctx, cl, cfg, topics, collector{target: "kafka", items: &r})
	names := map[string]bool{}
	for _, it := range r {
		names[it.Name] = true
	}
	for _, want := range []string{"acl topic outbox.event.Order", "acl topic billing.Invoice", "acl topic events.Shipment"} {
		if !names[want] {
			t.Errorf("no %q item: the relay writes there", want)
		}
	}

	cfg.Router.TopicPrefix = ""
	cfg.Router.Tables = nil
	r = nil
	checkACLs(ctx, cl, cfg, topics, collector{target: "kafka", items: &r})
	n := 0
	for _, it := range r {
		if it.Name == "acl topic outbox-relay.lock" {
			n++
			t.Logf("%s %s", it.Status, it.Detail)
		}
	}
	if n != 1 {
		var all []string
		for _, it := range r {
			all = append(all, it.Name)
		}
		t.Errorf("topic_prefix \"\": %d items for the lock topic (it needs READ only); items: %s", n, strings.Join(all, "; "))
	}
}
