// Package config holds the relay's one configuration struct, its defaults,
// YAML loading and Validate.
//
// Contract: ${VAR} is expanded inside each scalar value after the YAML is
// parsed (never in comments or keys); a variable's value arrives exactly,
// whatever characters it holds. Every error wraps ErrInvalid and names the
// key path, its line (when loaded from YAML) and what to write; Load and
// Validate report every problem at once, not the first one. Per-table router
// settings are decoded onto a copy of the router's. Load never logs and
// never returns secrets inside errors; Redacted returns a copy safe to print.
package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Delivery is kafka.delivery, the delivery guarantee.
type Delivery string

// Values of kafka.delivery.
const (
	ExactlyOnce Delivery = "exactly-once"
	AtLeastOnce Delivery = "at-least-once"
)

// Flavor is source.flavor: which server the source is.
type Flavor string

// Values of source.flavor.
const (
	FlavorAuto    Flavor = "auto" // detected from the server's version
	FlavorMySQL   Flavor = "mysql"
	FlavorMariaDB Flavor = "mariadb"
)

// StatementDML is what a statement-logged change of a table that is not
// captured does (source.statement_dml).
type StatementDML string

// Values of source.statement_dml.
const (
	// StatementDMLFail stops the relay: a trigger or stored function the
	// statement fires could write the outbox, and those rows would not be in
	// the binlog.
	StatementDMLFail StatementDML = "fail"
	// StatementDMLWarn logs it and goes on: for servers where no trigger or
	// stored function writes the outbox.
	StatementDMLWarn StatementDML = "warn"
)

// Config is the whole relay configuration. The zero value is not valid; use
// Default or Load.
type Config struct {
	Name    string       `yaml:"name"`
	Source  Source       `yaml:"source"`
	Kafka   Kafka        `yaml:"kafka"`
	Router  RouterConfig `yaml:"router"`
	HA      HA           `yaml:"ha"`
	HTTP    HTTP         `yaml:"http"`
	Log     Log          `yaml:"log"`
	Audit   Audit        `yaml:"audit"`
	Tracing Tracing      `yaml:"tracing"`
}

// Tracing is the relay's own spans: one per outbox row published, a child
// of the trace context the row carried (router.tracing_column), exported
// over OTLP. See docs/tracing.md.
type Tracing struct {
	// OTLPEndpoint is the OTLP receiver spans are sent to: an http:// or
	// https:// URL. OTLP/HTTP adds the path /v1/traces to a URL without
	// one (http://collector:4318); OTLP/gRPC takes host and port
	// (http://collector:4317; https:// for TLS). Empty (the default): no
	// spans, and no cost. Headers the receiver needs (an API key) come
	// from OTEL_EXPORTER_OTLP_HEADERS, never from this file.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// OTLPProtocol is http/protobuf (the default) or grpc.
	OTLPProtocol OTLPProtocol `yaml:"otlp_protocol"`
	// SampleRatio is the share of rows whose span is sampled when the row
	// carries no trace context (between 0 and 1; default 1). A row's
	// context decides for its own span (sampled or not), as
	// OTEL_TRACES_SAMPLER=parentbased_traceidratio does.
	SampleRatio float64 `yaml:"sample_ratio"`
}

// OTLPProtocol is the OTLP transport of tracing.otlp_endpoint.
type OTLPProtocol string

// Values of tracing.otlp_protocol.
const (
	OTLPHTTP OTLPProtocol = "http/protobuf"
	OTLPGRPC OTLPProtocol = "grpc"
)

// Audit is the background audit of `run`: every Interval, the check of
// `outbox-relay audit` over the trailing Window, its outcome exported as
// outbox_relay_audit_rows. See docs/audit.md.
type Audit struct {
	// Interval is how often `run` audits the trailing window (0, the
	// default: never; at least 1s otherwise). The first run is at start.
	Interval time.Duration `yaml:"interval"`
	// Window is the trailing window audited: rows whose time column is
	// between now - window - delay and now - delay (default 1h; at most
	// 7d: the audit holds one entry per row of the window in memory).
	Window time.Duration `yaml:"window"`
	// Delay is how far before now the window ends (default 1m): rows
	// committed in the last moments are audited by a later run.
	Delay time.Duration `yaml:"delay"`
	// Margin is how long before the window's start records are read
	// (clock skew, commit delay; default 5m, as `audit --margin`).
	Margin time.Duration `yaml:"margin"`
	// Wait is how long a run waits for the committed checkpoint to cover
	// the rows read (default 10s): rows it does not cover without a record
	// count as pending, never missing.
	Wait time.Duration `yaml:"wait"`
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
	// HeartbeatInterval is how often a member heartbeats; at most a quarter
	// of SessionTimeout (MinSessionTimeout). The active instance stops
	// publishing once SessionTimeout - 2 x HeartbeatInterval passes without
	// an answered group request, before its session can expire.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// InstanceID is this instance's static membership id in the lock group
	// (Kafka's group.instance.id, KIP-345): an instance that restarts with
	// the same id (a crash, a rolling restart) takes its place back without
	// a rebalance, so a standby's restart never disturbs the active
	// instance. Default: the host name. Instances of one pipeline need
	// different ids: give each its own when two run on one host. Letters,
	// digits, '.', '_' and '-', at most 249.
	InstanceID string `yaml:"instance_id"`
}

// Bounds of source.max_packet_bytes.
const (
	MinPacketBytes = 1 << 20
	MaxPacketBytes = 2 << 30
)

// Source describes the MySQL/MariaDB server the relay replicates from.
type Source struct {
	Hosts    []string `yaml:"hosts"`
	User     string   `yaml:"user"`
	Password string   `yaml:"password" secret:"true"`
	// PasswordFile is read at start-up instead of Password (trailing newline
	// dropped), for secrets mounted as files.
	PasswordFile string   `yaml:"password_file"`
	TLS          TLS      `yaml:"tls"`
	ServerID     uint32   `yaml:"server_id"`
	Flavor       Flavor   `yaml:"flavor"` // auto | mysql | mariadb
	Tables       []string `yaml:"tables"` // db.table
	Start        string   `yaml:"start"`  // now | earliest | a GTID set
	// ConnectTimeout bounds dialing one host and each wait of the login
	// (handshake, TLS, authentication): a host that accepts TCP and does not
	// answer is given up after it and the next host tried.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// QueryTimeout bounds each wait for the server's answer on a connection
	// after the login: the relay's inspection of a host, its samples and
	// admin queries, `check`, a replication connection's registration (the
	// binlog stream itself is watched by HeartbeatPeriod).
	QueryTimeout time.Duration `yaml:"query_timeout"`
	// HeartbeatPeriod asks the server for a heartbeat event at this interval so
	// a dead connection is noticed: the relay drops a connection that sends
	// nothing for three periods.
	HeartbeatPeriod time.Duration `yaml:"heartbeat_period"`
	// StatementDML is what a change of a non-captured table logged as a
	// statement (binlog_format STATEMENT or MIXED in a session) does: fail
	// (default) or warn. A change of a captured table logged as a statement
	// always stops the relay.
	StatementDML StatementDML `yaml:"statement_dml"`
	// Logins the relay refuses on a plaintext connection unless allowed
	// here (binlog/loginauth.go): a server asking for the password in
	// cleartext (mysql_clear_password), and caching_sha2_password /
	// sha256_password asking for it encrypted with an RSA key: the relay
	// encrypts it only with the key pinned in ServerPublicKeyFile, never
	// with one the server sends, unless AllowPublicKeyRetrieval. Over TLS
	// none is needed.
	AllowCleartextPassword  bool   `yaml:"allow_cleartext_password"`
	AllowPublicKeyRetrieval bool   `yaml:"allow_public_key_retrieval"`
	ServerPublicKeyFile     string `yaml:"server_public_key_file"`
	// MaxPacketBytes bounds one packet read from the source (a binlog
	// event, a result row); 0: a quarter of the process's memory budget
	// plus 1 MiB (the cgroup memory limit or GOMEMLIMIT, else 256 MiB:
	// 65 MiB), lowered to twice the server's max_allowed_packet plus 1 MiB
	// when that is less; never raised by the server.
	MaxPacketBytes int64 `yaml:"max_packet_bytes"`
}

// Kafka describes the target cluster and how records are written.
type Kafka struct {
	Brokers           []string `yaml:"brokers"`
	TLS               TLS      `yaml:"tls"`
	SASL              SASL     `yaml:"sasl"`
	Delivery          Delivery `yaml:"delivery"`
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
	// Compression of produced record batches: none, gzip, snappy, lz4
	// or zstd. Default snappy, as the relay always did (franz-go's default).
	Compression Compression `yaml:"compression"`
	// Linger is how long the producer waits to fill a batch; 0 sends at once.
	Linger time.Duration `yaml:"linger"`
	// TransactionLanes (exactly-once) is how many transactional ids the
	// relay alternates between: 2 (default) lets one Kafka transaction's
	// commit (EndTxn, the commit markers) run while the next one's records
	// are written; 1 uses the pipeline's name alone, one transaction after
	// the other. See TransactionalIDs.
	TransactionLanes int `yaml:"transaction_lanes"`
	// ClientMetrics adds franz-go's client metrics (outbox_relay_kafka_*,
	// per broker and topic) to /metrics.
	ClientMetrics bool `yaml:"client_metrics"`
	// OnPartitionsAdded is what the relay does when an output topic's
	// partition count differs from the one its checkpoint recorded: keep
	// (default) places keys by the recorded count, adopt takes the new
	// one, stop stops. See docs/outbox-table.md "Partitions added to an output topic".
	OnPartitionsAdded PartitionsAdded `yaml:"on_partitions_added"`
}

// PartitionsAdded is kafka.on_partitions_added.
type PartitionsAdded string

// Values of kafka.on_partitions_added.
const (
	PartitionsKeep  PartitionsAdded = "keep"
	PartitionsAdopt PartitionsAdded = "adopt"
	PartitionsStop  PartitionsAdded = "stop"
)

// Compression is kafka.compression.
type Compression string

// Values of kafka.compression.
const (
	CompressNone   Compression = "none"
	CompressGzip   Compression = "gzip"
	CompressSnappy Compression = "snappy"
	CompressLZ4    Compression = "lz4"
	CompressZstd   Compression = "zstd"
)

// validateProducer checks compression, transaction lanes and linger.
func (k Kafka) validateProducer() []error {
	var errs []error
	switch k.Compression {
	case CompressNone, CompressGzip, CompressSnappy, CompressLZ4, CompressZstd:
	default:
		errs = append(errs, fmt.Errorf("kafka.compression: %q: write none, gzip, snappy, lz4 or zstd", k.Compression))
	}
	if k.TransactionLanes != 1 && k.TransactionLanes != 2 {
		errs = append(errs, fmt.Errorf("kafka.transaction_lanes: %d: write 1 or 2", k.TransactionLanes))
	}
	switch k.OnPartitionsAdded {
	case PartitionsKeep, PartitionsAdopt, PartitionsStop:
	default:
		errs = append(errs, fmt.Errorf("kafka.on_partitions_added: %q: write keep, adopt or stop", k.OnPartitionsAdded))
	}
	if k.Linger < 0 || k.Linger > time.Minute {
		errs = append(errs, fmt.Errorf("kafka.linger: %s: write a duration from 0 to 1m, such as 5ms", k.Linger))
	}
	return errs
}

// Batch bounds a Kafka transaction.
type Batch struct {
	MaxRecords int           `yaml:"max_records"`
	MaxBytes   int           `yaml:"max_bytes"`
	MaxWait    time.Duration `yaml:"max_wait"`
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
	// ExitGrace: before `run` exits with an error, it keeps serving
	// /metrics this long with outbox_relay_up{state="stopped"} and
	// outbox_relay_exit_code, so that a scrape sees why (default 15s, the
	// shipped scrape interval; 0 exits at once; at most 5m). A signal ends it.
	ExitGrace time.Duration `yaml:"exit_grace"`
}

// EffectiveStallTimeout is http.stall_timeout, or its default when unset.
func (c Config) EffectiveStallTimeout() time.Duration {
	if c.HTTP.StallTimeout > 0 {
		return c.HTTP.StallTimeout
	}
	return max(2*time.Minute, 2*c.Kafka.CheckpointInterval+c.Kafka.RequestTimeout)
}

// LogFormat is log.format.
type LogFormat string

// Values of log.format.
const (
	LogJSON    LogFormat = "json"
	LogConsole LogFormat = "console"
)

// LogLevel is log.level.
type LogLevel string

// Values of log.level.
const (
	LevelDebug LogLevel = "debug"
	LevelInfo  LogLevel = "info"
	LevelWarn  LogLevel = "warn"
	LevelError LogLevel = "error"
)

// Log selects the log format and level.
type Log struct {
	Format LogFormat `yaml:"format"` // json | console
	Level  LogLevel  `yaml:"level"`  // debug | info | warn | error
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
			QueryTimeout:    30 * time.Second,
			HeartbeatPeriod: 5 * time.Second,
			StatementDML:    StatementDMLFail,
		},
		Kafka: Kafka{
			Delivery:           ExactlyOnce,
			CheckpointTopic:    "outbox-relay.checkpoints",
			TopicPartitions:    3,
			ReplicationFactor:  -1,
			Batch:              Batch{MaxRecords: 20000, MaxBytes: 8 << 20, MaxWait: 200 * time.Millisecond},
			TransactionTimeout: time.Minute,
			CheckpointInterval: 10 * time.Second,
			RequestTimeout:     30 * time.Second,
			Compression:        CompressSnappy,
			TransactionLanes:   2,
			OnPartitionsAdded:  PartitionsKeep,
		},
		Router: RouterConfig{
			Preset:            "outbox",
			TopicPrefix:       "outbox.event.",
			ValueFormat:       "payload",
			CloudEventsMode:   "structured",
			NullPayload:       "tombstone",
			AdditionalMissing: "error",
			OnError:           "fail",
			InvalidOp:         "warn",
		},
		HA:      HA{LockTopic: "outbox-relay.lock", SessionTimeout: 6 * time.Second, HeartbeatInterval: time.Second},
		HTTP:    HTTP{Listen: "127.0.0.1:9464", ExitGrace: 15 * time.Second},
		Log:     Log{Format: LogJSON, Level: LevelInfo, ProgressInterval: 10 * time.Second},
		Audit:   Audit{Window: time.Hour, Delay: time.Minute, Margin: 5 * time.Minute, Wait: 10 * time.Second},
		Tracing: Tracing{OTLPProtocol: OTLPHTTP, SampleRatio: 1},
	}
}

// ErrInvalid is wrapped by every error Validate returns.
var ErrInvalid = errors.New("invalid configuration")

// Load reads a YAML file, expands ${VAR} from the environment, applies the
// defaults to unset keys and validates the result.
func Load(path string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	cfg, err := Parse(raw, os.LookupEnv)
	return cfg, inFile(path, err)
}

// inFile names the file an invalid configuration was read from.
func inFile(path string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// Parse is Load on bytes, with lookup standing in for the environment.
func Parse(raw []byte, lookup func(string) (string, bool)) (Config, error) {
	return parse(raw, lookup, nil)
}

// parse is Parse; a non-nil only limits the problems reported to the keys
// it accepts (unset variables elsewhere expand to "") and skips reading
// secret files (LoadOffline).
func parse(raw []byte, lookup func(string) (string, bool), only func(key string) bool) (Config, error) {
	doc, err := parseYAML(raw)
	if err != nil {
		return Config{}, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null" {
		return Config{}, fmt.Errorf("%w: the file is empty: write at least name, source (hosts, user, server_id, tables) and kafka.brokers", ErrInvalid)
	}
	cfg := defaults()
	d := &decoder{lookup: lookup, optional: func(key string) bool { return only != nil && !only(key) }}
	d.decode("", doc.Content[0], reflect.ValueOf(&cfg).Elem())
	cfg.Router.applyPreset()
	// a key that failed to decode keeps its default: validation still
	// reports every other problem
	problems := d.errs
	if only != nil {
		problems = nil
		for i, p := range d.errs {
			if only(d.paths[i]) || !d.fromVariable(d.paths[i]) {
				problems = append(problems, p)
			}
		}
	}
	if err := cfg.Validate(); err != nil {
		ve, ok := err.(*ValidationError)
		if !ok {
			return Config{}, err
		}
		var left []string
		for _, p := range ve.Problems {
			if !d.failed(problemKey(p)) && (only == nil || only(problemKey(p))) {
				left = append(left, p)
			}
		}
		problems = append(problems, withLines(&ValidationError{Problems: left}, doc.Content[0]).(*ValidationError).Problems...)
	}
	for i, p := range problems {
		problems[i] = d.redact(p)
	}
	if len(problems) > 0 {
		return Config{}, &ValidationError{Problems: problems}
	}
	if only != nil {
		return cfg, nil
	}
	if err := cfg.readSecrets(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// invalid joins problems into one error wrapping ErrInvalid.
func invalid(problems []string) error {
	if len(problems) == 1 {
		return fmt.Errorf("%w: %s", ErrInvalid, problems[0])
	}
	return fmt.Errorf("%w: %d problems:\n  %s", ErrInvalid, len(problems), strings.Join(problems, "\n  "))
}

// ValidationError is what Validate returns: every problem, each starting
// with its key path. It wraps ErrInvalid.
type ValidationError struct{ Problems []string }

func (e *ValidationError) Error() string { return invalid(e.Problems).Error() }

// Unwrap returns ErrInvalid.
func (e *ValidationError) Unwrap() error { return ErrInvalid }

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
	// re-read at each authentication (rotated tokens): check them now, so
	// that a typo stops here and not as failed authentications
	for _, f := range []struct{ key, path string }{
		{"token_file", c.Kafka.SASL.TokenFile},
		{"secret_access_key_file", c.Kafka.SASL.SecretAccessKeyFile},
		{"session_token_file", c.Kafka.SASL.SessionTokenFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := readSecret(f.path); err != nil {
			return fmt.Errorf("%w: kafka.sasl.%s: %v", ErrInvalid, f.key, err)
		}
	}
	return nil
}

// Redacted returns a copy with every secret (a field tagged secret:"true")
// replaced, safe to print or log.
func (c Config) Redacted() Config {
	redact(reflect.ValueOf(&c).Elem())
	return c
}

// redact replaces the set secrets of struct v and of the structs it holds
// by value. The secret fields are strings of structs held by value (a
// test checks it): a map or slice would share its elements with the
// original.
func redact(v reflect.Value) {
	for i := range v.NumField() {
		f, fv := v.Type().Field(i), v.Field(i)
		switch {
		case isSecret(f) && fv.String() != "":
			fv.SetString("REDACTED")
		case f.Type.Kind() == reflect.Struct && f.IsExported():
			redact(fv)
		}
	}
}

// YAML renders the configuration; callers print Redacted().YAML().
func (c Config) YAML() string {
	out, err := yaml.Marshal(c)
	if err != nil {
		return fmt.Sprintf("# marshal config: %v\n", err)
	}
	return string(out)
}
