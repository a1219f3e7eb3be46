//go:build integration

package itest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// of keeps the records of schema s's rows (event ids start with its name).
func of(recs []Record, s *Schema) []Record {
	var out []Record
	for _, r := range recs {
		if strings.HasPrefix(r.ID, s.Name+"-") {
			out = append(out, r)
		}
	}
	return out
}

// Two instances of one pipeline name capture different tables: A captures
// both outbox tables, B only the first. Started beside A, B stops at once as
// A's standby (it could not take A's lease over), naming the difference; A
// publishes on. Started after A stopped, B must not resume from A's
// checkpoint silently (the second table's rows would never be published):
// it stops with a configuration error naming both sets of tables and the
// fix. `checkpoint tables`, the operator's deliberate change, records B's
// tables; B then resumes from A's position.
func TestInstancesWithOtherTablesStopAtTakeover(t *testing.T) {
	k := StartKafka(t)
	s1, s2 := env.NewSchema(t), env.NewSchema(t)
	cfgA := env.RelayConfig(k, s1.Table(), s2.Table())
	cfgB := cfgA
	cfgB.Source.Tables = []string{s1.Table()}
	cfgB.Source.ServerID++
	pathB := WriteConfig(t, cfgB)
	ctx := context.Background()

	a := RunRelay(t, cfgA)
	a.WaitReady(t)
	b := RunRelay(t, cfgB)
	for _, s := range []*Schema{s1, s2} {
		if _, err := s.Write(ctx, WriteOptions{Writers: 1, Transactions: 20, Tag: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	err := b.StoppedWith(t)
	t.Logf("the standby stopped beside the active instance: %v", err)
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "capture different things") ||
		relay.ExitCode(err) != relay.ExitConfig {
		t.Fatalf("the standby that captures other tables stopped with %v (exit %d); want a configuration error saying so, exit %d",
			err, relay.ExitCode(err), relay.ExitConfig)
	}
	WaitCheckpoint(t, cfgA, Head(t, env.DB), time.Minute) // A publishes on
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Schema{s1, s2} {
		if _, err := s.Write(ctx, WriteOptions{Writers: 1, Transactions: 20, Tag: "b"}); err != nil {
			t.Fatal(err)
		}
	}

	b = RunRelay(t, cfgB)
	err = b.StoppedWith(t)
	t.Logf("B, started alone after A, stopped: %v", err)
	if !errors.Is(err, checkpoint.ErrTablesChanged) || !strings.Contains(err.Error(), s2.Table()) ||
		!strings.Contains(err.Error(), "checkpoint tables") {
		t.Fatalf("the standby stopped with %v; want checkpoint.ErrTablesChanged naming %s and the fix", err, s2.Table())
	}
	if code := relay.ExitCode(err); code != relay.ExitConfig {
		t.Fatalf("exit code %d; want %d", code, relay.ExitConfig)
	}
	recs := Consume(t, k.Brokers, cfgA.Router.TopicPrefix)
	for _, s := range []*Schema{s1, s2} {
		if n := len(of(recs, s)); n != 20 {
			t.Fatalf("%s: %d records after the stop; want the 20 A published", s.Table(), n)
		}
	}

	// The operator means it: B captures only the first table from now on.
	Eventually(t, 30*time.Second, func() error { // once A's last checkpoint no longer looks live
		out, errOut, code := env.CLI(t, "checkpoint", "tables", "--config", pathB, "--yes")
		if code != 0 {
			return fmt.Errorf("checkpoint tables: exit %d\n%s\n%s", code, out, errOut)
		}
		return nil
	})
	b = RunRelay(t, cfgB)
	b.WaitReady(t)
	WaitCheckpoint(t, cfgB, Head(t, env.DB), time.Minute)
	recs = Consume(t, k.Brokers, cfgA.Router.TopicPrefix)
	rep := Compare(t, s1, of(recs, s1))
	if !rep.OK() || rep.Expected != 40 {
		t.Fatalf("%s after checkpoint tables: %s; want its 40 rows exactly once", s1.Table(), rep)
	}
	if n := len(of(recs, s2)); n != 20 {
		t.Fatalf("%s: %d records; want the 20 published while it was captured", s2.Table(), n)
	}
}

// tableMissing is outbox_relay_captured_table_missing{table} (-1: not
// exported).
func tableMissing(t *testing.T, m *metrics.Metrics, table string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "outbox_relay_captured_table_missing" {
			continue
		}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "table" && l.GetValue() == table {
					return mt.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// A captured table that does not exist (a typo in source.tables): `run`
// starts and publishes the tables that exist, but says so: a warning naming
// the table and the host, and outbox_relay_captured_table_missing{table} 1
// until the table is created (a migration after the start is an everyday
// setup: no stop), then 0.
func TestMissingCapturedTableWarns(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, s, cfg := env.Pipeline(t)
	typo := s.Name + ".outbx"
	cfg.Source.Tables = append(cfg.Source.Tables, typo)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	Eventually(t, 30*time.Second, func() error {
		if !strings.Contains(r.Logs(), `"table":"`+typo+`"`) || !strings.Contains(r.Logs(), "captured table does not exist") {
			return fmt.Errorf("no warning names %s", typo)
		}
		if v := tableMissing(t, r.Metrics, typo); v != 1 {
			return fmt.Errorf("outbox_relay_captured_table_missing{table=%q} = %v", typo, v)
		}
		return nil
	})
	if v := tableMissing(t, r.Metrics, s.Table()); v != 0 {
		t.Fatalf("outbox_relay_captured_table_missing{table=%q} = %v; want 0", s.Table(), v)
	}
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 10, Tag: "a"}); err != nil {
		t.Fatal(err)
	}
	requireExactlyOnce(t, r, k, s, cfg, 10)

	if err := env.DB.Exec("CREATE TABLE " + typo + " LIKE " + s.Table()); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, func() error {
		if v := tableMissing(t, r.Metrics, typo); v != 0 {
			return fmt.Errorf("outbox_relay_captured_table_missing{table=%q} = %v once created", typo, v)
		}
		if !strings.Contains(r.Logs(), "captured table exists now") {
			return fmt.Errorf("no line says %s exists now", typo)
		}
		return nil
	})
}

// The relay samples the source on a connection of its own (binlog
// retention, captured tables that do not exist). When that connection
// drops while the relay is caught up (a DBA's KILL, a proxy, a query past
// source.query_timeout), the next sample connects again: a table created
// afterwards is seen, not reported missing for good.
func TestMissingCapturedTableSeenCreatedAfterTheSampleConnectionDrops(t *testing.T) {
	BrokerOnlyAsSink(t)
	_, s, cfg := env.Pipeline(t)
	typo := s.Name + ".outbx"
	cfg.Source.Tables = append(cfg.Source.Tables, typo)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	Eventually(t, 30*time.Second, func() error {
		if v := tableMissing(t, r.Metrics, typo); v != 1 {
			return fmt.Errorf("outbox_relay_captured_table_missing{table=%q} = %v", typo, v)
		}
		return nil
	})
	// Every connection of the relay's user but the binlog stream's: the
	// sample connection.
	killed := 0
	rows, err := env.DB.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = '" + cfg.Source.User + "' AND COMMAND <> 'Binlog Dump'")
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		if err := env.DB.Exec("KILL CONNECTION " + row[0]); err == nil {
			killed++
		}
	}
	if killed == 0 {
		t.Fatal("no sample connection to kill")
	}
	if err := env.DB.Exec("CREATE TABLE " + typo + " LIKE " + s.Table()); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, func() error {
		if v := tableMissing(t, r.Metrics, typo); v != 0 {
			return fmt.Errorf("outbox_relay_captured_table_missing{table=%q} = %v once created", typo, v)
		}
		if !strings.Contains(r.Logs(), "captured table exists now") {
			return fmt.Errorf("no line says %s exists now", typo)
		}
		return nil
	})
}
