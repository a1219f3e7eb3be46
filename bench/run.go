package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
)

type harness struct {
	dir       string
	bin       string
	binB      string // -relay-bin-b: a second relay binary, exactly-once, as one more contender of the catch-up rounds
	db        *devdb.Server
	broker    string
	kafka     *exec.Cmd
	brokerPID int  // the broker's process, for its CPU time per run (0: unknown)
	apache    bool // the broker in use is Apache Kafka (not kfake)
	// noBrokerGC: -broker-gc=false (collectBrokerHeap does nothing);
	// brokerGCWarned: its failure was reported.
	noBrokerGC, brokerGCWarned bool
	// brokerDir is deploy/dev/kafka.sh's KAFKA_DIR of the Apache Kafka in
	// use, whose gc.log gives the broker's GC pauses per latency run ("":
	// unknown).
	brokerDir string
	report    strings.Builder
	seq       int
	runID     string                 // in every topic and relay name: runs can share a broker
	binlog    map[string]binlogPos   // database -> binlog position before its rows (debezium.go)
	loadEnd   map[string]binlogPos   // database -> binlog position after its rows (raw.go)
	tune      []func(*config.Config) // applied to every relay configuration (flags such as -linger)
	// latencyProfiles: a directory where each latency run's relay writes
	// its CPU profile (-latency-profiles); "" for none.
	latencyProfiles string
	// latencySteps: a directory for each latency run's events and the
	// relay's step trace (-latency-steps, steps.go); "" for none.
	latencySteps string
	latencyNames map[string]int // runs of each name so far (latency.go)
	threadCPU    bool           // -broker-threads (threads.go)
}

func (h *harness) printf(format string, a ...any) {
	fmt.Fprintf(&h.report, format, a...)
	fmt.Printf(format, a...)
}

// options are the command line of a report run.
type options struct {
	n, bigTx, latencySeconds, rounds int
	brokers                          []string // kfake, kafka: a part of the report each, in this order
	kafkaAddr                        string   // an Apache Kafka to use; "" starts deploy/dev/kafka.sh
	sections                         map[string]bool
	out                              string
	args                             string        // the command line, for the report
	relayBin                         string        // a relay binary to measure instead of building ./cmd/outbox-relay
	relayBinB                        string        // a second relay binary, exactly-once, one more catch-up contender
	debeziumShapes                   []string      // shapes the debezium section measures
	shapes                           []string      // shapes the catchup and batch sections measure
	batchRecords                     []int         // kafka.batch.max_records values the batch section compares
	linger                           time.Duration // kafka.linger of every relay run; < 0: the default
	lanes                            int           // kafka.transaction_lanes of every relay run; 0: the default
	latencyRuns                      []latencyRun  // section 2's runs
	latencyProfiles                  string        // a directory for the relay's CPU profile of each latency run
	latencySteps                     string        // a directory for each latency run's events and step trace
	brokerThreads                    bool          // print the broker's CPU per thread for each catch-up run
	noBrokerGC                       bool          // -broker-gc=false
	auditN                           int           // rows of the audit section
}

func run(o options) error {
	dir, err := os.MkdirTemp("", "outbox-relay-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	h := &harness{dir: dir, bin: filepath.Join(dir, "outbox-relay"), runID: time.Now().UTC().Format("150405")}
	h.latencyProfiles = o.latencyProfiles
	h.latencySteps = o.latencySteps
	h.threadCPU = o.brokerThreads
	h.noBrokerGC = o.noBrokerGC
	if o.lanes > 0 {
		h.tune = append(h.tune, func(c *config.Config) { c.Kafka.TransactionLanes = o.lanes })
	}
	if o.linger >= 0 {
		h.tune = append(h.tune, func(c *config.Config) { c.Kafka.Linger = o.linger })
	}
	if o.relayBinB != "" {
		if h.binB, err = filepath.Abs(o.relayBinB); err != nil {
			return err
		}
	}
	if o.relayBin != "" {
		if h.bin, err = filepath.Abs(o.relayBin); err != nil {
			return err
		}
	} else if out, err := exec.Command("go", "build", "-o", h.bin, "./cmd/outbox-relay").CombinedOutput(); err != nil {
		return fmt.Errorf("build relay: %v\n%s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx := context.Background()
	settings := map[string]string{"innodb-buffer-pool-size": "512M", "max-binlog-size": "1G"}
	if o.sections["debezium"] {
		settings["version"] = debeziumVersionString
	}
	h.db, err = devdb.Start(ctx, devdb.Options{Dir: filepath.Join(dir, "db"), Settings: settings})
	if err != nil {
		return err
	}
	defer h.db.Stop()

	h.printf("# outbox-relay benchmarks\n\n")
	h.printf("Measured by `go run ./bench %s`, %s.\n\n", o.args, time.Now().UTC().Format("2006-01-02"))
	h.printf("Machine: %s, %d cores, %s, shared with other work while measuring (ratios are taken within one round, contenders interleaved); %s; MariaDB %s (scratch, binlog ROW/FULL).\n\n",
		cpuModel(), runtime.NumCPU(), memTotal(), runtime.Version(), h.version())
	h.printf("Baseline: a naive go-mysql BinlogSyncer + franz-go loop (bench/baseline.go), tuned: %s.\n\n", baselineSettings)
	h.printf("The summary, the breakdown of one exactly-once transaction and what changed are in the notes at the end (written by hand, kept across runs).\n\n")

	// Both shapes are written once; every broker reads the same binlog.
	loads := map[string][2]string{}
	if o.sections["catchup"] || o.sections["batch"] || o.sections["debezium"] {
		for _, shape := range []string{"single", "multi200"} {
			if !slices.Contains(o.shapes, shape) && !(o.sections["debezium"] && slices.Contains(o.debeziumShapes, shape)) {
				continue
			}
			db, from, err := h.load(shape, o.n)
			if err != nil {
				return err
			}
			loads[shape] = [2]string{db, from}
		}
	}
	var bigDB, bigFrom string
	if o.sections["bigtx"] {
		if bigDB, bigFrom, err = h.load("bigtx", o.bigTx); err != nil {
			return err
		}
	}
	for _, kind := range o.brokers {
		stop, desc, err := h.startBroker(kind, o.kafkaAddr)
		if err != nil {
			return err
		}
		err = h.brokerPart(self, kind, desc, o, loads, bigDB, bigFrom, dir)
		stop()
		if err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
	}
	if o.out != "" {
		report := h.report.String()
		// Hand-written notes below the marker survive a new run.
		if old, err := os.ReadFile(o.out); err == nil {
			if i := strings.Index(string(old), notesMarker); i >= 0 {
				report += "\n" + string(old[i:])
			}
		}
		return os.WriteFile(o.out, []byte(report), 0o644)
	}
	return nil
}

// brokerPart writes one broker's part of the report.
func (h *harness) brokerPart(self, kind, desc string, o options, loads map[string][2]string, bigDB, bigFrom, dir string) error {
	h.printf("# Kafka: %s\n\n%s\n\n", kind, desc)
	h.apache = kind == brokerKafka
	if h.apache {
		warm, err := h.warmBroker()
		if err != nil {
			return err
		}
		h.printf("%s\n\n", warm)
	}
	profile := filepath.Join(dir, "cpu-"+kind+".prof")
	if o.sections["txn"] {
		h.printf("## 0. One exactly-once batch, timed (`bench txn`)\n\n")
		h.printf("One record into one partition of a 6-partition topic plus one checkpoint record per Kafka transaction, %d transactions one after the other, after 20 for warm-up; franz-go %s.\n", 300, "v1.22.3")
		w := reportWriter{h}
		for _, po := range []probeOptions{
			{brokers: h.broker, n: 300, parts: 1, alo: true},
			{brokers: h.broker, n: 300, parts: 1, backToBack: true},
			{brokers: h.broker, n: 300, parts: 1, backToBack: true, settle: true},
			{brokers: h.broker, n: 300, parts: 1, backToBack: true, tv1: true},
		} {
			if err := txnProbe(w, po); err != nil {
				return fmt.Errorf("txn probe: %w", err)
			}
		}
		h.printf("\n")
	}
	if o.sections["catchup"] {
		if err := h.catchUpSection(self, loads, o.shapes, o.n, o.rounds, profile); err != nil {
			return err
		}
	}
	if o.sections["batch"] {
		if err := h.batchSection(loads, o.shapes, o.batchRecords, o.n, o.rounds); err != nil {
			return err
		}
	}
	if o.sections["latency"] {
		if err := h.latencySection(o.latencySeconds, o.latencyRuns); err != nil {
			return err
		}
	}
	if o.sections["bigtx"] {
		h.printf("\n## 3. Memory: one source transaction of %d outbox rows\n\n", o.bigTx)
		res, err := h.relayCatchUp(bigDB, bigFrom, o.bigTx, string(config.ExactlyOnce), "")
		if err != nil {
			return err
		}
		h.printf("Exactly-once, split into Kafka transactions of kafka.batch.max_records: %.2f s, %.2f CPU s, peak RSS %.0f MB.\n",
			res.elapsed.Seconds(), res.cpu.Seconds(), float64(res.rssKB)/1024)
	}
	if o.sections["debezium"] {
		if err := h.debeziumSection(loads, o.debeziumShapes, o.n, o.rounds, o.latencySeconds); err != nil {
			return fmt.Errorf("debezium: %w", err)
		}
	}
	if o.sections["audit"] {
		if err := h.auditSection(loads, o.auditN); err != nil {
			return err
		}
	}
	if o.sections["profile"] && o.sections["catchup"] {
		if err := h.profileSection(profile, o.shapes[0]); err != nil {
			return err
		}
	}
	h.printf("\n")
	return nil
}

// reportWriter writes into the report (and stdout).
type reportWriter struct{ h *harness }

func (w reportWriter) Write(p []byte) (int, error) {
	w.h.printf("%s", p)
	return len(p), nil
}

// profileSection writes section 4: the top of the CPU profile (kept, with
// the binary, at $BENCH_KEEP_PROFILE when set).
func (h *harness) profileSection(profile, shape string) error {
	if keep := os.Getenv("BENCH_KEEP_PROFILE"); keep != "" {
		if b, err := os.ReadFile(profile); err == nil {
			_ = os.WriteFile(keep, b, 0o644)
			_ = exec.Command("cp", h.bin, keep+".bin").Run()
		}
	}
	top, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=25", h.bin, profile).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pprof: %v\n%s", err, top)
	}
	h.printf("\n## 4. CPU profile of the exactly-once catch-up, shape %s (round 1)\n\n```\n%s```\n", shape, trimProfile(string(top)))
	return nil
}

const notesMarker = "<!-- notes: kept across runs -->"

// execMulti runs a multi-statement query in one round trip.
func execMulti(c *client.Conn, q string) error {
	var first error
	_, err := c.ExecuteMultiple(q, func(_ *mysql.Result, err error) {
		if err != nil && first == nil {
			first = err
		}
	})
	if err != nil {
		return err
	}
	return first
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func trimProfile(s string) string {
	lines := strings.Split(s, "\n")
	var keep []string
	for _, l := range lines {
		if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") || strings.HasPrefix(l, "Type:") || strings.HasPrefix(l, "Time:") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n")
}

func waitBroker(addr string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err == nil {
			err = cl.Ping(context.Background())
			cl.Close()
			if err == nil {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("broker %s did not answer", addr)
}

func (h *harness) version() string {
	rows, err := h.db.Query("SELECT VERSION()")
	if err != nil || len(rows) == 0 {
		return "?"
	}
	return rows[0][0]
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func memTotal() string {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "MemTotal:") {
			kb, _ := strconv.Atoi(strings.Fields(l)[1])
			return fmt.Sprintf("%.0f GiB RAM", float64(kb)/1024/1024)
		}
	}
	return "?"
}

func (h *harness) head() (string, error) {
	rows, err := h.db.Query("SELECT @@gtid_binlog_pos")
	if err != nil {
		return "", err
	}
	return rows[0][0], nil
}

const payload = `{"deviceId":"dev-%d","level":"CRITICAL","temperature":%d,"firmware":"4.2.1","site":"plant-7","note":"over-temperature"}`

// load writes n outbox rows in a fresh database in the given shape and
// returns the database and the GTID position before them.
func (h *harness) load(shape string, n int) (string, string, error) {
	h.seq++
	db := fmt.Sprintf("bench_%s_%d", shape, h.seq)
	err := h.db.Exec("CREATE DATABASE "+db,
		fmt.Sprintf(`CREATE TABLE %s.outbox (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, event_id VARCHAR(64) NOT NULL,
			aggregate_type VARCHAR(64) NOT NULL, aggregate_id VARCHAR(64) NOT NULL, event_type VARCHAR(64) NOT NULL,
			payload JSON NOT NULL, created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3))`, db),
		fmt.Sprintf(`CREATE TABLE %s.alarm_record (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, device_id VARCHAR(64), temp INT)`, db))
	if err != nil {
		return "", "", err
	}
	from, err := h.head()
	if err != nil {
		return "", "", err
	}
	if err := h.recordBinlog(db); err != nil {
		return "", "", err
	}
	began := time.Now()
	switch shape {
	case "single":
		err = h.parallel(4, n, func(c *client.Conn, i int) error {
			q := fmt.Sprintf("BEGIN; INSERT INTO %s.alarm_record (device_id, temp) VALUES ('dev-%d', %d); "+
				"INSERT INTO %s.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('e-%d', 'alarm', 'dev-%d', 'AlarmCreated', '"+payload+"'); COMMIT",
				db, i%1000, 80+i%40, db, i, i%1000, i%1000, 80+i%40)
			return execMulti(c, q)
		})
	case "multi200", "bigtx":
		per := 200
		if shape == "bigtx" {
			return db, from, h.db.Exec(fmt.Sprintf(`INSERT INTO %s.outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
				SELECT CONCAT('e-', seq), 'alarm', CONCAT('dev-', seq %% 1000), 'AlarmCreated', REPLACE('%s', '%%d', seq %% 1000)
				FROM %s.seq_1_to_%d`, db, payload, db, n))
		}
		err = h.parallel(4, n/per, func(c *client.Conn, i int) error {
			var b strings.Builder
			fmt.Fprintf(&b, "INSERT INTO %s.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ", db)
			for j := 0; j < per; j++ {
				k := i*per + j
				if j > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, "('e-%d', 'alarm', 'dev-%d', 'AlarmCreated', '"+payload+"')", k, k%1000, k%1000, 80+k%40)
			}
			_, err := c.Execute(b.String())
			return err
		})
	}
	fmt.Fprintf(os.Stderr, "loaded %d rows (%s) in %s\n", n, shape, time.Since(began).Round(time.Millisecond))
	if err != nil {
		return db, from, err
	}
	end, err := h.binlogEnd()
	if h.loadEnd == nil {
		h.loadEnd = map[string]binlogPos{}
	}
	h.loadEnd[db] = end
	return db, from, err
}

// parallel runs fn(i) for i in [0, n) over w connections.
func (h *harness) parallel(w, n int, fn func(*client.Conn, int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, w)
	for k := 0; k < w; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			c, err := client.Connect(h.db.Addr, "root", devdb.RootPassword, "", func(c *client.Conn) error {
				c.SetCapability(mysql.CLIENT_MULTI_STATEMENTS)
				return nil
			})
			if err != nil {
				errs[k] = err
				return
			}
			defer c.Close()
			for i := k; i < n; i += w {
				if err := fn(c, i); err != nil {
					errs[k] = err
					return
				}
			}
		}(k)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (h *harness) createTopic(topic string) error {
	return createTopic(h.broker, topic, outputPartitions, nil)
}

// createTopic creates topic on broker with partitions and configs
// (replication factor 1: the harness's brokers are single nodes).
func createTopic(broker, topic string, partitions int32, configs map[string]*string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, configs, topic); err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}
