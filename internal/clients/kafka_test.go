package clients

import (
	"context"
	"crypto/tls"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// roleConfig is a configuration whose every Kafka setting differs from its
// default, so that a role that drops one shows.
func roleConfig(delivery config.Delivery) config.Config {
	cfg := config.Default()
	cfg.Name = "orders"
	cfg.Kafka.Brokers = []string{"127.0.0.1:1", "127.0.0.1:2"}
	cfg.Kafka.Delivery = delivery
	cfg.Kafka.RequestTimeout = 7 * time.Second
	cfg.Kafka.TransactionTimeout = 42 * time.Second
	cfg.Kafka.Linger = 2 * time.Millisecond
	cfg.Kafka.Compression = config.CompressZstd
	cfg.Kafka.Batch.MaxRecords = 1234
	cfg.Kafka.ClientMetrics = true
	cfg.Kafka.TLS = config.TLS{Enabled: true, ServerName: "kafka.example"}
	cfg.Kafka.SASL = config.SASL{Mechanism: config.SASLPlain, User: "relay", Password: "pw"}
	cfg.HA.LockTopic = "locks"
	cfg.HA.SessionTimeout = 9 * time.Second
	cfg.HA.HeartbeatInterval = 1500 * time.Millisecond
	return cfg
}

// groupErrors is a lock member's hook (as the elector's).
type groupErrors struct{}

func (groupErrors) OnGroupManageError(error) {}

// opt is one option a role's client must have: OptValue(of) == want.
type opt struct {
	of   any
	want any
}

func connection() []opt {
	return []opt{
		{kgo.SeedBrokers, []string{"127.0.0.1:1", "127.0.0.1:2"}},
		{kgo.RequestTimeoutOverhead, 7 * time.Second},
		{kgo.RetryTimeout, 7 * time.Second},
		{kgo.DialTLS, true},
		{kgo.ProducerBatchCompression, []kgo.CompressionCodec{kgo.ZstdCompression()}},
	}
}

// TestClientRoles builds every role's client from one configuration and
// checks the settings each must keep: a role that loses its transactional
// id, transaction timeout, linger, isolation level, group timeouts, client
// id or logger, or the connection settings (brokers, timeouts, TLS, SASL,
// compression), fails here.
func TestClientRoles(t *testing.T) {
	eo, err := NewKafka(roleConfig(config.ExactlyOnce))
	if err != nil {
		t.Fatal(err)
	}
	alo, err := NewKafka(roleConfig(config.AtLeastOnce))
	if err != nil {
		t.Fatal(err)
	}
	logged := eo.WithLogger(zerolog.Nop())
	m := metrics.New("test")
	attempt := Attempt{BatchMaxBytes: func(string) int32 { return 1 << 20 }, Metrics: m}
	noop := func(context.Context, *kgo.Client, map[string][]int32) {}
	member := LockMember{InstanceID: "host-a", ClientID: "fp-capture.r4nd", Hooks: groupErrors{}, Assigned: noop, Revoked: noop, Lost: noop}
	parts := map[string]map[int32]kgo.Offset{"outbox-relay.dead-letter.orders": {0: kgo.NewOffset().At(3)}}

	for _, role := range []struct {
		name   string
		opts   []kgo.Opt
		logger bool
		hooks  int  // kgo.WithHooks: the client metrics' hook; the lock member's own
		placed bool // records placed by this package's partitioner
		want   []opt
	}{
		{"admin", eo.Admin(), false, 0, false, []opt{
			{kgo.TransactionalID, ""}, {kgo.ProducerLinger, 2 * time.Millisecond}, {kgo.ConsumerGroup, ""},
			{kgo.FetchIsolationLevel, int8(0)},
		}},
		{"admin of the relay (logged)", logged.Admin(), true, 0, false, []opt{{kgo.TransactionalID, ""}}},
		{"relay producer, exactly-once", logged.Producer(0, attempt), true, 1, true, []opt{
			{kgo.TransactionalID, "orders"}, {kgo.TransactionTimeout, 42 * time.Second},
			{kgo.ProducerLinger, minExactlyOnceLinger}, {kgo.MaxBufferedRecords, int64(4 * 1234)},
			{kgo.MetadataMinAge, 250 * time.Millisecond},
		}},
		{"second lane producer", logged.Producer(1, attempt), true, 0, true, []opt{
			{kgo.TransactionalID, "orders#2"}, {kgo.TransactionTimeout, 42 * time.Second},
			{kgo.ProducerLinger, minExactlyOnceLinger}, {kgo.MaxBufferedRecords, int64(4 * 1234)},
		}},
		{"relay producer, at-least-once", alo.WithLogger(zerolog.Nop()).Producer(0, attempt), true, 1, true, []opt{
			{kgo.TransactionalID, ""}, {kgo.ProducerLinger, 2 * time.Millisecond}, {kgo.MaxBufferedRecords, int64(4 * 1234)},
		}},
		{"relay producer without metrics", logged.Producer(0, Attempt{BatchMaxBytes: attempt.BatchMaxBytes}), true, 0, true, nil},
		{"lock group member", logged.LockGroup(member), true, 1, false, []opt{
			{kgo.ConsumerGroup, "outbox-relay.lock.orders"}, {kgo.ConsumeTopics, []string{"locks"}},
			{kgo.InstanceID, "host-a"}, {kgo.ClientID, "fp-capture.r4nd"},
			{kgo.SessionTimeout, 9 * time.Second}, {kgo.HeartbeatInterval, 1500 * time.Millisecond},
			{kgo.RebalanceTimeout, 9 * time.Second}, {kgo.DisableAutoCommit, true}, {kgo.FetchMaxWait, time.Second},
			{kgo.TransactionalID, ""},
		}},
		{"replay producer", eo.Replay(), false, 0, true, []opt{
			{kgo.TransactionalID, "orders.replay"}, {kgo.TransactionTimeout, 42 * time.Second},
			{kgo.ProducerLinger, 2 * time.Millisecond},
		}},
		{"dead-letter replay producer", eo.DeadLetterReplay(), false, 0, true, []opt{
			{kgo.TransactionalID, "orders.dead-letter-replay"}, {kgo.TransactionTimeout, 42 * time.Second},
		}},
		{"dead-letter reader", eo.DeadLetterReader(parts), false, 0, false, []opt{
			{kgo.FetchIsolationLevel, int8(1)}, {kgo.KeepControlRecords, true}, {kgo.TransactionalID, ""},
		}},
	} {
		t.Run(role.name, func(t *testing.T) {
			cl, err := kgo.NewClient(role.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			for _, o := range append(connection(), role.want...) {
				if got := cl.OptValue(o.of); !reflect.DeepEqual(got, o.want) {
					t.Errorf("%s: %v (%T), want %v (%T)", optName(o.of), got, got, o.want, o.want)
				}
			}
			if c, _ := cl.OptValue(kgo.DialTLSConfig).(*tls.Config); c == nil || c.ServerName != "kafka.example" {
				t.Errorf("tls: %+v, want server name kafka.example", c)
			}
			if ms, _ := cl.OptValue(kgo.SASL).([]sasl.Mechanism); len(ms) != 1 || ms[0].Name() != "PLAIN" {
				t.Errorf("sasl: %v, want PLAIN", ms)
			}
			if got := cl.OptValue(kgo.WithLogger) != nil; got != role.logger {
				t.Errorf("logs into the relay's logger: %v, want %v", got, role.logger)
			}
			if hooks, _ := cl.OptValue(kgo.WithHooks).([]kgo.Hook); len(hooks) != role.hooks {
				t.Errorf("hooks: %d, want %d", len(hooks), role.hooks)
			}
			if role.placed {
				switch p := cl.OptValue(kgo.RecordPartitioner).(type) {
				case placed:
				default:
					t.Errorf("partitioner %T: not the relay's (every record in the partition its builder chose)", p)
				}
			}
		})
	}
	// The dead-letter reader reads exactly the partitions it is given.
	cl, err := kgo.NewClient(eo.DeadLetterReader(parts)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if got, _ := cl.OptValue(kgo.ConsumePartitions).(map[string]map[int32]kgo.Offset); !reflect.DeepEqual(got, parts) {
		t.Errorf("dead-letter reader partitions: %v, want %v", got, parts)
	}
}

func optName(o any) string {
	return strings.TrimPrefix(runtime.FuncForPC(reflect.ValueOf(o).Pointer()).Name(), "github.com/twmb/franz-go/pkg/kgo.")
}

// The checkpoint store of an exactly-once pipeline accepts only checkpoints
// written in a transaction; at-least-once, it takes one written without.
func TestCheckpointStoreRole(t *testing.T) {
	c := kafkatest.Cluster(t, kfake.NumBrokers(1))
	stores := map[config.Delivery]*checkpoint.Store{}
	for _, d := range []config.Delivery{config.ExactlyOnce, config.AtLeastOnce} {
		cfg := config.Default()
		cfg.Name, cfg.Kafka.Brokers, cfg.Kafka.Delivery, cfg.Kafka.CheckpointTopic = "orders", c.ListenAddrs(), d, "cps"
		k, err := NewKafka(cfg)
		if err != nil {
			t.Fatal(err)
		}
		stores[d] = k.CheckpointStore()
		if got := stores[d].Topic(); got != "cps" {
			t.Fatalf("%s: checkpoint topic %q, want cps", d, got)
		}
		if d == config.AtLeastOnce {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cl, err := kgo.NewClient(k.Admin()...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if err := stores[d].EnsureTopic(ctx, kadm.NewClient(cl), 1); err != nil {
				t.Fatal(err)
			}
			if err := stores[d].WritePlain(ctx, "orders", &checkpoint.Checkpoint{Name: "orders", GTIDSet: "0-1-7", Flavor: "mariadb"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cp, err := stores[config.AtLeastOnce].Load(ctx, "orders"); err != nil || cp == nil || cp.GTIDSet != "0-1-7" {
		t.Fatalf("at-least-once store: %+v %v", cp, err)
	}
	if cp, err := stores[config.ExactlyOnce].Load(ctx, "orders"); !errors.Is(err, checkpoint.ErrNotTransactional) {
		t.Fatalf("exactly-once store took a checkpoint written without a transaction: %+v %v", cp, err)
	}
}

// Exactly-once lingers at least minExactlyOnceLinger (every batch's commit
// flushes, so a record never waits longer than its batch); at-least-once
// sends as configured (kafka.linger, default 0: it has no flush to wait for).
func TestProducerLinger(t *testing.T) {
	for _, tc := range []struct {
		delivery   config.Delivery
		configured time.Duration
		want       time.Duration
	}{
		{config.ExactlyOnce, 0, minExactlyOnceLinger},
		{config.ExactlyOnce, time.Millisecond, minExactlyOnceLinger},
		{config.ExactlyOnce, 50 * time.Millisecond, 50 * time.Millisecond},
		{config.AtLeastOnce, 0, 0},
		{config.AtLeastOnce, 3 * time.Millisecond, 3 * time.Millisecond},
	} {
		cfg := config.Default()
		cfg.Name, cfg.Kafka.Brokers = "p", []string{"127.0.0.1:1"}
		cfg.Kafka.Delivery, cfg.Kafka.Linger = tc.delivery, tc.configured
		k, err := NewKafka(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(k.Producer(0, Attempt{BatchMaxBytes: func(string) int32 { return 1 << 20 }})...)
		if err != nil {
			t.Fatal(err)
		}
		got := cl.OptValue(kgo.ProducerLinger)
		cl.Close()
		if got != tc.want {
			t.Errorf("%s with kafka.linger %s: the producer lingers %v, want %s", tc.delivery, tc.configured, got, tc.want)
		}
	}
}

// Every kafka.compression makes a client that compresses with it.
func TestProducerCompressions(t *testing.T) {
	for c, want := range map[config.Compression]kgo.CompressionCodec{
		config.CompressNone: kgo.NoCompression(), config.CompressGzip: kgo.GzipCompression(), config.CompressSnappy: kgo.SnappyCompression(),
		config.CompressLZ4: kgo.Lz4Compression(), config.CompressZstd: kgo.ZstdCompression(),
	} {
		cfg := config.Default()
		cfg.Kafka.Brokers, cfg.Kafka.Compression = []string{"127.0.0.1:1"}, c
		k, err := NewKafka(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(k.Admin()...)
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		got := cl.OptValue(kgo.ProducerBatchCompression)
		cl.Close()
		if !reflect.DeepEqual(got, []kgo.CompressionCodec{want}) {
			t.Errorf("%s: compresses with %v", c, got)
		}
	}
}

// The clients of one pipeline are built at once on their goroutines (the
// lock group's member beside an attempt's producer and admin client, the
// background audit's readers): franz-go writes into the compression
// option's codecs when it builds a client, so no two roles' options may
// share one (a data race under -race; two clients compressing by one
// slice).
func TestRolesShareNoOptionFranzGoWrites(t *testing.T) {
	cfg := config.Default()
	cfg.Name, cfg.Kafka.Brokers, cfg.Kafka.Compression = "p", []string{"127.0.0.1:1"}, config.CompressZstd
	k, err := NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	k = k.WithLogger(zerolog.Nop())
	anyTopic := Attempt{BatchMaxBytes: func(string) int32 { return 1 << 20 }}
	roles := [][]kgo.Opt{k.Admin(), k.Admin(), k.Producer(0, anyTopic), k.Producer(1, anyTopic),
		k.LockGroup(LockMember{InstanceID: "a", ClientID: "a", Hooks: newClientHook{}}), k.Replay(), k.DeadLetterReplay()}
	clients := make([]*kgo.Client, len(roles))
	errs := make([]error, len(roles))
	done := make(chan int)
	for i, opts := range roles {
		go func() {
			clients[i], errs[i] = kgo.NewClient(opts...)
			done <- i
		}()
	}
	for range roles {
		<-done
	}
	seen := map[*kgo.CompressionCodec]int{}
	for i, cl := range clients {
		if errs[i] != nil {
			t.Fatalf("role %d: %v", i, errs[i])
		}
		codecs, _ := cl.OptValue(kgo.ProducerBatchCompression).([]kgo.CompressionCodec)
		cl.Close()
		if len(codecs) == 0 {
			t.Fatalf("role %d: no compression", i)
		}
		if j, ok := seen[&codecs[0]]; ok {
			t.Errorf("roles %d and %d share one compression option", j, i)
		}
		seen[&codecs[0]] = i
	}
}

// newClientHook is a hook that does nothing (LockGroup takes one).
type newClientHook struct{}

func (newClientHook) OnNewClient(*kgo.Client) {}
