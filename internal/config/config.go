// Package config holds the relay's one configuration struct, its defaults,
// YAML loading with ${VAR} expansion, and Validate.
//
// Load never logs and never returns secrets inside errors; Redacted returns a
// copy safe to print.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Delivery guarantees.
const (
	ExactlyOnce = "exactly-once"
	AtLeastOnce = "at-least-once"
)

// What a statement-logged change of a table that is not captured does
// (source.statement_dml).
const (
	// StatementDMLFail stops the relay: a trigger or stored function the
	// statement fires could write the outbox, and those rows would not be in
	// the binlog.
	StatementDMLFail = "fail"
	// StatementDMLWarn logs it and goes on: for servers where no trigger or
	// stored function writes the outbox.
	StatementDMLWarn = "warn"
)

// Config is the whole relay configuration. The zero value is not valid; use
// Default or Load.
type Config struct {
	Name   string       `yaml:"name"`
	Source Source       `yaml:"source"`
	Kafka  Kafka        `yaml:"kafka"`
	Router RouterConfig `yaml:"router"`
	HA     HA           `yaml:"ha"`
	HTTP   HTTP         `yaml:"http"`
	Log    Log          `yaml:"log"`
}

// HA is the election of the active instance among several `run` processes
// with the same name: membership of a Kafka consumer group (id
// "outbox-relay.lock.<name>") on a one-partition lock topic; the member
// assigned partition 0 is active. See docs/ha.md.
type HA struct {
	// LockTopic is the one-partition topic whose partition 0 is the lease
	// (pipelines share it: each has its own group). Created if missing.
	LockTopic string `yaml:"lock_topic"`
	// SessionTimeout is the group session timeout: a member that stops
	// heartbeating (kill -9, partition) loses the lease after it, which
	// bounds the takeover time. Apache Kafka accepts it between
	// group.min.session.timeout.ms (6s by default) and
	// group.max.session.timeout.ms.
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// HeartbeatInterval is how often a member heartbeats; at most a third of
	// SessionTimeout. The active instance stops publishing once
	// SessionTimeout - 2 x HeartbeatInterval passes without an answered
	// group request, before its session can expire.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
}

// Source describes the MySQL/MariaDB server the relay replicates from.
type Source struct {
	Hosts    []string `yaml:"hosts"`
	User     string   `yaml:"user"`
	Password string   `yaml:"password"`
	// PasswordFile is read at start-up instead of Password (trailing newline
	// dropped), for secrets mounted as files.
	PasswordFile string   `yaml:"password_file"`
	TLS          TLS      `yaml:"tls"`
	ServerID     uint32   `yaml:"server_id"`
	Flavor       string   `yaml:"flavor"` // auto | mysql | mariadb
	Tables       []string `yaml:"tables"` // db.table
	Start        string   `yaml:"start"`  // now | earliest | a GTID set
	// ConnectTimeout bounds dialing one host.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// HeartbeatPeriod asks the server for a heartbeat event at this interval so
	// a dead connection is noticed: the relay drops a connection that sends
	// nothing for three periods.
	HeartbeatPeriod time.Duration `yaml:"heartbeat_period"`
	// StatementDML is what a change of a non-captured table logged as a
	// statement (binlog_format STATEMENT or MIXED in a session) does: fail
	// (default) or warn. A change of a captured table logged as a statement
	// always stops the relay.
	StatementDML string `yaml:"statement_dml"`
}

// Kafka describes the target cluster and how records are written.
type Kafka struct {
	Brokers           []string `yaml:"brokers"`
	TLS               TLS      `yaml:"tls"`
	SASL              SASL     `yaml:"sasl"`
	Delivery          string   `yaml:"delivery"`
	CheckpointTopic   string   `yaml:"checkpoint_topic"`
	TopicPartitions   int32    `yaml:"topic_partitions"`
	ReplicationFactor int16    `yaml:"replication_factor"`
	// Batch bounds one Kafka transaction (or, at-least-once, one checkpoint
	// interval). A batch always ends at a source-transaction boundary unless
	// one source transaction alone exceeds MaxRecords or MaxBytes.
	Batch Batch `yaml:"batch"`
	// TransactionTimeout is the broker-side transaction timeout.
	TransactionTimeout time.Duration `yaml:"transaction_timeout"`
	// CheckpointInterval: while no outbox row arrives, a checkpoint-only
	// transaction is written at this interval if the position moved.
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	// RequestTimeout bounds one Kafka request (produce, commit, admin).
	RequestTimeout time.Duration `yaml:"request_timeout"`
}

// Batch bounds a Kafka transaction.
type Batch struct {
	MaxRecords int           `yaml:"max_records"`
	MaxBytes   int           `yaml:"max_bytes"`
	MaxWait    time.Duration `yaml:"max_wait"`
}

// RouterConfig selects columns and says how records look. Unset columns
// take the preset's names: "outbox" (default) the article's table, "debezium"
// the Debezium Outbox Event Router's.
type RouterConfig struct {
	Preset              string `yaml:"preset"` // outbox | debezium
	EventIDColumn       string `yaml:"event_id_column"`
	AggregateTypeColumn string `yaml:"aggregate_type_column"`
	AggregateIDColumn   string `yaml:"aggregate_id_column"`
	EventTypeColumn     string `yaml:"event_type_column"`
	PayloadColumn       string `yaml:"payload_column"`
	TimestampColumn     string `yaml:"timestamp_column"`      // optional: record timestamp instead of the commit time
	SchemaVersionColumn string `yaml:"schema_version_column"` // optional: envelope schemaVersion
	TopicPrefix         string `yaml:"topic_prefix"`
	ValueFormat         string `yaml:"value_format"` // payload | envelope
	// AdditionalFields copies more columns into headers or the envelope.
	AdditionalFields []AdditionalField `yaml:"additional_fields"`
	// NullPayload: tombstone (a record with a null value) or error.
	NullPayload string `yaml:"null_payload"`
	// TopicRegex and TopicReplacement name the topic from the aggregate type
	// (Debezium's route.topic.regex/replacement) when TopicReplacement is set.
	TopicRegex       string `yaml:"topic_regex"`
	TopicReplacement string `yaml:"topic_replacement"`
	// AdditionalMissing: error (a bad row) or skip, when a row lacks an
	// additional column.
	AdditionalMissing string `yaml:"additional_missing"`
	// OnError: fail stops the relay at a bad row; dead-letter sends it to
	// DeadLetterTopic in the same Kafka transaction and goes on.
	OnError         string `yaml:"on_error"`
	DeadLetterTopic string `yaml:"dead_letter_topic"`
	// InvalidOp is what an UPDATE or DELETE on an outbox table does: warn
	// (log, count, skip), error (the same at error level) or fatal (stop).
	InvalidOp string `yaml:"invalid_op"`
	// Tables overrides these settings for single outbox tables (db.table).
	Tables map[string]RouterConfig `yaml:"tables"`
}

// For returns the settings of table: the table's overrides on top of r.
func (r RouterConfig) For(table string) RouterConfig {
	o, ok := r.Tables[table]
	if !ok {
		return r
	}
	out := r
	out.Tables = nil
	pick := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	pick(&out.Preset, o.Preset)
	if o.Preset != "" && o.Preset != r.Preset {
		// a different preset renames the columns the table does not set
		out.EventIDColumn, out.AggregateTypeColumn, out.AggregateIDColumn, out.EventTypeColumn, out.PayloadColumn = "", "", "", "", ""
	}
	pick(&out.EventIDColumn, o.EventIDColumn)
	pick(&out.AggregateTypeColumn, o.AggregateTypeColumn)
	pick(&out.AggregateIDColumn, o.AggregateIDColumn)
	pick(&out.EventTypeColumn, o.EventTypeColumn)
	pick(&out.PayloadColumn, o.PayloadColumn)
	pick(&out.TimestampColumn, o.TimestampColumn)
	pick(&out.SchemaVersionColumn, o.SchemaVersionColumn)
	pick(&out.TopicPrefix, o.TopicPrefix)
	pick(&out.ValueFormat, o.ValueFormat)
	pick(&out.NullPayload, o.NullPayload)
	pick(&out.TopicRegex, o.TopicRegex)
	pick(&out.TopicReplacement, o.TopicReplacement)
	pick(&out.AdditionalMissing, o.AdditionalMissing)
	pick(&out.OnError, o.OnError)
	pick(&out.DeadLetterTopic, o.DeadLetterTopic)
	pick(&out.InvalidOp, o.InvalidOp)
	if o.AdditionalFields != nil {
		out.AdditionalFields = o.AdditionalFields
	}
	out.applyPreset()
	return out
}

// AdditionalField is one more column in the record.
type AdditionalField struct {
	Column    string `yaml:"column"`
	Placement string `yaml:"placement"` // header | envelope
	Alias     string `yaml:"alias"`
}

var presets = map[string][5]string{ // event id, aggregate type, aggregate id, event type, payload
	"outbox":   {"event_id", "aggregate_type", "aggregate_id", "event_type", "payload"},
	"debezium": {"id", "aggregatetype", "aggregateid", "type", "payload"},
}

// applyPreset fills unset router columns from the preset.
func (r *RouterConfig) applyPreset() {
	p, ok := presets[r.Preset]
	if !ok {
		return // Validate reports it
	}
	for i, f := range []*string{&r.EventIDColumn, &r.AggregateTypeColumn, &r.AggregateIDColumn, &r.EventTypeColumn, &r.PayloadColumn} {
		if *f == "" {
			*f = p[i]
		}
	}
}

// HTTP is the metrics and health listener.
type HTTP struct {
	Listen string `yaml:"listen"` // empty disables it
	// StallTimeout: /healthz fails when the streaming relay loop has neither
	// handled an event nor committed a checkpoint for this long. 0 (the
	// default) is max(2m, 2 x kafka.checkpoint_interval +
	// kafka.request_timeout); a value set must exceed
	// kafka.checkpoint_interval + kafka.request_timeout.
	StallTimeout time.Duration `yaml:"stall_timeout"`
}

// EffectiveStallTimeout is http.stall_timeout, or its default when unset.
func (c Config) EffectiveStallTimeout() time.Duration {
	if c.HTTP.StallTimeout > 0 {
		return c.HTTP.StallTimeout
	}
	return max(2*time.Minute, 2*c.Kafka.CheckpointInterval+c.Kafka.RequestTimeout)
}

// Log selects the log format and level.
type Log struct {
	Format string `yaml:"format"` // json | console
	Level  string `yaml:"level"`  // debug | info | warn | error
	// ProgressInterval: while events flow, log throughput, lag and position
	// this often; 0 disables.
	ProgressInterval time.Duration `yaml:"progress_interval"`
}

// Default returns a configuration with every default filled in.
func Default() Config {
	c := defaults()
	c.Router.applyPreset()
	return c
}

func defaults() Config {
	return Config{
		Source: Source{
			Flavor:          "auto",
			Start:           "now",
			ConnectTimeout:  5 * time.Second,
			HeartbeatPeriod: 5 * time.Second,
			StatementDML:    StatementDMLFail,
		},
		Kafka: Kafka{
			Delivery:           ExactlyOnce,
			CheckpointTopic:    "outbox-relay.checkpoints",
			TopicPartitions:    3,
			ReplicationFactor:  -1,
			Batch:              Batch{MaxRecords: 5000, MaxBytes: 8 << 20, MaxWait: 200 * time.Millisecond},
			TransactionTimeout: time.Minute,
			CheckpointInterval: 10 * time.Second,
			RequestTimeout:     30 * time.Second,
		},
		Router: RouterConfig{
			Preset:            "outbox",
			TopicPrefix:       "outbox.event.",
			ValueFormat:       "payload",
			NullPayload:       "tombstone",
			AdditionalMissing: "error",
			OnError:           "fail",
			InvalidOp:         "warn",
		},
		HA:   HA{LockTopic: "outbox-relay.lock", SessionTimeout: 6 * time.Second, HeartbeatInterval: time.Second},
		HTTP: HTTP{Listen: "127.0.0.1:9464"},
		Log:  Log{Format: "json", Level: "info", ProgressInterval: 10 * time.Second},
	}
}

// ErrInvalid is wrapped by every error Validate returns.
var ErrInvalid = errors.New("invalid configuration")

// varRef matches ${VAR}: environment variable names are upper case, so
// ${routedByValue} in router.topic_replacement is left alone; $${ escapes.
var varRef = regexp.MustCompile(`\$?\$\{([A-Z_][A-Z0-9_]*)\}`)

// Load reads a YAML file, expands ${VAR} from the environment, applies the
// defaults to unset keys and validates the result.
func Load(path string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	return Parse(raw, os.LookupEnv)
}

// Parse is Load on bytes, with lookup standing in for the environment.
func Parse(raw []byte, lookup func(string) (string, bool)) (Config, error) {
	var missing []string
	expanded := varRef.ReplaceAllFunc(raw, func(m []byte) []byte {
		if bytes.HasPrefix(m, []byte("$$")) {
			return m[1:] // $${X} is the literal ${X}
		}
		name := string(varRef.FindSubmatch(m)[1])
		v, ok := lookup(name)
		if !ok {
			missing = append(missing, name)
		}
		return []byte(v)
	})
	if len(missing) > 0 {
		return Config{}, fmt.Errorf("%w: environment variable %s is not set", ErrInvalid, strings.Join(missing, ", "))
	}
	cfg := defaults()
	dec := yaml.NewDecoder(bytes.NewReader(expanded))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		return Config{}, fmt.Errorf("%w: parse yaml: %v", ErrInvalid, err)
	}
	cfg.Router.applyPreset()
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	if err := cfg.readSecrets(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// readSecrets fills passwords from their files.
func (c *Config) readSecrets() error {
	if f := c.Source.PasswordFile; f != "" {
		pw, err := readSecret(f)
		if err != nil {
			return fmt.Errorf("%w: source.password_file: %v", ErrInvalid, err)
		}
		c.Source.Password = pw
	}
	if f := c.Kafka.SASL.PasswordFile; f != "" {
		pw, err := readSecret(f)
		if err != nil {
			return fmt.Errorf("%w: kafka.sasl.password_file: %v", ErrInvalid, err)
		}
		c.Kafka.SASL.Password = pw
	}
	return nil
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,200}$`)

// Validate reports the first problem found, wrapped in ErrInvalid.
func (c *Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	if !namePattern.MatchString(c.Name) {
		return bad("name %q must be 1-200 characters of letters, digits, '.', '_' or '-'", c.Name)
	}
	s := c.Source
	if len(s.Hosts) == 0 {
		return bad("source.hosts is empty")
	}
	for _, h := range s.Hosts {
		if !strings.Contains(h, ":") {
			return bad("source.hosts entry %q needs host:port", h)
		}
	}
	if s.User == "" {
		return bad("source.user is empty")
	}
	if s.Password != "" && s.PasswordFile != "" {
		return bad("source: set password or password_file, not both")
	}
	if err := s.TLS.validate("source.tls"); err != nil {
		return bad("%v", err)
	}
	if s.ServerID == 0 {
		return bad("source.server_id must be set and unique among the server's replicas")
	}
	switch s.Flavor {
	case "auto", "mysql", "mariadb":
	default:
		return bad("source.flavor %q must be auto, mysql or mariadb", s.Flavor)
	}
	if len(s.Tables) == 0 {
		return bad("source.tables is empty")
	}
	for _, t := range s.Tables {
		db, tbl, ok := strings.Cut(t, ".")
		if !ok || db == "" || tbl == "" || strings.Contains(tbl, ".") {
			return bad("source.tables entry %q must be db.table", t)
		}
	}
	if s.Start == "" {
		return bad("source.start is empty: use now, earliest or a GTID set")
	}
	switch s.StatementDML {
	case StatementDMLFail, StatementDMLWarn:
	default:
		return bad("source.statement_dml %q must be fail or warn", s.StatementDML)
	}
	if s.ConnectTimeout <= 0 || s.HeartbeatPeriod <= 0 {
		return bad("source.connect_timeout and source.heartbeat_period must be positive")
	}
	k := c.Kafka
	if len(k.Brokers) == 0 {
		return bad("kafka.brokers is empty")
	}
	if err := k.TLS.validate("kafka.tls"); err != nil {
		return bad("%v", err)
	}
	if err := k.SASL.validate(); err != nil {
		return bad("%v", err)
	}
	switch k.Delivery {
	case ExactlyOnce, AtLeastOnce:
	default:
		return bad("kafka.delivery %q must be exactly-once or at-least-once", k.Delivery)
	}
	if k.CheckpointTopic == "" {
		return bad("kafka.checkpoint_topic is empty")
	}
	if k.TopicPartitions <= 0 {
		return bad("kafka.topic_partitions must be positive")
	}
	if k.ReplicationFactor == 0 || k.ReplicationFactor < -1 {
		return bad("kafka.replication_factor must be positive, or -1 for the broker default")
	}
	if k.Batch.MaxRecords <= 0 || k.Batch.MaxBytes <= 0 || k.Batch.MaxWait <= 0 {
		return bad("kafka.batch.max_records, max_bytes and max_wait must be positive")
	}
	if k.TransactionTimeout < time.Second || k.CheckpointInterval <= 0 || k.RequestTimeout <= 0 {
		return bad("kafka.transaction_timeout must be at least 1s; checkpoint_interval and request_timeout positive")
	}
	for t := range c.Router.Tables {
		if !slices.Contains(s.Tables, t) {
			return bad("router.tables has %q, which is not in source.tables", t)
		}
	}
	for _, t := range append([]string{""}, s.Tables...) {
		r := c.Router
		where := "router"
		if t != "" {
			if _, ok := r.Tables[t]; !ok {
				continue
			}
			r, where = r.For(t), "router.tables."+t
		}
		if err := r.validate(); err != nil {
			return bad("%s: %v", where, err)
		}
	}
	h := c.HA
	if h.LockTopic == "" || h.LockTopic == k.CheckpointTopic {
		return bad("ha.lock_topic must be set and differ from kafka.checkpoint_topic")
	}
	if h.SessionTimeout < time.Second {
		return bad("ha.session_timeout must be at least 1s (Apache Kafka: at least group.min.session.timeout.ms, 6s by default)")
	}
	if h.HeartbeatInterval <= 0 || 3*h.HeartbeatInterval > h.SessionTimeout {
		return bad("ha.heartbeat_interval must be positive and at most a third of ha.session_timeout")
	}
	if st := c.HTTP.StallTimeout; st < 0 || st > 0 && st <= k.CheckpointInterval+k.RequestTimeout {
		return bad("http.stall_timeout must exceed kafka.checkpoint_interval + kafka.request_timeout (%s)", k.CheckpointInterval+k.RequestTimeout)
	}
	switch c.Log.Format {
	case "json", "console":
	default:
		return bad("log.format %q must be json or console", c.Log.Format)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return bad("log.level %q must be debug, info, warn or error", c.Log.Level)
	}
	return nil
}

func (r RouterConfig) validate() error {
	if _, ok := presets[r.Preset]; !ok {
		return fmt.Errorf("preset %q must be outbox or debezium", r.Preset)
	}
	oneOf := func(key, v string, allowed ...string) error {
		if !slices.Contains(allowed, v) {
			return fmt.Errorf("%s %q must be one of %s", key, v, strings.Join(allowed, ", "))
		}
		return nil
	}
	for _, e := range []error{
		oneOf("value_format", r.ValueFormat, "payload", "envelope"),
		oneOf("null_payload", r.NullPayload, "tombstone", "error"),
		oneOf("additional_missing", r.AdditionalMissing, "error", "skip"),
		oneOf("on_error", r.OnError, "fail", "dead-letter"),
		oneOf("invalid_op", r.InvalidOp, "warn", "error", "fatal"),
	} {
		if e != nil {
			return e
		}
	}
	for _, f := range r.AdditionalFields {
		if f.Column == "" {
			return fmt.Errorf("additional_fields: an entry has no column")
		}
		switch f.Placement {
		case "header", "partition":
		case "envelope":
			if r.ValueFormat != "envelope" {
				return fmt.Errorf("additional_fields %s: placement envelope needs value_format envelope", f.Column)
			}
		default:
			return fmt.Errorf("additional_fields %s: placement %q must be header, envelope or partition", f.Column, f.Placement)
		}
	}
	if r.TopicRegex != "" {
		if _, err := regexp.Compile(r.TopicRegex); err != nil {
			return fmt.Errorf("topic_regex: %v", err)
		}
		if r.TopicReplacement == "" {
			return fmt.Errorf("topic_regex needs topic_replacement")
		}
	}
	for _, col := range [][2]string{
		{"event_id_column", r.EventIDColumn}, {"aggregate_type_column", r.AggregateTypeColumn},
		{"aggregate_id_column", r.AggregateIDColumn}, {"payload_column", r.PayloadColumn},
	} {
		if col[1] == "" {
			return fmt.Errorf("%s is empty", col[0])
		}
	}
	return nil
}

// Redacted returns a copy with every secret replaced, safe to print or log.
func (c Config) Redacted() Config {
	if c.Source.Password != "" {
		c.Source.Password = "REDACTED"
	}
	if c.Kafka.SASL.Password != "" {
		c.Kafka.SASL.Password = "REDACTED"
	}
	return c
}

// YAML renders the configuration; callers print Redacted().YAML().
func (c Config) YAML() string {
	out, err := yaml.Marshal(c)
	if err != nil {
		return fmt.Sprintf("# marshal config: %v\n", err)
	}
	return string(out)
}
