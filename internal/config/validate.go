package config

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

var namePattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,200}$`)

// Validate reports every problem found, as a *ValidationError (wrapping
// ErrInvalid) whose problems start with their key path.
func (c *Config) Validate() error {
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	switch {
	case c.Name == "":
		bad("name: required: write the pipeline's name (its checkpoint key and Kafka transactional id), 1-200 characters of letters, digits, '.', '_' or '-'")
	case !namePattern.MatchString(c.Name):
		bad("name: %q: write 1-200 characters of letters, digits, '.', '_' or '-'", c.Name)
	}
	c.validateSource(bad)
	c.validateKafka(bad)
	c.validateRouter(bad)
	c.validateHA(bad)
	c.validateHTTP(bad)
	c.validateAudit(bad)
	c.validateTracing(bad)
	c.validateLog(bad)
	if len(problems) > 0 {
		return &ValidationError{Problems: problems}
	}
	return nil
}

// validateSource checks the source section.
func (c *Config) validateSource(bad func(string, ...any)) {
	s := c.Source
	if len(s.Hosts) == 0 {
		bad("source.hosts: empty: list the servers to replicate from, such as [\"db1:3306\"]")
	}
	for i, h := range s.Hosts {
		if err := checkHostPort(h, false); err != nil {
			bad("source.hosts[%d]: %q %v", i, maskUserinfo(h), err)
		}
	}
	if s.User == "" {
		bad("source.user: empty: write the replication user")
	}
	if s.Password != "" && s.PasswordFile != "" {
		bad("source.password_file: set password or password_file, not both")
	}
	if err := s.TLS.validate("source.tls"); err != nil {
		bad("%v", err)
	}
	if s.ServerID == 0 {
		bad("source.server_id: must be set and unique among the server's replicas, such as 4242")
	}
	switch s.Flavor {
	case FlavorAuto, FlavorMySQL, FlavorMariaDB:
	default:
		bad("source.flavor: %q: write auto, mysql or mariadb", s.Flavor)
	}
	if len(s.Tables) == 0 {
		bad("source.tables: empty: list the outbox tables as db.table")
	}
	for i, t := range s.Tables {
		db, tbl, ok := strings.Cut(t, ".")
		if !ok || db == "" || tbl == "" || strings.Contains(tbl, ".") {
			bad("source.tables[%d]: %q: write db.table", i, t)
		}
	}
	if err := checkStart(s.Start, string(s.Flavor)); err != nil {
		bad("source.start: %v", err)
	}
	switch s.StatementDML {
	case StatementDMLFail, StatementDMLWarn:
	default:
		bad("source.statement_dml: %q: write fail or warn", s.StatementDML)
	}
	if s.MaxPacketBytes != 0 && (s.MaxPacketBytes < MinPacketBytes || s.MaxPacketBytes > MaxPacketBytes) {
		bad("source.max_packet_bytes: %d: write 0 (from the memory budget and the server's max_allowed_packet) or %d to %d", s.MaxPacketBytes, MinPacketBytes, MaxPacketBytes)
	}
	if s.ServerPublicKeyFile != "" {
		if _, err := os.Stat(s.ServerPublicKeyFile); err != nil {
			bad("source.server_public_key_file: %v", err)
		}
		if s.AllowPublicKeyRetrieval {
			bad("source.allow_public_key_retrieval: set it or source.server_public_key_file, not both (a pinned key is checked; retrieval takes any key)")
		}
	}
	if s.ConnectTimeout <= 0 {
		bad("source.connect_timeout: %s: write a positive duration such as 5s", s.ConnectTimeout)
	}
	if s.QueryTimeout <= 0 {
		bad("source.query_timeout: %s: write a positive duration such as 30s", s.QueryTimeout)
	}
	if s.HeartbeatPeriod <= 0 {
		bad("source.heartbeat_period: %s: write a positive duration such as 5s", s.HeartbeatPeriod)
	}
}

// validateKafka checks the kafka section.
func (c *Config) validateKafka(bad func(string, ...any)) {
	k := c.Kafka
	if len(k.Brokers) == 0 {
		bad("kafka.brokers: empty: list bootstrap brokers, such as [\"kafka1:9092\"]")
	}
	for i, b := range k.Brokers {
		if err := checkHostPort(b, false); err != nil {
			bad("kafka.brokers[%d]: %q %v", i, maskUserinfo(b), err)
		}
	}
	if err := k.TLS.validate("kafka.tls"); err != nil {
		bad("%v", err)
	}
	for _, e := range k.SASL.validate() {
		bad("%v", e)
	}
	switch k.Delivery {
	case ExactlyOnce, AtLeastOnce:
	default:
		bad("kafka.delivery: %q: write exactly-once or at-least-once", k.Delivery)
	}
	if err := checkTopic(k.CheckpointTopic); err != nil {
		bad("kafka.checkpoint_topic: %v", err)
	}
	if k.TopicPartitions <= 0 {
		bad("kafka.topic_partitions: %d: write a positive number", k.TopicPartitions)
	}
	if k.ReplicationFactor == 0 || k.ReplicationFactor < -1 {
		bad("kafka.replication_factor: %d: write a positive number, or -1 for the broker default", k.ReplicationFactor)
	}
	if k.Batch.MaxRecords <= 0 {
		bad("kafka.batch.max_records: %d: write a positive number", k.Batch.MaxRecords)
	}
	if k.Batch.MaxBytes <= 0 {
		bad("kafka.batch.max_bytes: %d: write a positive number", k.Batch.MaxBytes)
	}
	if k.Batch.MaxWait <= 0 {
		bad("kafka.batch.max_wait: %s: write a positive duration such as 200ms", k.Batch.MaxWait)
	}
	if k.TransactionTimeout < time.Second {
		bad("kafka.transaction_timeout: %s: write at least 1s", k.TransactionTimeout)
	}
	if k.CheckpointInterval <= 0 {
		bad("kafka.checkpoint_interval: %s: write a positive duration such as 10s", k.CheckpointInterval)
	}
	if k.RequestTimeout <= 0 {
		bad("kafka.request_timeout: %s: write a positive duration such as 30s", k.RequestTimeout)
	}
	for _, e := range k.validateProducer() {
		bad("%v", e)
	}
}

// validateRouter checks the router and its per-table entries.
func (c *Config) validateRouter(bad func(string, ...any)) {
	tables := slices.Sorted(func(yield func(string) bool) {
		for t := range c.Router.Tables {
			if !yield(t) {
				return
			}
		}
	})
	for _, t := range tables {
		if !slices.Contains(c.Source.Tables, t) {
			bad("router.tables.%s: not in source.tables: add it there or remove this entry", t)
		}
	}
	for _, e := range c.Router.validate() {
		bad("router.%v", e)
	}
	for _, t := range tables {
		for _, e := range c.Router.For(t).validate() {
			bad("router.tables.%s.%v", t, e)
		}
	}
	c.checkReservedNames(tables, bad)
}

// validateHA checks the ha section.
func (c *Config) validateHA(bad func(string, ...any)) {
	h := c.HA
	if err := checkTopic(h.LockTopic); err != nil {
		bad("ha.lock_topic: %v", err)
	} else if h.LockTopic == c.Kafka.CheckpointTopic {
		bad("ha.lock_topic: %q: must differ from kafka.checkpoint_topic", h.LockTopic)
	}
	if h.SessionTimeout < time.Second {
		bad("ha.session_timeout: %s: write at least 1s (Apache Kafka: at least group.min.session.timeout.ms, 6s by default)", h.SessionTimeout)
	}
	if h.InstanceID != "" && !validInstanceID(h.InstanceID) {
		bad("ha.instance_id: %q: write letters, digits, '.', '_' and '-' only, at most 249 characters", h.InstanceID)
	}
	if h.HeartbeatInterval <= 0 {
		bad("ha.heartbeat_interval: %s: write a positive duration of at most a quarter of ha.session_timeout (%s)", h.HeartbeatInterval, h.SessionTimeout)
	} else if MinSessionTimeout(h.HeartbeatInterval) > h.SessionTimeout {
		// The lease lapses after SessionTimeout - 2 x HeartbeatInterval
		// without an answered group request, and heartbeats go one interval
		// after the last one's answer: a margin of one interval is crossed
		// on every heartbeat (3s / 1s lost the lease every few seconds on
		// Apache Kafka). Two intervals leave one heartbeat's slack.
		bad("ha.heartbeat_interval: %s with ha.session_timeout %s: the active instance gives the lease up after "+
			"session_timeout - 2 x heartbeat_interval (%s) without an answered group request, which must hold two heartbeats "+
			"or the lease is lost on every late answer: write a heartbeat_interval of at most %s (a quarter of the session timeout), "+
			"or a session_timeout of at least %s",
			h.HeartbeatInterval, h.SessionTimeout, h.SessionTimeout-2*h.HeartbeatInterval, h.SessionTimeout/4, MinSessionTimeout(h.HeartbeatInterval))
	}
}

// validateHTTP checks the http section.
func (c *Config) validateHTTP(bad func(string, ...any)) {
	k := c.Kafka
	if l := c.HTTP.Listen; l != "" {
		if err := checkHostPort(l, true); err != nil {
			bad("http.listen: %q %v", l, err)
		}
	}
	if g := c.HTTP.ExitGrace; g < 0 || g > 5*time.Minute {
		bad("http.exit_grace: %s: must be between 0 and 5m", g)
	}
	if st := c.HTTP.StallTimeout; st < 0 || st > 0 && st <= k.CheckpointInterval+k.RequestTimeout {
		bad("http.stall_timeout: %s: must exceed kafka.checkpoint_interval + kafka.request_timeout (%s), or 0 for the default", st, k.CheckpointInterval+k.RequestTimeout)
	}
}

// validateAudit checks the audit section.
func (c *Config) validateAudit(bad func(string, ...any)) {
	if a := c.Audit; a.Interval != 0 && a.Interval < time.Second {
		bad("audit.interval: %s: write 0 (no background audit) or at least 1s", a.Interval)
	}
	if a := c.Audit; a.Window < time.Minute || a.Window > 7*24*time.Hour {
		bad("audit.window: %s: must be between 1m and 7d (168h)", a.Window)
	}
	if a := c.Audit; a.Delay < 0 || a.Margin < 0 || a.Wait < 0 {
		bad("audit.delay %s, audit.margin %s, audit.wait %s: none may be negative", a.Delay, a.Margin, a.Wait)
	}
}

// validateLog checks the log section.
func (c *Config) validateLog(bad func(string, ...any)) {
	switch c.Log.Format {
	case LogJSON, LogConsole:
	default:
		bad("log.format: %q: write json or console", c.Log.Format)
	}
	switch c.Log.Level {
	case LevelDebug, LevelInfo, LevelWarn, LevelError:
	default:
		bad("log.level: %q: write debug, info, warn or error", c.Log.Level)
	}
	if c.Log.ProgressInterval < 0 {
		bad("log.progress_interval: %s: write a positive duration, or 0 to disable", c.Log.ProgressInterval)
	}
}

// validInstanceID: a group instance id this project writes (Kafka's rules
// for topic names, which a host name meets).
func validInstanceID(id string) bool {
	if len(id) == 0 || len(id) > 249 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// MinSessionTimeout is the shortest ha.session_timeout that holds the lease
// with heartbeat: 4 x heartbeat. The lease lapses after session_timeout -
// 2 x heartbeat without an answered group request, and a heartbeat is sent
// one interval after the answer to the last one: that margin must hold two
// intervals, so that one late answer does not lose the lease.
func MinSessionTimeout(heartbeat time.Duration) time.Duration { return 4 * heartbeat }

// validateTracing checks the tracing section with bad.
func (c *Config) validateTracing(bad func(string, ...any)) {
	t := c.Tracing
	if t.OTLPEndpoint != "" {
		u, err := url.Parse(t.OTLPEndpoint)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			bad("tracing.otlp_endpoint: %q: write an http:// or https:// URL, such as http://otel-collector:4318", redactURL(t.OTLPEndpoint))
		case u.User != nil:
			bad("tracing.otlp_endpoint: credentials in the URL are not taken: set OTEL_EXPORTER_OTLP_HEADERS (never logged) instead")
		case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
			// The OTLP exporters take the scheme, host, port and path only.
			bad("tracing.otlp_endpoint: a query or fragment is not sent to the receiver: write scheme, host, port and path; an API key goes in OTEL_EXPORTER_OTLP_HEADERS (never logged)")
		}
	}
	switch t.OTLPProtocol {
	case OTLPHTTP, OTLPGRPC:
	default:
		bad("tracing.otlp_protocol: %q: write http/protobuf or grpc", t.OTLPProtocol)
	}
	if !(t.SampleRatio >= 0 && t.SampleRatio <= 1) { // NaN too
		bad("tracing.sample_ratio: %v: must be between 0 and 1", t.SampleRatio)
	}
}

// redactURL is u without what its user information, query or fragment
// would reveal.
func redactURL(u string) string {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		u = u[:i] + "?REDACTED"
	}
	if p, err := url.Parse(u); err == nil && p.User != nil {
		p.User = url.User("REDACTED")
		return p.String()
	}
	if i := strings.Index(u, "@"); i >= 0 {
		return "REDACTED@" + u[i+1:]
	}
	return u
}
