package clients

import (
	"reflect"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/router"
)

// The binlog connection takes every source setting: hosts and login,
// the waits' bounds, the login guards and what the stream accepts.
func TestSourceSettings(t *testing.T) {
	cfg := config.Default()
	cfg.Source.Hosts = []string{"db1:3306", "db2:3306"}
	cfg.Source.User, cfg.Source.Password, cfg.Source.ServerID = "relay", "pw", 4242
	cfg.Source.Flavor = "mariadb"
	cfg.Source.Tables = []string{"app.outbox"}
	cfg.Source.ConnectTimeout, cfg.Source.QueryTimeout, cfg.Source.HeartbeatPeriod = 3*time.Second, 4*time.Second, 5*time.Second
	cfg.Source.StatementDML = config.StatementDMLWarn
	cfg.Source.AllowCleartextPassword, cfg.Source.AllowPublicKeyRetrieval = true, true
	cfg.Source.MaxPacketBytes = 1 << 20
	cfg.Source.TLS = config.TLS{Enabled: true, ServerName: "db.example"}
	got, err := Source(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.TLS == nil || got.TLS.ServerName != "db.example" {
		t.Fatalf("tls: %+v", got.TLS)
	}
	got.TLS = nil
	want := binlog.Config{Hosts: cfg.Source.Hosts, User: "relay", Password: "pw", ServerID: 4242, Flavor: "mariadb",
		Tables: cfg.Source.Tables, ConnectTimeout: 3 * time.Second, QueryTimeout: 4 * time.Second, HeartbeatPeriod: 5 * time.Second,
		AllowStatementDML: true, AllowCleartextPassword: true, AllowPublicKeyRetrieval: true, MaxPacketBytes: 1 << 20}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("source settings:\n got %+v\nwant %+v", got, want)
	}
	cfg.Source.StatementDML = config.StatementDMLFail
	cfg.Source.ServerPublicKeyFile = t.TempDir() + "/missing.der"
	if _, err := Source(cfg); err == nil {
		t.Fatal("a missing source.server_public_key_file is no error")
	}
}

// The router takes every one of a table's router settings.
func TestRouterSettings(t *testing.T) {
	c := config.RouterConfig{EventIDColumn: "id", AggregateTypeColumn: "at", AggregateIDColumn: "aid", EventTypeColumn: "et",
		PayloadColumn: "p", TimestampColumn: "ts", SchemaVersionColumn: "sv", TopicPrefix: "x.", ValueFormat: "envelope",
		NullPayload: "error", TopicRegex: "^(.*)$", TopicReplacement: "events.$1", AdditionalMissing: "skip",
		AdditionalFields: []config.AdditionalField{{Column: "tenant", Placement: "header", Alias: "t"}}}
	got, err := Router(c)
	if err != nil {
		t.Fatal(err)
	}
	if got.TopicRegex == nil || got.TopicRegex.String() != "^(.*)$" {
		t.Fatalf("topic regex: %v", got.TopicRegex)
	}
	got.TopicRegex = nil
	want := router.Config{EventIDColumn: "id", AggregateTypeColumn: "at", AggregateIDColumn: "aid", EventTypeColumn: "et",
		PayloadColumn: "p", TimestampColumn: "ts", SchemaVersionColumn: "sv", TopicPrefix: "x.", Format: "envelope",
		NullPayloadError: true, TopicReplacement: "events.$1", SkipMissingAdditional: true,
		Additional: []router.Field{{Column: "tenant", Placement: "header", Alias: "t"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("router settings:\n got %+v\nwant %+v", got, want)
	}
	if _, err := Router(config.RouterConfig{TopicRegex: "("}); err == nil {
		t.Fatal("a bad topic_regex is no error")
	}
}
