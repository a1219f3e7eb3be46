package config

import (
	"testing"

	"gopkg.in/yaml.v3"
)

// A configuration written out (run --print-config, the test harness) loads
// again, per-table router settings included.
func TestMarshalledConfigLoads(t *testing.T) {
	c := Default()
	c.Name = "x"
	c.Source.Hosts = []string{"127.0.0.1:3306"}
	c.Source.User = "u"
	c.Source.ServerID = 5
	c.Source.Tables = []string{"a.outbox", "a.b"}
	c.Kafka.Brokers = []string{"127.0.0.1:9092"}
	c.Router.Tables = map[string]RouterConfig{"a.b": {TopicPrefix: "p."}}
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(out, func(string) (string, bool) { return "", false }); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
