// Command demo runs outbox-relay end to end on the embedded defaults: a
// scratch MariaDB and the embedded Kafka broker on free ports of 127.0.0.1
// (--db-port, --kafka to choose them), the relay,
// an alarm service that writes IoT alarms with package outbox (business row
// + outbox row in one transaction, one transaction rolled back), a
// read_committed consumer that prints what it receives, and a notification
// service built on package inbox that is killed between its database commit
// and its offset commit and still notifies each alarm exactly once. The
// three services send their spans over OTLP to a receiver inside the demo,
// which prints one alarm's trace: alarm service -> relay -> notifier. Ctrl-C
// (SIGINT) or SIGTERM stops everything it started and exits 0.
//
// Usage: go build -o bin/demo ./examples/demo && bin/demo --relay ./bin/outbox-relay [--once]
// (make demo; `go run` would exit 1 on Ctrl-C whatever the demo returns).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"database/sql"

	"github.com/go-mysql-org/go-mysql/client"
	_ "github.com/go-sql-driver/mysql"
	"github.com/twmb/franz-go/pkg/kgo"

	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/otlpreceiver"
	"github.com/outbox-relay/outbox-relay/outbox"
)

const rootPassword = "relay-dev" // devdb.RootPassword

func main() {
	relayBin := flag.String("relay", "./bin/outbox-relay", "outbox-relay binary")
	dbPort := flag.Int("db-port", 0, "MariaDB port on 127.0.0.1 (0: a free one)")
	kafkaAddr := flag.String("kafka", "127.0.0.1:0", "embedded Kafka listen address (port 0: a free one)")
	once := flag.Bool("once", false, "exit after the first round is received (for CI)")
	notifier := flag.Bool("notifier", false, "run as the notification service (started by the demo itself)")
	dsn := flag.String("dsn", "", "notification service: database/sql DSN")
	crashAfter := flag.Int("crash-after", 0, "notification service: SIGKILL itself after this many database commits")
	otlp := flag.String("otlp", "", "notification service: OTLP/HTTP receiver of its spans")
	flag.Parse()
	if *notifier {
		os.Exit(notifierMain(*dsn, *kafkaAddr, *otlp, *crashAfter))
	}
	if err := run(*relayBin, *dbPort, *kafkaAddr, *once); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

type procs struct{ list []*exec.Cmd }

func (p *procs) start(name string, bin string, args ...string) (*exec.Cmd, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stdout = prefixWriter{name}
	cmd.Stderr = prefixWriter{name}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p.list = append(p.list, cmd)
	return cmd, nil
}

// forget drops a process that has already ended.
func (p *procs) forget(cmd *exec.Cmd) {
	for i, c := range p.list {
		if c == cmd {
			p.list = append(p.list[:i], p.list[i+1:]...)
			return
		}
	}
}

// stopAll ends the processes in reverse order: SIGTERM, then SIGKILL.
func (p *procs) stopAll() {
	for i := len(p.list) - 1; i >= 0; i-- {
		cmd := p.list[i]
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
}

type prefixWriter struct{ name string }

func (w prefixWriter) Write(b []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		fmt.Printf("  [%s] %s\n", w.name, line)
	}
	return len(b), nil
}

func run(relayBin string, dbPort int, kafkaAddr string, once bool) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer func() {
		if err != nil && ctx.Err() != nil {
			// Ctrl-C while starting: a stop asked for, not a failure.
			fmt.Println("== stopped")
			err = nil
		}
	}()
	dbAddr, err := freeAddr(fmt.Sprintf("127.0.0.1:%d", dbPort), "mariadb", "--db-port")
	if err != nil {
		return err
	}
	if kafkaAddr, err = freeAddr(kafkaAddr, "kafka", "--kafka"); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "outbox-relay-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var ps procs
	defer ps.stopAll()
	rcv, err := otlpreceiver.Start() // the services' spans (an OpenTelemetry Collector in production)
	if err != nil {
		return err
	}
	defer rcv.Close() // after the processes have stopped
	appTP, err := tracerProvider(ctx, rcv.HTTPURL, "alarm-service")
	if err != nil {
		return err
	}
	defer shutdown(appTP)

	fmt.Println("== starting MariaDB (binlog ROW, FULL image, FULL metadata, GTID) and the embedded Kafka broker")
	fmt.Printf("   mariadb on %s, kafka on %s\n", dbAddr, kafkaAddr)
	if _, err := ps.start("mariadb", relayBin, "dev", "mariadb", "--port", fmt.Sprint(portOf(dbAddr)), "--data-dir", filepath.Join(dir, "mariadb")); err != nil {
		return err
	}
	if _, err := ps.start("kafka", relayBin, "dev", "kafka", "--listen", kafkaAddr, "--data-dir", filepath.Join(dir, "kafka")); err != nil {
		return err
	}
	db, err := waitDB(ctx, dbAddr)
	if err != nil {
		return err
	}
	defer db.Close()

	fmt.Println("== creating the outbox and alarm_record tables and the relay user")
	for _, q := range []string{
		"CREATE DATABASE IF NOT EXISTS iot",
		`CREATE TABLE IF NOT EXISTS iot.alarm_record (
			id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, device_id VARCHAR(64) NOT NULL,
			level VARCHAR(16) NOT NULL, temperature INT NOT NULL, created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3))`,
		`CREATE TABLE IF NOT EXISTS iot.outbox (
			id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, event_id VARCHAR(64) NOT NULL UNIQUE,
			aggregate_type VARCHAR(64) NOT NULL, aggregate_id VARCHAR(64) NOT NULL, event_type VARCHAR(64) NOT NULL,
			payload JSON NOT NULL, tracingspancontext VARCHAR(1024) NULL,
			created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3))`,
		inbox.DDL("iot.consumed_event"),
		`CREATE TABLE IF NOT EXISTS iot.notification (
			id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, event_id VARCHAR(64) NOT NULL,
			device_id VARCHAR(64) NOT NULL, body TEXT NOT NULL)`,
		"CREATE USER IF NOT EXISTS 'relay'@'%' IDENTIFIED BY 'relay-demo'",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'relay'@'%'",
	} {
		if _, err := db.Execute(q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	cfgPath := filepath.Join(dir, "relay.yaml")
	cfg := fmt.Sprintf(`name: iot-alarms
source:
  hosts: ["%s"]
  user: relay
  password: ${RELAY_MYSQL_PASSWORD}
  server_id: 4242
  tables: ["iot.outbox"]
  start: now
kafka:
  brokers: ["%s"]
router:
  tracing_column: tracingspancontext
tracing:
  otlp_endpoint: %s
http:
  listen: 127.0.0.1:0
log:
  format: console
`, dbAddr, kafkaAddr, rcv.HTTPURL)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return err
	}
	fmt.Println("== starting the relay:", relayBin, "run --config", cfgPath)
	relay := exec.Command(relayBin, "run", "--config", cfgPath)
	relay.Env = append(os.Environ(), "RELAY_MYSQL_PASSWORD=relay-demo", "OTEL_BSP_SCHEDULE_DELAY=100") // spans out every 100 ms
	relay.Stdout, relay.Stderr = prefixWriter{"relay"}, prefixWriter{"relay"}
	relay.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := relay.Start(); err != nil {
		return err
	}
	ps.list = append(ps.list, relay)

	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.ConsumeRegex(), kgo.ConsumeTopics(`^outbox\.event\..*`),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.MetadataMinAge(250*time.Millisecond), kgo.MetadataMaxAge(time.Second),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := waitRelay(ctx, kafkaAddr); err != nil {
		return err
	}

	dsn := fmt.Sprintf("root:%s@tcp(%s)/iot", rootPassword, dbAddr)
	app, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer app.Close()
	fmt.Println("== the alarm service writes alarms with package outbox: business row + outbox row in ONE transaction")
	committed, err := writeAlarms(ctx, app, appTP.Tracer("alarm-service"), 1, 5, true)
	if err != nil {
		return err
	}
	fmt.Println("== a read_committed consumer receives:")
	received := 0
	for round := 1; ; round++ {
		deadline := time.Now().Add(30 * time.Second)
		for received < committed {
			fctx, cancel := context.WithDeadline(ctx, deadline)
			fs := cl.PollFetches(fctx)
			expired := fctx.Err() != nil
			cancel()
			if ctx.Err() != nil {
				fmt.Println("== stopping")
				return nil
			}
			if expired {
				return fmt.Errorf("received %d of %d events within 30s", received, committed)
			}
			fs.EachRecord(func(r *kgo.Record) {
				id := ""
				for _, h := range r.Headers {
					if h.Key == "id" {
						id = string(h.Value)
					}
				}
				received++
				fmt.Printf("   topic=%s partition=%d key=%s id=%s value=%s\n", r.Topic, r.Partition, r.Key, id, r.Value)
			})
		}
		fmt.Printf("== %d events committed, rolled-back ones never published; consumer received %d\n", committed, received)
		if round == 1 {
			if _, err := notifyRound(ctx, &ps, app, dsn, kafkaAddr, rcv.HTTPURL, committed); err != nil {
				return err
			}
			if err := showTrace(ctx, rcv); err != nil {
				return err
			}
		}
		if once {
			return nil
		}
		fmt.Println("== (Ctrl-C to stop) another alarm in 3s ...")
		select {
		case <-ctx.Done():
			fmt.Println("== stopping")
			return nil
		case <-time.After(3 * time.Second):
		}
		n, err := writeAlarms(ctx, app, appTP.Tracer("alarm-service"), round*100, 1, false)
		if err != nil {
			return err
		}
		committed += n
	}
}

func waitDB(ctx context.Context, addr string) (*client.Conn, error) {
	deadline := time.Now().Add(90 * time.Second)
	for {
		c, err := client.ConnectWithTimeout(addr, "root", rootPassword, "", 2*time.Second)
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("mariadb at %s did not come up: %w", addr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitRelay polls until the relay has written its first checkpoint.
func waitRelay(ctx context.Context, broker string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumeTopics("outbox-relay.checkpoints"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(wctx)
		if wctx.Err() != nil {
			return errors.New("the relay wrote no checkpoint within 60s")
		}
		if fs.NumRecords() > 0 {
			return nil
		}
	}
}

// devices are the alarms' aggregate ids (the records' keys): chosen so that
// murmur2(key) % 3 puts them in three different partitions of the demo's
// 3-partition topic (device-0..2 all hashed to one, as if partitioning
// were broken). TestDemoDevicesSpreadOverPartitions checks it.
var devices = []string{"boiler-1", "freezer-2", "boiler-7"}

// writeAlarms commits n alarms (and, if withRollback, one rolled back) the
// way the alarm service does: the alarm_record row and its event, written
// with package outbox, in one transaction, in a span of tracer (its context
// goes into the outbox row's tracing column). It returns how many committed.
func writeAlarms(ctx context.Context, db *sql.DB, tracer trace.Tracer, first, n int, withRollback bool) (int, error) {
	cols := outbox.DefaultColumns
	cols.TracingSpanContext = "tracingspancontext"
	w, err := outbox.New("iot.outbox", outbox.WithColumns(cols))
	if err != nil {
		return 0, err
	}
	tx := func(i int, commit bool) error {
		dev := devices[i%len(devices)]
		temp := 85 + i
		ctx, span := tracer.Start(ctx, "raise alarm")
		defer span.End()
		t, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer t.Rollback() //nolint:errcheck // a no-op after Commit
		if _, err := t.ExecContext(ctx, "INSERT INTO iot.alarm_record (device_id, level, temperature) VALUES (?, 'CRITICAL', ?)", dev, temp); err != nil {
			return err
		}
		ids, err := w.Write(ctx, t, outbox.Event{AggregateType: "alarm", AggregateID: dev, Type: "AlarmCreated",
			Payload: []byte(fmt.Sprintf(`{"deviceId":"%s","level":"CRITICAL","temperature":%d}`, dev, temp))})
		if err != nil {
			return err
		}
		end := "COMMIT"
		if commit {
			err = t.Commit()
		} else {
			end, err = "ROLLBACK", t.Rollback()
		}
		fmt.Printf("   app: alarm %s for %s at %d°C: %s\n", ids[0], dev, temp, end)
		return err
	}
	committed := 0
	for i := first; i < first+n; i++ {
		if err := tx(i, true); err != nil {
			return committed, err
		}
		committed++
		if withRollback && i == first+1 {
			if err := tx(first+n+50, false); err != nil {
				return committed, err
			}
		}
	}
	return committed, nil
}
