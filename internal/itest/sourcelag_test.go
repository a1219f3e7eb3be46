//go:build integration

package itest

import (
	"math"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func gaugeValue(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s: no single series", name)
	return 0
}

func relayState(m *metrics.Metrics) string { return string(m.State()) }

// The purge margin stays reported during a Kafka outage. The failure
// guarded against: a Kafka outage is the outage during which the source
// keeps purging binlogs while the checkpoint does not move (a source outage
// purges nothing). The runbook's OutboxRelayPurgeMarginLow: "It falls when
// the pipeline is stuck". But once Kafka stops answering the lock group,
// the active instance drops to standby, and purge margin (and checkpoint
// age) are NaN on a standby: during a Kafka outage of any length the purge
// alerts cannot fire, and the relay later stops with exit 66.
func TestPurgeMarginReportedDuringKafkaOutage(t *testing.T) {
	BrokerOnlyAsSink(t)
	if err := env.DB.Exec("SET GLOBAL expire_logs_days = 7"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.DB.Exec("SET GLOBAL expire_logs_days = 0") }()
	k, s, cfg := env.Pipeline(t)
	p := RunRelay(t, cfg)
	p.WaitReady(t)
	if _, err := s.Write(t.Context(), WriteOptions{Writers: 1, Transactions: 3, Devices: 2}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, func() error {
		if v := gaugeValue(t, p.Metrics, "outbox_relay_checkpoint_purge_margin_seconds"); math.IsNaN(v) {
			return errString("margin not known yet")
		}
		return nil
	})
	before := gaugeValue(t, p.Metrics, "outbox_relay_checkpoint_purge_margin_seconds")
	t.Logf("streaming: state %s, purge margin %.0fs", relayState(p.Metrics), before)

	k.Stop(t) // Kafka outage; the source keeps its (7-day) purge schedule
	time.Sleep(20 * time.Second)
	margin := gaugeValue(t, p.Metrics, "outbox_relay_checkpoint_purge_margin_seconds")
	age := gaugeValue(t, p.Metrics, "outbox_relay_checkpoint_age_seconds")
	t.Logf("Kafka down 20s: state %s, purge margin %v, checkpoint age %v", relayState(p.Metrics), margin, age)
	if math.IsNaN(margin) {
		t.Fatalf("during a Kafka outage the purge margin is NaN (state %s): OutboxRelayPurgeMarginLow/Critical cannot fire while the checkpoint ages", relayState(p.Metrics))
	}
	k.Start(t)
}

type errString string

func (e errString) Error() string { return string(e) }

// Source lag is not 0 while a big transaction is read. The failure guarded
// against: outbox_relay_source_lag_seconds is "0 once a heartbeat arrived
// after the last transaction handled", and nothing clears that until the
// NEXT COMMIT is handled. A bulk INSERT ... SELECT of outbox rows (one big
// transaction, "any size" in the README) arriving at an idle relay is read
// and published for as long as Kafka takes; all that time the relay is
// behind (the transaction was committed long ago, more may follow) but the
// lag reads 0, so OutboxRelayLagHigh cannot fire, and checkpoints with a
// partial keep OutboxRelayCheckpointStalled quiet too. Kafka is slowed down
// here (each produce answered after 300ms, batches of 20 records) to
// stretch a 3000-row transaction over a minute and more.
func TestLagNotZeroWhileReadingBigTransaction(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	if k.Cluster == nil {
		t.Skip("slowing every produce needs the embedded broker's request control")
	}
	cfg.Kafka.Batch.MaxRecords = 20
	p := RunRelay(t, cfg)
	p.WaitReady(t)
	Eventually(t, 15*time.Second, func() error { // idle: a heartbeat arrives, lag 0
		if !p.Metrics.AtHead() {
			return errString("no heartbeat handled yet")
		}
		return nil
	})
	if lag := gaugeValue(t, p.Metrics, "outbox_relay_source_lag_seconds"); lag != 0 {
		t.Fatalf("idle lag %v", lag)
	}
	k.Cluster.ControlKey(0 /* Produce */, func(kmsgReq kmsgRequest) (kmsgResponse, error, bool) {
		k.Cluster.KeepControl()
		k.Cluster.SleepControl(func() { time.Sleep(300 * time.Millisecond) })
		return nil, nil, false
	})
	// 600 rows in batches of 20, each produce answered after 300ms: about
	// 9s of publishing one transaction (3000 rows and a minute in the
	// a shorter version of the same state).
	const rows = 600
	committed := time.Now()
	if err := s.BigInsert(rows, "bulk"); err != nil {
		t.Fatal(err)
	}
	samples, zero := 0, 0.0
	Eventually(t, time.Minute, func() error {
		time.Sleep(250 * time.Millisecond) // pace the samples (each counts every topic)
		lag := gaugeValue(t, p.Metrics, "outbox_relay_source_lag_seconds")
		pub := CountAll(t, k.Brokers, cfg.Router.TopicPrefix)
		if pub >= rows {
			return nil
		}
		if since := time.Since(committed); since > 2*time.Second {
			samples++
			t.Logf("%4.1fs after the commit: lag %v, records published %d, state %s", since.Seconds(), lag, pub, relayState(p.Metrics))
			// Once the loop has handled the commit (and a heartbeat), only
			// the last batch or two are in flight to Kafka: publishing
			// latency, not source lag.
			if lag == 0 && zero == 0 && pub < rows-2*cfg.Kafka.Batch.MaxRecords {
				zero = since.Seconds()
			}
		}
		return errString("still publishing")
	})
	if samples < 2 {
		t.Fatalf("published in %s: too fast to observe (%d samples)", time.Since(committed), samples)
	}
	if zero > 0 {
		t.Fatalf("the relay was still publishing a transaction committed %.1fs ago, and lag read 0", zero)
	}
}

type (
	kmsgRequest  = kmsg.Request
	kmsgResponse = kmsg.Response
)

// behind_bytes is 0 after a restart at the head of a quiet source. The
// failure guarded against: outbox_relay_source_behind_bytes after a restart
// on a quiet source. The server starts a GTID dump at the beginning of the
// binlog file that holds the position, skips (does not send) the
// transactions the relay has, then sends heartbeats. The reader's position
// moves only on events it receives (heartbeats, which carry the server's
// position, are ignored), so it stays at offset 4 of the file: behind_bytes
// reports the size of the binlog file (up to max_binlog_size, 1 GiB) for a
// relay that is at the head, until the next transaction.
func TestBehindBytesZeroAfterRestartOnQuietSource(t *testing.T) {
	BrokerOnlyAsSink(t)
	_, s, cfg := env.Pipeline(t)
	p := RunRelay(t, cfg)
	p.WaitReady(t)
	if err := s.BigInsert(2000, "fill"); err != nil { // some bytes in the current binlog
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	p2 := RunRelay(t, cfg)
	p2.WaitReady(t)
	time.Sleep(12 * time.Second) // two samples (every 5s); the source is quiet
	behind := gaugeValue(t, p2.Metrics, "outbox_relay_source_behind_bytes")
	lag := gaugeValue(t, p2.Metrics, "outbox_relay_source_lag_seconds")
	rows, err := env.DB.Query("SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted relay at the head of a quiet source: behind_bytes %v, lag %v; server: %v", behind, lag, rows)
	if behind > 1000 {
		t.Fatalf("a relay at the head reports %.0f bytes behind", behind)
	}
}
