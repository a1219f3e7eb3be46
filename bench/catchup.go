package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/twmb/franz-go/pkg/kgo"
	"gopkg.in/yaml.v3"
)

func (h *harness) baseline(self, db, from string, n int) (catchUp, error) {
	h.seq++
	prefix := fmt.Sprintf("base%s-%d.", h.runID, h.seq)
	if err := h.newOutputTopic(prefix + "alarm"); err != nil {
		return catchUp{}, err
	}
	cmd := exec.Command(self, "baseline", "-source", h.db.Addr, "-password", devdb.RootPassword, "-from", from,
		"-db", db, "-brokers", h.broker, "-topic-prefix", prefix, "-n", strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	h.collectBrokerHeap()
	brokerCPU := procCPU(h.brokerPID)
	threads := h.brokerThreads()
	host := readHostTicks()
	began := time.Now()
	if err := cmd.Run(); err != nil {
		return catchUp{}, fmt.Errorf("baseline: %w", err)
	}
	res := catchUp{elapsed: time.Since(began), cpu: cpuTime(cmd.ProcessState), brokerCPU: procCPU(h.brokerPID) - brokerCPU,
		hostBusy: host.busySince(readHostTicks())}
	threads("baseline " + prefix)
	return res, nil
}

// cpuTime is the user and system CPU time a finished process used.
func cpuTime(ps *os.ProcessState) time.Duration { return ps.UserTime() + ps.SystemTime() }

// relayConfig is a relay configuration of defaults for db's outbox from a
// GTID position, with its own name, checkpoint topic and topic prefix.
func (h *harness) relayConfig(prefix, db, from string) config.Config {
	h.seq++
	cfg := config.Default()
	cfg.Name = fmt.Sprintf("%s%s-%d", prefix, h.runID, h.seq)
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
	if l := os.Getenv("BENCH_LOG_LEVEL"); l != "" {
		cfg.Log.Level = config.LogLevel(l)
	}
	for _, tune := range h.tune {
		tune(&cfg)
	}
	return cfg
}

type catchUp struct {
	elapsed, first time.Duration
	cpu            time.Duration // the process's CPU time, start to exit
	brokerCPU      time.Duration // the broker's CPU time over the run (start to the last record)
	// hostBusy is the share of the machine's CPU time (both cores) that was
	// busy over the run, whatever used it; -1 unknown.
	hostBusy float64
	rssKB    int
	// commits: the relay's outbox_relay_kafka_transactions_total{result=
	// "commit"} at catch-up (exactly-once: Kafka transactions; at-least-once:
	// checkpoint batches); -1 unknown.
	commits int
	// inCommit: the relay's outbox_relay_kafka_transaction_duration_seconds
	// sum, the time its commits took from flush to committed (exactly-once;
	// the loop holds the next batch's records meanwhile); -1 unknown.
	inCommit float64
}

// relayCommand writes cfg to a file and returns the relay's `run` on it,
// not yet started.
func (h *harness) relayCommand(cfg config.Config, args ...string) (*exec.Cmd, error) {
	return h.relayCommandOf(h.bin, cfg, args...)
}

// relayCommandOf is relayCommand of the relay binary bin.
func (h *harness) relayCommandOf(bin string, cfg config.Config, args ...string) (*exec.Cmd, error) {
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encode relay config: %w", err)
	}
	path := filepath.Join(h.dir, cfg.Name+".yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"run", "--config", path}, args...)...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd, nil
}

// contender runs one catch-up of contender run (baseline, raw, relayB, or
// a relay delivery mode) over db's n rows from `from`; a relay run of
// mode exactly-once writes its CPU profile to cpuProfile when not "".
func (h *harness) contender(self, run, db, from string, n int, cpuProfile string) (catchUp, error) {
	switch run {
	case "baseline":
		return h.baseline(self, db, from, n)
	case "raw":
		return h.raw(self, db, from)
	case relayB:
		return h.relayCatchUpOf(h.binB, db, from, n, string(config.ExactlyOnce), "")
	}
	return h.relayCatchUp(db, from, n, run, cpuProfile)
}

// relayCatchUp runs the relay from `from` until its committed checkpoint
// counts n events; it records peak RSS and the time to the first record a
// read_committed consumer sees.
func (h *harness) relayCatchUp(db, from string, n int, delivery, cpuProfile string, tune ...func(*config.Config)) (catchUp, error) {
	return h.relayCatchUpOf(h.bin, db, from, n, delivery, cpuProfile, tune...)
}

// relayCatchUpOf is relayCatchUp of the relay binary bin.
func (h *harness) relayCatchUpOf(bin, db, from string, n int, delivery, cpuProfile string, tune ...func(*config.Config)) (catchUp, error) {
	cfg := h.relayConfig("bench", db, from)
	cfg.Kafka.Delivery = config.Delivery(delivery)
	for _, f := range tune {
		f(&cfg)
	}
	if err := h.newOutputTopic(cfg.Router.TopicPrefix + "alarm"); err != nil {
		return catchUp{}, err
	}
	var args []string
	if cpuProfile != "" {
		args = append(args, "--cpuprofile", cpuProfile)
	}
	port, err := devdb.FreePort()
	if err != nil {
		return catchUp{}, err
	}
	cfg.HTTP.Listen = fmt.Sprintf("127.0.0.1:%d", port) // for its commit count
	cmd, err := h.relayCommandOf(bin, cfg, args...)
	if err != nil {
		return catchUp{}, err
	}
	firstCh := make(chan time.Duration, 1)
	if err := h.newCheckpointTopic(cfg.Kafka.CheckpointTopic); err != nil {
		return catchUp{}, err
	}
	h.collectBrokerHeap()
	threads := h.brokerThreads()
	brokerCPU := procCPU(h.brokerPID)
	host := readHostTicks()
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return catchUp{}, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	go h.firstRecord(cfg.Router.TopicPrefix+"alarm", began, firstCh)
	// The run ends when the checkpoint covering n is committed (visible to
	// read_committed readers, as the records of its transaction are), not
	// when the relay wrote it into its last transaction: the baseline's
	// time, too, ends with its last acknowledgement. That reader is the
	// harness's only observer of the relay's progress (no polling of its
	// checkpoint with the store's reads, which would cost the broker in the
	// relay's runs only).
	visibleCh := make(chan visibleAt, 1)
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	go h.checkpointVisible(watchCtx, cfg.Kafka.CheckpointTopic, int64(n), began, visibleCh)
	var res catchUp
	select {
	case v, ok := <-visibleCh:
		if !ok {
			_ = cmd.Process.Kill()
			<-exited
			return res, fmt.Errorf("relay %s: the checkpoint reader failed (above)", cfg.Name)
		}
		res.elapsed, res.brokerCPU, res.hostBusy = v.elapsed, v.brokerCPU-brokerCPU, host.busySince(v.host)
		threads(delivery + " " + cfg.Name)
	case err := <-exited:
		if err == nil {
			err = errors.New("exit status 0")
		}
		return res, fmt.Errorf("relay %s exited before its checkpoint of %d events was committed: %w", cfg.Name, n, err)
	case <-time.After(30 * time.Minute):
		_ = cmd.Process.Kill()
		<-exited
		return res, fmt.Errorf("relay %s did not catch up in 30 minutes", cfg.Name)
	}
	res.rssKB = peakRSS(cmd.Process.Pid)
	res.commits = int(scrapeValue("http://"+cfg.HTTP.Listen+"/metrics", `outbox_relay_kafka_transactions_total{result="commit"}`))
	res.inCommit = scrapeValue("http://"+cfg.HTTP.Listen+"/metrics", `outbox_relay_kafka_transaction_duration_seconds_sum`)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err = <-exited:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-exited
		err = errors.New("did not stop within a minute of SIGTERM (killed)")
	}
	if err != nil {
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

// visibleAt is when a run's last checkpoint became visible, and the broker's
// CPU time then.
type visibleAt struct {
	elapsed, brokerCPU time.Duration
	host               hostTicks
}

// checkpointVisible reads the checkpoint topic read_committed from its
// start and sends, once, how long after began the first checkpoint counting
// at least n events arrived (its transaction is then committed).
func (h *harness) checkpointVisible(ctx context.Context, topic string, n int64, began time.Time, out chan<- visibleAt) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.broker), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(h.observerWait()), kgo.MetadataMinAge(50*time.Millisecond), kgo.MetadataMaxAge(200*time.Millisecond))
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: checkpoint reader: %v\n", err)
		close(out) // the harness stops the run: nothing else observes it
		return
	}
	defer cl.Close()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		at := time.Since(began)
		fs.EachError(func(topic string, _ int32, err error) {
			if ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "bench: checkpoint reader: %s: %v\n", topic, err)
			}
		})
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			if r.Value == nil {
				continue
			}
			if cp, err := checkpoint.Decode(r.Value); err == nil && cp.Events >= n {
				out <- visibleAt{at, procCPU(h.brokerPID), readHostTicks()}
				return
			}
		}
	}
}

// firstRecord sends, once, how long after began a read_committed reader of
// topic received its first record that primeTopic did not write. Each fetch
// asks for one byte (the broker answers with at least one whole batch), so
// the time is not that of decoding megabytes of a bulk run's first fetch.
func (h *harness) firstRecord(topic string, began time.Time, out chan<- time.Duration) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.broker), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(h.observerWait()), kgo.FetchMaxBytes(1), kgo.FetchMaxPartitionBytes(1))
	if err != nil {
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		for it := cl.PollFetches(ctx).RecordIter(); !it.Done(); {
			if !primed(it.Next()) {
				out <- time.Since(began)
				return
			}
		}
	}
}

// scrapeValue reads one sample of a Prometheus text page; -1 when it is
// not there.
func scrapeValue(url, sample string) float64 {
	resp, err := http.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return -1
			}
			return f
		}
	}
	return -1
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

// catchUpSection measures catch-up in both shapes over rounds and writes
// section 1 of the report; the first exactly-once single-row run writes the
// CPU profile. It returns the single-row database and start for later runs.
func (h *harness) catchUpSection(self string, loads map[string][2]string, shapes []string, n, rounds int, profile string) error {
	h.printf("## 1. Catch-up throughput (%d outbox rows, from the position before them)\n\n", n)
	h.printf("Each shape runs %d rounds of baseline, exactly-once and at-least-once over the same binlog (in that order in the first round, rotated by one in each next: each contender runs first, second and last once in three rounds; on Apache Kafka the broker's JVM collects its heap before each run), after one round of each not counted "+
		"(it warms the broker's paths its warm-up does not take, on kfake all of them: topic creation, offsets, read_committed fetches, the relay's consumer group); "+
		"a ratio is the baseline's time over the relay's in the same round. Medians, then each round. "+
		"A run's time is from starting the process to the baseline's last acknowledgement, or to a read_committed reader of the checkpoint topic receiving the relay's checkpoint that covers every row (its Kafka transaction committed; on Apache Kafka that reader waits up to 500 ms per fetch and is answered at the commit, on kfake it asks every 10 ms). "+
		"Each contender writes its own output topic, created and primed with one record per partition before its clock starts, and the relay its own checkpoint topic, created compacted and primed the same way, as a deployment's are after its first start (bench/warm.go: on Apache Kafka the first write into a fresh partition cost 30-330 ms during these runs, paid by any contender at random); readers skip the primed records. The relay still writes its first checkpoint in its time.\n\n", rounds)
	h.printf("Kafka commits: the relay's Kafka transactions (exactly-once) or checkpoint batches (at-least-once) over the run; each exactly-once transaction costs the broker its markers and transaction-log writes. In commit: the time those commits took from flush to committed, summed (the loop reads on meanwhile but holds the next batch's records).\n\n")
	h.printf("Raw read: the same binlog read from the same position by a replica in go-mysql's raw mode (bench/raw.go: events neither decoded nor produced, the process ends at the load's last event), the physical limit of reading it on this machine; of raw: the raw read's time over the contender's in the same round (1.00: the contender reads, decodes and publishes as fast as the binlog can be read).\n\n")
	h.printf("CPU µs per event: the contender's own process CPU time (user and system, start to exit) over the outbox rows (in the one-row shape, per transaction).\n\n")
	h.printf("Host busy: the share of the machine's CPU time (both cores) that was busy during the run, whatever used it (relay or baseline, broker, MariaDB, the harness's readers): near 100%% the run was bound by CPU, below it by waits.\n\n")
	h.printf("| shape | run | seconds | events/s | vs baseline (min-max) | of raw (min-max) | CPU s | CPU µs per event | broker CPU s | host busy | peak RSS | first record after | Kafka commits | in commit s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	var detail strings.Builder
	runs := []string{"baseline", string(config.ExactlyOnce), string(config.AtLeastOnce), "raw"}
	if h.binB != "" {
		runs = append(runs, relayB)
	}
	for _, shape := range shapes {
		db, from := loads[shape][0], loads[shape][1]
		res := map[string][]catchUp{}
		ratios := map[string][]float64{}
		ofRaw := map[string][]float64{}
		for _, run := range runs { // warm-up, not counted
			if _, err := h.contender(self, run, db, from, n, ""); err != nil {
				return fmt.Errorf("warm up: %w", err)
			}
		}
		for r := 0; r < rounds; r++ {
			round := map[string]catchUp{}
			for _, run := range roundOrder(runs, r) {
				cpuProfile := ""
				if shape == shapes[0] && run == string(config.ExactlyOnce) && r == 0 {
					cpuProfile = profile
				}
				c, err := h.contender(self, run, db, from, n, cpuProfile)
				if err != nil {
					return err
				}
				round[run] = c
			}
			fmt.Fprintf(&detail, "| %s | %d |", shape, r+1)
			for _, run := range runs {
				c := round[run]
				res[run] = append(res[run], c)
				ratio := round["baseline"].elapsed.Seconds() / c.elapsed.Seconds()
				ratios[run] = append(ratios[run], ratio)
				ofRaw[run] = append(ofRaw[run], round["raw"].elapsed.Seconds()/c.elapsed.Seconds())
				fmt.Fprintf(&detail, " %.2f s (%.2f) |", c.elapsed.Seconds(), ratio)
			}
			detail.WriteString("\n")
		}
		for _, run := range runs {
			el := median(durations(res[run], func(c catchUp) time.Duration { return c.elapsed }))
			cpu := median(durations(res[run], func(c catchUp) time.Duration { return c.cpu }))
			bcpu := median(durations(res[run], func(c catchUp) time.Duration { return c.brokerCPU }))
			lo, mid, hi := spread(ratios[run])
			rlo, rmid, rhi := spread(ofRaw[run])
			row := fmt.Sprintf("| %s | %s | %.2f | %.0f | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | %.2f | %.1f | %.2f | %s |", shape, run, el.Seconds(), float64(n)/el.Seconds(), mid, lo, hi,
				rmid, rlo, rhi, cpu.Seconds(), cpu.Seconds()*1e6/float64(n), bcpu.Seconds(), busyShare(res[run]))
			if run == "baseline" || run == "raw" {
				h.printf("%s | | | | |\n", row)
				continue
			}
			rss := 0
			for _, c := range res[run] {
				rss = max(rss, c.rssKB)
			}
			first := median(durations(res[run], func(c catchUp) time.Duration { return c.first }))
			commits := median(durations(res[run], func(c catchUp) time.Duration { return time.Duration(c.commits) }))
			inCommit := median(durations(res[run], func(c catchUp) time.Duration { return time.Duration(c.inCommit * float64(time.Second)) }))
			h.printf("%s %.0f MB | %d ms | %d | %.2f |\n", row, float64(rss)/1024, first.Milliseconds(), int(commits), inCommit.Seconds())
		}
	}
	h.printf("\nSeconds per round (ratio to that round's baseline); peak RSS is the largest of the rounds:\n\n")
	if h.binB != "" {
		h.printf("| shape | round | baseline | exactly-once | at-least-once | raw read | %s |\n|---|---|---|---|---|---|---|\n%s", relayB, detail.String())
		return nil
	}
	h.printf("| shape | round | baseline | exactly-once | at-least-once | raw read |\n|---|---|---|---|---|---|\n%s", detail.String())
	return nil
}

// relayB names the runs of -relay-bin-b (exactly-once) in the catch-up
// tables.
const relayB = "exactly-once (-relay-bin-b)"

// busyShare is the median share of the host's CPU busy over cs's runs, as
// a percentage; "" when unknown.
func busyShare(cs []catchUp) string {
	var fs []float64
	for _, c := range cs {
		if c.hostBusy >= 0 {
			fs = append(fs, c.hostBusy)
		}
	}
	if len(fs) == 0 {
		return ""
	}
	_, mid, _ := spread(fs)
	return fmt.Sprintf("%.0f%%", 100*mid)
}

// roundOrder is the order of the contenders in round r (from 0): runs
// rotated by r, so that over as many rounds as contenders each runs first,
// second and last once, and none always follows the same one (a run leaves
// the broker work behind it: its log flushed, its garbage collected).
func roundOrder(runs []string, r int) []string {
	k := r % len(runs)
	return append(slices.Clone(runs[k:]), runs[:k]...)
}

func durations(cs []catchUp, f func(catchUp) time.Duration) []time.Duration {
	out := make([]time.Duration, len(cs))
	for i, c := range cs {
		out[i] = f(c)
	}
	return out
}

// median of ds (the lower middle one for an even count).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// spread is the minimum, median and maximum of fs.
func spread(fs []float64) (lo, mid, hi float64) {
	s := slices.Clone(fs)
	slices.Sort(s)
	return s[0], s[(len(s)-1)/2], s[len(s)-1]
}

// batchSection compares kafka.batch.max_records values, exactly-once, in
// each shape: every round runs at-least-once (defaults) and then each value,
// and a ratio is the at-least-once time over that run's, within the round.
func (h *harness) batchSection(loads map[string][2]string, shapes []string, values []int, n, rounds int) error {
	h.printf("\n### Batch bound (kafka.batch.max_records), exactly-once\n\n")
	h.printf("Each of %d rounds runs at-least-once (defaults) and exactly-once with each bound (in that order in the first round, rotated by one in each next, as in the catch-up runs above); the ratio is at-least-once's time over exactly-once's in the same round. Medians (min-max).\n\n", rounds)
	h.printf("| shape | max_records | seconds | events/s | vs at-least-once | CPU s | broker CPU s | peak RSS |\n|---|---|---|---|---|---|---|---|\n")
	for _, shape := range shapes {
		db, from := loads[shape][0], loads[shape][1]
		res := make([][]catchUp, len(values))
		ratios := make([][]float64, len(values))
		runs := []string{string(config.AtLeastOnce)}
		for _, records := range values {
			runs = append(runs, strconv.Itoa(records))
		}
		for r := 0; r < rounds; r++ {
			round := map[string]catchUp{}
			for _, run := range roundOrder(runs, r) {
				var c catchUp
				var err error
				if run == string(config.AtLeastOnce) {
					c, err = h.relayCatchUp(db, from, n, run, "")
				} else {
					records, _ := strconv.Atoi(run)
					c, err = h.relayCatchUp(db, from, n, string(config.ExactlyOnce), "", func(c *config.Config) {
						c.Kafka.Batch.MaxRecords = records
					})
				}
				if err != nil {
					return err
				}
				round[run] = c
			}
			for i, run := range runs[1:] {
				c := round[run]
				res[i] = append(res[i], c)
				ratios[i] = append(ratios[i], round[string(config.AtLeastOnce)].elapsed.Seconds()/c.elapsed.Seconds())
			}
		}
		for i, records := range values {
			el := median(durations(res[i], func(c catchUp) time.Duration { return c.elapsed }))
			cpu := median(durations(res[i], func(c catchUp) time.Duration { return c.cpu }))
			bcpu := median(durations(res[i], func(c catchUp) time.Duration { return c.brokerCPU }))
			lo, mid, hi := spread(ratios[i])
			rss := 0
			for _, c := range res[i] {
				rss = max(rss, c.rssKB)
			}
			h.printf("| %s | %d | %.2f | %.0f | %.2f (%.2f-%.2f) | %.2f | %.2f | %.0f MB |\n", shape, records, el.Seconds(), float64(n)/el.Seconds(),
				mid, lo, hi, cpu.Seconds(), bcpu.Seconds(), float64(rss)/1024)
		}
	}
	return nil
}
