package config

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestVariableDefaultsAndLists: ${VAR:-default} takes the default when VAR
// is unset or empty and VAR otherwise; a list key written as one variable
// is the variable's comma-separated list.
func TestVariableDefaultsAndLists(t *testing.T) {
	raw, err := os.ReadFile("testdata/env-default.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want func(Config) bool
	}{
		{"unset", map[string]string{}, func(c Config) bool {
			return c.Name == "alarms" && slices.Equal(c.Source.Hosts, []string{"db1:3306", "db2:3306"}) &&
				c.Source.ServerID == 4242 && slices.Equal(c.Kafka.Brokers, []string{"127.0.0.1:9092"}) &&
				c.Kafka.Batch.MaxWait == 50*time.Millisecond && c.Source.Password == ""
		}},
		{"empty", map[string]string{"RELAY_TEST_NAME": "", "RELAY_TEST_SERVER_ID": "", "RELAY_TEST_KAFKA_BROKERS": ""}, func(c Config) bool {
			return c.Name == "alarms" && c.Source.ServerID == 4242 && slices.Equal(c.Kafka.Brokers, []string{"127.0.0.1:9092"})
		}},
		{"set", map[string]string{
			"RELAY_TEST_NAME": "billing", "RELAY_TEST_SERVER_ID": "7", "RELAY_TEST_MAX_WAIT": "1s",
			"RELAY_TEST_KAFKA_BROKERS": "a:9092, b:9092,c:9093", "RELAY_TEST_DB_HOSTS": "db9:3306",
		}, func(c Config) bool {
			return c.Name == "billing" && c.Source.ServerID == 7 && c.Kafka.Batch.MaxWait == time.Second &&
				slices.Equal(c.Kafka.Brokers, []string{"a:9092", "b:9092", "c:9093"}) &&
				slices.Equal(c.Source.Hosts, []string{"db9:3306"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]string{"RELAY_MYSQL_PASSWORD": ""}
			for k, v := range tc.env {
				vars[k] = v
			}
			c, err := Parse(raw, env(vars))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.want(c) {
				t.Fatalf("got name %q hosts %q server_id %d brokers %q max_wait %s", c.Name, c.Source.Hosts, c.Source.ServerID, c.Kafka.Brokers, c.Kafka.Batch.MaxWait)
			}
		})
	}
	// $${VAR:-x} stays literal
	c, err := Parse([]byte(strings.Replace(string(raw), "user: relay", "user: $${RELAY_USER:-x}", 1)), env(map[string]string{"RELAY_MYSQL_PASSWORD": ""}))
	if err != nil || c.Source.User != "${RELAY_USER:-x}" {
		t.Fatalf("user %q, err %v: want the literal ${RELAY_USER:-x}", c.Source.User, err)
	}
}

// TestVariableListErrorShowsReference: a bad element of a list that came
// from one variable is named by its index and shown as ${VAR}, never by
// the value it holds (a secret in the wrong variable).
func TestVariableListErrorShowsReference(t *testing.T) {
	raw, err := os.ReadFile("testdata/env-list-element.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Parse(raw, env(map[string]string{"RELAY_MYSQL_PASSWORD": "127.0.0.1:9092,hunter2-secret"}))
	if err == nil {
		t.Fatal("want an error, got none")
	}
	msg := err.Error()
	if strings.Contains(msg, "hunter2") || !strings.Contains(msg, "kafka.brokers[1]") || !strings.Contains(msg, "${RELAY_MYSQL_PASSWORD}") {
		t.Fatalf("want kafka.brokers[1] shown as ${RELAY_MYSQL_PASSWORD} without its value, got:\n%s", msg)
	}
	_, err = Parse(raw, env(nil))
	if err == nil || !strings.Contains(err.Error(), "RELAY_MYSQL_PASSWORD is not set") {
		t.Fatalf("unset list variable: got %v", err)
	}
}

// TestOfflineParseNeedsNoSecrets: the offline parse (`schema`) needs
// neither the password's variable nor the files of secrets and
// certificates, and still reports the keys it reads and unknown keys.
func TestOfflineParseNeedsNoSecrets(t *testing.T) {
	raw := []byte(`name: alarms
source:
  hosts: ["db:3306"]
  user: relay
  password: ${RELAY_TEST_NEVER_SET}
  server_id: ${RELAY_TEST_NEVER_SET_ID}
  tls: {ca_file: /nonexistent/ca.pem}
  tables: ["app.outbox"]
kafka:
  brokers: ${RELAY_TEST_NEVER_SET_BROKERS}
  sasl: {mechanism: PLAIN, user: relay, password_file: /nonexistent/kafka-password}
`)
	if _, err := Parse(raw, env(nil)); err == nil {
		t.Fatal("Parse accepted unset variables: the test proves nothing")
	}
	c, err := ParseOffline(raw, env(nil))
	if err != nil {
		t.Fatalf("offline parse: %v", err)
	}
	if !slices.Equal(c.Source.Tables, []string{"app.outbox"}) {
		t.Fatalf("tables %q", c.Source.Tables)
	}
	for _, bad := range []string{
		strings.Replace(string(raw), `tables: ["app.outbox"]`, `tables: ["outbox"]`, 1),
		strings.Replace(string(raw), `tables: ["app.outbox"]`, `tables: ${RELAY_TEST_NEVER_SET_TABLES}`, 1),
		strings.Replace(string(raw), "  user: relay\n", "  usr: relay\n", 1),
		strings.Replace(string(raw), "server_id: ${RELAY_TEST_NEVER_SET_ID}", "server_id: many", 1),
		string(raw) + "router: {preset: nope}\n",
	} {
		if _, err := ParseOffline([]byte(bad), env(nil)); err == nil {
			t.Errorf("offline parse accepted:\n%s", bad)
		}
	}
}

// TestListWrittenAsOneValue: a list key written as one value, such as
// hosts: db1:3306,db2:3306, is that comma-separated list, as one variable
// holding it is (it was refused with "write a list" unless the whole value
// was a ${VAR}); a bad element is named by its index and line.
func TestListWrittenAsOneValue(t *testing.T) {
	raw, err := os.ReadFile("testdata/list-one-value.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(raw, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Source.Hosts, []string{"db1:3306", "db2:3306"}) || !slices.Equal(c.Source.Tables, []string{"app.outbox", "billing.outbox"}) ||
		!slices.Equal(c.Kafka.Brokers, []string{"k1:9092", "k2:9092"}) {
		t.Fatalf("hosts %q tables %q brokers %q", c.Source.Hosts, c.Source.Tables, c.Kafka.Brokers)
	}
	raw, err = os.ReadFile("testdata/list-one-value-element.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Parse(raw, env(nil))
	if err == nil || !strings.Contains(err.Error(), `source.hosts[1] (line 5): "db2"`) {
		t.Fatalf("got %v, want source.hosts[1] (line 5) named", err)
	}
}
