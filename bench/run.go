package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"gopkg.in/yaml.v3"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
)

type harness struct {
	dir    string
	bin    string
	db     *devdb.Server
	broker string
	kafka  *exec.Cmd
	report strings.Builder
	seq    int
}

func (h *harness) printf(format string, a ...any) {
	fmt.Fprintf(&h.report, format, a...)
	fmt.Printf(format, a...)
}

func run(n, bigTx, latencySeconds int, out string) error {
	dir, err := os.MkdirTemp("", "outbox-relay-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	h := &harness{dir: dir, bin: filepath.Join(dir, "outbox-relay")}
	if out, err := exec.Command("go", "build", "-o", h.bin, "./cmd/outbox-relay").CombinedOutput(); err != nil {
		return fmt.Errorf("build relay: %v\n%s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx := context.Background()
	h.db, err = devdb.Start(ctx, devdb.Options{Dir: filepath.Join(dir, "db"),
		Settings: map[string]string{"innodb-buffer-pool-size": "512M", "max-binlog-size": "1G"}})
	if err != nil {
		return err
	}
	defer h.db.Stop()
	port, _ := devdb.FreePort()
	h.broker = fmt.Sprintf("127.0.0.1:%d", port)
	h.kafka = exec.Command(h.bin, "dev", "kafka", "--listen", h.broker)
	h.kafka.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := h.kafka.Start(); err != nil {
		return err
	}
	defer func() { _ = h.kafka.Process.Signal(syscall.SIGTERM); _ = h.kafka.Wait() }()
	if err := waitBroker(h.broker); err != nil {
		return err
	}

	h.printf("# outbox-relay benchmarks\n\n")
	h.printf("Measured by `go run ./bench -n %d -big-tx %d -latency-seconds %d` (`make bench`), %s.\n\n",
		n, bigTx, latencySeconds, time.Now().UTC().Format("2006-01-02"))
	h.printf("Machine: %s, %d cores, %s; %s; MariaDB %s (scratch, binlog ROW/FULL); Kafka: kfake (`outbox-relay dev kafka`, in memory, its own process).\n\n",
		cpuModel(), runtime.NumCPU(), memTotal(), runtime.Version(), h.version())

	h.printf("## 1. Catch-up throughput (%d outbox rows, from the position before them)\n\n", n)
	h.printf("| shape | run | seconds | events/s | vs baseline | CPU s | peak RSS | first record after |\n|---|---|---|---|---|---|---|---|\n")
	var profile, singleDB, singleFrom string
	for _, shape := range []string{"single", "multi200"} {
		schema, from, err := h.load(shape, n)
		if err != nil {
			return err
		}
		if shape == "single" {
			singleDB, singleFrom = schema, from
		}
		base, err := h.baseline(self, schema, from, n)
		if err != nil {
			return err
		}
		h.printf("| %s | baseline | %.2f | %.0f | 1.00 | %.2f | | |\n", shape, base.elapsed.Seconds(), float64(n)/base.elapsed.Seconds(), base.cpu.Seconds())
		for _, delivery := range []string{config.ExactlyOnce, config.AtLeastOnce} {
			prof := ""
			if shape == "single" && delivery == config.ExactlyOnce {
				prof = filepath.Join(dir, "cpu.prof")
				profile = prof
			}
			res, err := h.relayCatchUp(schema, from, n, delivery, prof)
			if err != nil {
				return err
			}
			h.printf("| %s | %s | %.2f | %.0f | %.2f | %.2f | %.0f MB | %d ms |\n", shape, delivery, res.elapsed.Seconds(),
				float64(n)/res.elapsed.Seconds(), base.elapsed.Seconds()/res.elapsed.Seconds(), res.cpu.Seconds(), float64(res.rssKB)/1024, res.first.Milliseconds())
		}
	}

	h.printf("\n### Batch bound (kafka.batch.max_records), exactly-once, single-row shape\n\n")
	h.printf("| max_records | seconds | events/s | peak RSS |\n|---|---|---|---|\n")
	for _, records := range []int{500, 2000, 5000, 20000} {
		res, err := h.relayCatchUp(singleDB, singleFrom, n, config.ExactlyOnce, "", func(c *config.Config) {
			c.Kafka.Batch.MaxRecords = records
		})
		if err != nil {
			return err
		}
		h.printf("| %d | %.2f | %.0f | %.0f MB |\n", records, res.elapsed.Seconds(), float64(n)/res.elapsed.Seconds(), float64(res.rssKB)/1024)
	}

	h.printf("\n## 2. Commit-to-receive latency, exactly-once (%d s per rate)\n\n", latencySeconds)
	h.printf("| target events/s | achieved | events | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|---|\n")
	for _, rate := range []int{100, 1000, 5000} {
		lat, err := h.latency(rate, time.Duration(latencySeconds)*time.Second)
		if err != nil {
			return err
		}
		h.printf("| %d | %.0f | %d | %.1f | %.1f | %.1f |\n", rate, lat.achieved, len(lat.samples),
			ms(lat.quantile(0.5)), ms(lat.quantile(0.99)), ms(lat.quantile(1)))
	}

	h.printf("\n## 3. Memory: one source transaction of %d outbox rows\n\n", bigTx)
	schema, from, err := h.load("bigtx", bigTx)
	if err != nil {
		return err
	}
	res, err := h.relayCatchUp(schema, from, bigTx, config.ExactlyOnce, "")
	if err != nil {
		return err
	}
	h.printf("Exactly-once, split into Kafka transactions of kafka.batch.max_records: %.2f s, peak RSS %.0f MB.\n",
		res.elapsed.Seconds(), float64(res.rssKB)/1024)

	if profile != "" {
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
		h.printf("\n## 4. CPU profile of the exactly-once single-row catch-up\n\n```\n%s```\n", trimProfile(string(top)))
	}
	if out != "" {
		report := h.report.String()
		// Hand-written notes below the marker survive a new run.
		if old, err := os.ReadFile(out); err == nil {
			if i := strings.Index(string(old), notesMarker); i >= 0 {
				report += "\n" + string(old[i:])
			}
		}
		return os.WriteFile(out, []byte(report), 0o644)
	}
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
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.broker))
	if err != nil {
		return err
	}
	defer cl.Close()
	_, err = kadm.NewClient(cl).CreateTopic(context.Background(), 3, 1, nil, topic)
	return err
}

func (h *harness) baseline(self, db, from string, n int) (catchUp, error) {
	h.seq++
	prefix := fmt.Sprintf("base%d.", h.seq)
	if err := h.createTopic(prefix + "alarm"); err != nil {
		return catchUp{}, err
	}
	cmd := exec.Command(self, "baseline", "-source", h.db.Addr, "-password", devdb.RootPassword, "-from", from,
		"-db", db, "-brokers", h.broker, "-topic-prefix", prefix, "-n", strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	began := time.Now()
	if err := cmd.Run(); err != nil {
		return catchUp{}, fmt.Errorf("baseline: %w", err)
	}
	return catchUp{elapsed: time.Since(began), cpu: cpuTime(cmd.ProcessState)}, nil
}

// cpuTime is the user and system CPU time a finished process used.
func cpuTime(ps *os.ProcessState) time.Duration { return ps.UserTime() + ps.SystemTime() }

// relayConfig is a relay configuration of defaults for db's outbox from a
// GTID position, with its own name, checkpoint topic and topic prefix.
func (h *harness) relayConfig(prefix, db, from string) config.Config {
	h.seq++
	cfg := config.Default()
	cfg.Name = fmt.Sprintf("%s%d", prefix, h.seq)
	cfg.Source.Hosts = []string{h.db.Addr}
	cfg.Source.User, cfg.Source.Password = "root", devdb.RootPassword
	cfg.Source.ServerID = uint32(5000 + h.seq)
	cfg.Source.Tables = []string{db + ".outbox"}
	cfg.Source.Start = from
	cfg.Kafka.Brokers = []string{h.broker}
	cfg.Kafka.CheckpointTopic = "cp." + cfg.Name
	cfg.Router.TopicPrefix = cfg.Name + "."
	cfg.HTTP.Listen = ""
	cfg.Log.Level = "warn"
	return cfg
}

type catchUp struct {
	elapsed, first time.Duration
	cpu            time.Duration // the process's CPU time, start to exit
	rssKB          int
}

// relayCatchUp runs the relay from `from` until its checkpoint counts n
// events, polling the checkpoint; it records peak RSS and the time to the
// first record a read_committed consumer sees.
func (h *harness) relayCatchUp(db, from string, n int, delivery, cpuProfile string, tune ...func(*config.Config)) (catchUp, error) {
	cfg := h.relayConfig("bench", db, from)
	cfg.Kafka.Delivery = delivery
	for _, f := range tune {
		f(&cfg)
	}
	if err := h.createTopic(cfg.Router.TopicPrefix + "alarm"); err != nil {
		return catchUp{}, err
	}
	raw, _ := yaml.Marshal(cfg)
	path := filepath.Join(h.dir, cfg.Name+".yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return catchUp{}, err
	}
	args := []string{"run", "--config", path}
	if cpuProfile != "" {
		args = append(args, "--cpuprofile", cpuProfile)
	}
	firstCh := make(chan time.Duration, 1)
	cmd := exec.Command(h.bin, args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return catchUp{}, err
	}
	go h.firstRecord(cfg.Router.TopicPrefix+"alarm", began, firstCh)
	store := checkpoint.NewStore(cfg.Kafka.CheckpointTopic, kgo.SeedBrokers(h.broker))
	var res catchUp
	deadline := time.Now().Add(30 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cp, err := store.Load(ctx, cfg.Name)
		cancel()
		if err == nil && cp != nil && cp.Events >= int64(n) {
			// The checkpoint says when the relay wrote it: polling slowly
			// keeps the harness off the relay's CPU without losing precision.
			res.elapsed = cp.Time.Sub(began)
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return res, fmt.Errorf("relay %s did not catch up", cfg.Name)
		}
		time.Sleep(500 * time.Millisecond)
	}
	res.rssKB = peakRSS(cmd.Process.Pid)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		return res, fmt.Errorf("relay %s: %w", cfg.Name, err)
	}
	res.cpu = cpuTime(cmd.ProcessState)
	select {
	case res.first = <-firstCh:
	case <-time.After(10 * time.Second):
		res.first = -1
	}
	return res, nil
}

func (h *harness) firstRecord(topic string, began time.Time, out chan<- time.Duration) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.broker), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(10*time.Millisecond))
	if err != nil {
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		if cl.PollRecords(ctx, 1).NumRecords() > 0 {
			out <- time.Since(began)
			return
		}
	}
}

// peakRSS is VmHWM of pid, in kB.
func peakRSS(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			kb, _ := strconv.Atoi(strings.Fields(l)[1])
			return kb
		}
	}
	return 0
}

type latencyResult struct {
	samples  []time.Duration
	achieved float64
}

func (l latencyResult) quantile(q float64) time.Duration {
	if len(l.samples) == 0 {
		return 0
	}
	i := int(q * float64(len(l.samples)-1))
	return l.samples[i]
}

// latency runs the relay (exactly-once, defaults) and writers committing at
// rate events/s for d; a read_committed consumer records, per event, the time
// from the writer's COMMIT returning to the record's arrival.
func (h *harness) latency(rate int, d time.Duration) (latencyResult, error) {
	db, from, err := h.load("single", 0)
	if err != nil {
		return latencyResult{}, err
	}
	cfg := h.relayConfig("lat", db, from)
	topic := cfg.Router.TopicPrefix + "alarm"
	if err := h.createTopic(topic); err != nil {
		return latencyResult{}, err
	}
	raw, _ := yaml.Marshal(cfg)
	path := filepath.Join(h.dir, cfg.Name+".yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return latencyResult{}, err
	}
	cmd := exec.Command(h.bin, "run", "--config", path)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return latencyResult{}, err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	store := checkpoint.NewStore(cfg.Kafka.CheckpointTopic, kgo.SeedBrokers(h.broker))
	for { // wait for the relay to pin its start
		cp, _ := store.Load(context.Background(), cfg.Name)
		if cp != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	var commits sync.Map // event id -> time.Time
	total := int(float64(rate) * d.Seconds())
	cons, err := kgo.NewClient(kgo.SeedBrokers(h.broker), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(10*time.Millisecond))
	if err != nil {
		return latencyResult{}, err
	}
	defer cons.Close()
	// Warm up: one event through relay, broker and consumer before timing,
	// so consumer start-up (metadata, offsets) is not counted.
	if err := h.db.Exec(fmt.Sprintf(`INSERT INTO %s.outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ('warm-up', 'alarm', 'dev-0', 'AlarmCreated', '{}')`, db)); err != nil {
		return latencyResult{}, err
	}
	wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
	for warm := 0; warm == 0 && wctx.Err() == nil; {
		warm = cons.PollFetches(wctx).NumRecords()
	}
	wcancel()
	recvd := make(chan []time.Duration, 1)
	go func() {
		var lat []time.Duration
		ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
		defer cancel()
		for len(lat) < total && ctx.Err() == nil {
			fs := cons.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				var id string
				for _, hd := range r.Headers {
					if hd.Key == "id" {
						id = string(hd.Value)
					}
				}
				for {
					if t, ok := commits.Load(id); ok {
						lat = append(lat, now.Sub(t.(time.Time)))
						return
					}
					// the writer records its commit time right after COMMIT
					// returns; a record can arrive a moment before that
					runtime.Gosched()
				}
			})
		}
		recvd <- lat
	}()

	writers := 4
	if rate <= 100 {
		writers = 1
	}
	began := time.Now()
	err = h.parallel(writers, total, func(c *client.Conn, i int) error {
		due := began.Add(time.Duration(float64(i) / float64(rate) * float64(time.Second)))
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		id := fmt.Sprintf("l-%d", i)
		q := fmt.Sprintf("BEGIN; INSERT INTO %s.alarm_record (device_id, temp) VALUES ('dev-%d', %d); "+
			"INSERT INTO %s.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('%s', 'alarm', 'dev-%d', 'AlarmCreated', '"+payload+"'); COMMIT",
			db, i%1000, 80+i%40, db, id, i%1000, i%1000, 80+i%40)
		if err := execMulti(c, q); err != nil {
			return err
		}
		commits.Store(id, time.Now())
		return nil
	})
	if err != nil {
		return latencyResult{}, err
	}
	achieved := float64(total) / time.Since(began).Seconds()
	lat := <-recvd
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) < total {
		return latencyResult{}, fmt.Errorf("received %d of %d events", len(lat), total)
	}
	return latencyResult{samples: lat, achieved: achieved}, nil
}
