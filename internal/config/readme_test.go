package config

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// readmeBlock returns the code block of README.md that follows the marker
// comment <!-- marker... -->.
func readmeBlock(t *testing.T, marker string) []byte {
	t.Helper()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- " + regexp.QuoteMeta(marker) + "[^>]*-->\\n```[a-z]*\\n(.*?)```").FindSubmatch(raw)
	if m == nil {
		t.Fatalf("README.md has no code block after <!-- %s -->", marker)
	}
	return m[1]
}

// TestReadmeRelayConfigLoads: the annotated relay.yaml of the README's
// "against your own server" loads and validates with only the password
// exported, and takes the hosts and brokers from variables when set.
func TestReadmeRelayConfigLoads(t *testing.T) {
	raw := readmeBlock(t, "readme-relay-yaml")
	c, err := Parse(raw, env(map[string]string{"RELAY_MYSQL_PASSWORD": "pw"}))
	if err != nil {
		t.Fatalf("the README's relay.yaml: %v", err)
	}
	if !slices.Equal(c.Source.Hosts, []string{"127.0.0.1:3306"}) || !slices.Equal(c.Source.Tables, []string{"app.outbox"}) {
		t.Fatalf("hosts %q tables %q", c.Source.Hosts, c.Source.Tables)
	}
	c, err = Parse(raw, env(map[string]string{"RELAY_MYSQL_PASSWORD": "pw", "MYSQL_HOSTS": "db1:3306,db2:3306", "KAFKA_BROKERS": "k1:9092,k2:9092"}))
	if err != nil || len(c.Source.Hosts) != 2 || len(c.Kafka.Brokers) != 2 {
		t.Fatalf("hosts %q brokers %q: %v", c.Source.Hosts, c.Kafka.Brokers, err)
	}
	// The comment's list written in place of the variable, as it says.
	literal := regexp.MustCompile(`\$\{MYSQL_HOSTS:-[^}]*\}`).ReplaceAll(raw, []byte("db1:3306,db2:3306"))
	if c, err = Parse(literal, env(map[string]string{"RELAY_MYSQL_PASSWORD": "pw"})); err != nil || !slices.Equal(c.Source.Hosts, []string{"db1:3306", "db2:3306"}) {
		t.Fatalf("hosts: db1:3306,db2:3306 as the README's comment says: hosts %q: %v", c.Source.Hosts, err)
	}
	if err := validateYAML(compiledSchema(t), raw); err != nil {
		t.Fatalf("the schema refuses the README's relay.yaml: %v", err)
	}
}
