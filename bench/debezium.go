package main

// The Debezium section (-sections debezium, make bench-debezium): Debezium's
// MySQL connector with the outbox EventRouter on Kafka Connect standalone
// (deploy/dev/debezium.sh) over the same binlog as the relay, interleaved
// with the relay in each round, and a record-by-record comparison of what
// both published.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
)

// debeziumVersionString is the server version MariaDB reports when the
// Debezium section runs: the MySQL connector needs a MySQL 5.7-compatible
// one; it still names MariaDB, so the relay's flavor detection is unchanged.
const debeziumVersionString = "5.7.19-10.11-MariaDB-log"

// debeziumRun is one Connect worker, started and not yet stopped.
type debeziumRun struct {
	cmd    *exec.Cmd
	topic  string
	began  time.Time
	first  chan time.Duration
	dir    string
	pollMS int
}

// startDebezium starts deploy/dev/debezium.sh run for db's outbox from the
// binlog position recorded when db was loaded; pollMS 0 keeps Debezium's
// default poll.interval.ms.
func (h *harness) startDebezium(db string, pollMS int) (*debeziumRun, error) {
	pos, ok := h.binlog[db]
	if !ok {
		return nil, fmt.Errorf("start debezium: no binlog position recorded for %s", db)
	}
	h.seq++
	prefix := fmt.Sprintf("dbz%s-%d.", h.runID, h.seq)
	r := &debeziumRun{topic: prefix + "alarm", dir: filepath.Join(h.dir, fmt.Sprintf("debezium-%d", h.seq)), pollMS: pollMS,
		first: make(chan time.Duration, 1)}
	if err := h.newOutputTopic(r.topic); err != nil {
		return nil, err
	}
	host, port, _ := strings.Cut(h.db.Addr, ":")
	env := append(os.Environ(), "DBZ_DIR="+r.dir, "DBZ_BOOTSTRAP="+h.broker, "DBZ_DB_HOST="+host, "DBZ_DB_PORT="+port,
		"DBZ_DB_USER=root", "DBZ_DB_PASSWORD="+devdb.RootPassword, "DBZ_DB="+db, "DBZ_TOPIC_PREFIX="+prefix,
		"DBZ_BINLOG_FILE="+pos.file, "DBZ_BINLOG_POS="+strconv.FormatUint(uint64(pos.pos), 10),
		"DBZ_SERVER_ID="+strconv.Itoa(6000+h.seq))
	if pollMS > 0 {
		env = append(env, "DBZ_POLL_MS="+strconv.Itoa(pollMS))
	}
	// The offset file is written before the clock starts: it stands for
	// an offset a running deployment already has.
	seed := exec.Command("deploy/dev/debezium.sh", "seed")
	seed.Env, seed.Stdout, seed.Stderr = env, os.Stderr, os.Stderr
	if err := seed.Run(); err != nil {
		return nil, fmt.Errorf("seed debezium offset: %w", err)
	}
	r.cmd = exec.Command("deploy/dev/debezium.sh", "run")
	r.cmd.Env, r.cmd.Stdout, r.cmd.Stderr = env, os.Stderr, os.Stderr
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r.began = time.Now()
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start debezium: %w", err)
	}
	go h.firstRecord(r.topic, r.began, r.first)
	return r, nil
}

// stop ends the worker and returns its CPU time and peak RSS (kB), read
// from /proc before it is told to stop.
func (r *debeziumRun) stop() (cpu time.Duration, rssKB int) {
	cpu, rssKB = procCPU(r.cmd.Process.Pid), peakRSS(r.cmd.Process.Pid)
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-done
	}
	return cpu, rssKB
}

// logTail is the end of the worker's log, for errors.
func (r *debeziumRun) logTail() string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "connect.log"))
	var errs []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "ERROR") {
			errs = append(errs, l)
		}
	}
	if len(errs) > 5 {
		errs = errs[:5]
	}
	return strings.Join(errs, "\n")
}

// procCPU is the user+system CPU time pid has used so far.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ 100
}

// debeziumCatchUp runs Debezium over db's n rows until the topic holds n
// records after the primed ones (end offsets, polled every 100 ms).
func (h *harness) debeziumCatchUp(db string, n, pollMS int) (catchUp, string, error) {
	r, err := h.startDebezium(db, pollMS)
	if err != nil {
		return catchUp{}, "", err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.broker))
	if err != nil {
		r.stop()
		return catchUp{}, "", err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var res catchUp
	for deadline := time.Now().Add(20 * time.Minute); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ends, err := adm.ListEndOffsets(ctx, r.topic)
		cancel()
		var sum int64
		if err == nil {
			ends.Each(func(o kadm.ListedOffset) { sum += o.Offset })
		}
		if sum >= int64(n)+outputPartitions {
			res.elapsed = time.Since(r.began)
			break
		}
		if time.Now().After(deadline) || r.cmd.ProcessState != nil {
			r.stop()
			return res, "", fmt.Errorf("debezium did not catch up (%d of %d records):\n%s", max(sum-outputPartitions, 0), n, r.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	res.cpu, res.rssKB = r.stop()
	select {
	case res.first = <-r.first:
	case <-time.After(10 * time.Second):
		res.first = -1
	}
	return res, r.topic, nil
}

// outRecord is what a comparison looks at.
type outRecord struct {
	key, value, typ []byte
	partition       int32
}

// readTopic reads n records of topic (read_committed) keyed by their id header.
func (h *harness) readTopic(topic string, n int) (map[string]outRecord, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.broker), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	out := make(map[string]outRecord, n)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seen := 0
	for seen < n && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if primed(r) {
				return
			}
			seen++
			var id string
			o := outRecord{key: r.Key, value: r.Value, partition: r.Partition}
			for _, hd := range r.Headers {
				switch hd.Key {
				case "id":
					id = string(hd.Value)
				case "type":
					o.typ = hd.Value
				}
			}
			out[id] = o
		})
	}
	if seen < n {
		return out, fmt.Errorf("read %d of %d records from %s", seen, n, topic)
	}
	return out, nil
}

// compareTopics reports how the records of two topics differ, by event id.
func (h *harness) compareTopics(relayTopic, dbzTopic string, n int) (string, error) {
	a, err := h.readTopic(relayTopic, n)
	if err != nil {
		return "", err
	}
	b, err := h.readTopic(dbzTopic, n)
	if err != nil {
		return "", err
	}
	var missing, key, value, part, typ int
	var example string
	for id, ra := range a {
		rb, ok := b[id]
		switch {
		case !ok:
			missing++
			continue
		case !bytes.Equal(ra.key, rb.key):
			key++
		case !bytes.Equal(ra.value, rb.value):
			value++
		case !bytes.Equal(ra.typ, rb.typ):
			typ++
		case ra.partition != rb.partition:
			part++
		default:
			continue
		}
		if example == "" {
			example = fmt.Sprintf("; first difference, event %s: relay key %q value %.80q partition %d, Debezium key %q value %.80q partition %d",
				id, ra.key, ra.value, ra.partition, rb.key, rb.value, rb.partition)
		}
	}
	return fmt.Sprintf("%d relay records (%d distinct ids) against %d Debezium records (%d distinct ids): missing in Debezium %d, key differs %d, value bytes differ %d, type header differs %d, partition differs %d%s",
		n, len(a), n, len(b), missing, key, value, typ, part, example), nil
}

// debeziumSection writes the side-by-side section: catch-up in both shapes
// (relay exactly-once, relay at-least-once, Debezium defaults, interleaved
// per round), a record comparison per shape, and latency at 1,000 tx/s.
func (h *harness) debeziumSection(loads map[string][2]string, shapes []string, n, rounds, latencySeconds int) error {
	h.printf("## Debezium 3.6.1 side by side (Kafka Connect %s standalone, `deploy/dev/debezium.sh`)\n\n", "4.1.1")
	h.printf("Debezium's MySQL connector (MariaDB reports `--version=%s`), EventRouter routing as the relay's defaults (topic per aggregate_type, key aggregate_id, header id = event_id, header type = event_type), StringConverter for keys and values (the payload bytes as stored), snapshot.mode=recovery from a seeded binlog offset, file offset store and schema history, 1 GB heap, Connect producer defaults; Debezium defaults otherwise (poll.interval.ms 500 unless stated). Catch-up is timed from process start until the topic's end offsets reach N after its primed records (Debezium) or the committed checkpoint counts N (relay); every contender's output topic is created and primed with one record per partition before its clock starts (readers and the comparison skip them). Rounds run relay exactly-once, relay at-least-once, Debezium, one after the other.\n\n", debeziumVersionString)
	h.printf("| shape | run | seconds median (range) | events/s | CPU s | peak RSS | first record after |\n|---|---|---|---|---|---|---|\n")
	var notes strings.Builder
	runs := []string{string(config.ExactlyOnce), string(config.AtLeastOnce), "debezium"}
	for _, shape := range shapes {
		if shape == "" || shape == "none" {
			continue
		}
		if _, ok := loads[shape]; !ok {
			return fmt.Errorf("unknown shape %q (single | multi200)", shape)
		}
		db, from := loads[shape][0], loads[shape][1]
		res := map[string][]catchUp{}
		for r := 0; r < rounds; r++ {
			var relayTopic string
			for _, run := range runs {
				var c catchUp
				var err error
				if run == "debezium" {
					var topic string
					c, topic, err = h.debeziumCatchUp(db, n, 0)
					if err == nil && r == 0 {
						cmp, cerr := h.compareTopics(relayTopic, topic, n)
						if cerr != nil {
							return cerr
						}
						fmt.Fprintf(&notes, "- %s, relay exactly-once against Debezium: %s.\n", shape, cmp)
					}
				} else {
					c, err = h.relayCatchUp(db, from, n, run, "")
					relayTopic = fmt.Sprintf("bench%s-%d.alarm", h.runID, h.seq)
				}
				if err != nil {
					return fmt.Errorf("%s %s: %w", shape, run, err)
				}
				fmt.Fprintf(os.Stderr, "debezium section: %s round %d %s: %.2f s, %.2f CPU s, %d MB\n", shape, r+1, run, c.elapsed.Seconds(), c.cpu.Seconds(), c.rssKB/1024)
				res[run] = append(res[run], c)
			}
		}
		for _, run := range runs {
			els := durations(res[run], func(c catchUp) time.Duration { return c.elapsed })
			el := median(els)
			sort.Slice(els, func(i, j int) bool { return els[i] < els[j] })
			cpu := median(durations(res[run], func(c catchUp) time.Duration { return c.cpu }))
			rss := 0
			for _, c := range res[run] {
				rss = max(rss, c.rssKB)
			}
			first := median(durations(res[run], func(c catchUp) time.Duration { return c.first }))
			h.printf("| %s | %s | %.2f (%.2f-%.2f) | %.0f | %.2f | %.0f MB | %d ms |\n", shape, run, el.Seconds(), els[0].Seconds(), els[len(els)-1].Seconds(),
				float64(n)/el.Seconds(), cpu.Seconds(), float64(rss)/1024, first.Milliseconds())
		}
	}
	h.printf("\nSame records:\n\n%s", notes.String())
	if latencySeconds > 0 {
		d := time.Duration(latencySeconds) * time.Second
		h.printf("\nCommit-to-receive latency at 1,000 one-row tx/s, %d s each (as section 2):\n\n| run | achieved | events | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|---|\n", latencySeconds)
		for _, run := range []struct {
			name   string
			pollMS int
		}{{string(config.ExactlyOnce), 0}, {string(config.AtLeastOnce), 0}, {"debezium defaults", 0}, {"debezium poll.interval.ms=10", 10}} {
			var lat latencyResult
			var err error
			if run.name == string(config.ExactlyOnce) || run.name == string(config.AtLeastOnce) {
				lat, err = h.latency(run.name, 1000, 1, d)
			} else {
				lat, err = h.debeziumLatency(1000, d, run.pollMS)
			}
			if err != nil {
				return fmt.Errorf("latency %s: %w", run.name, err)
			}
			h.printf("| %s | %.0f | %d | %.1f | %.1f | %.1f |\n", run.name, lat.achieved, len(lat.samples),
				ms(lat.quantile(0.5)), ms(lat.quantile(0.99)), ms(lat.quantile(1)))
		}
	}
	return nil
}

// debeziumLatency is latency (latency.go) with Debezium in the relay's place.
func (h *harness) debeziumLatency(rate int, d time.Duration, pollMS int) (latencyResult, error) {
	db, _, err := h.load("single", 0)
	if err != nil {
		return latencyResult{}, err
	}
	r, err := h.startDebezium(db, pollMS)
	if err != nil {
		return latencyResult{}, err
	}
	defer r.stop()
	cons, err := kgo.NewClient(kgo.SeedBrokers(h.broker), kgo.ConsumeTopics(r.topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(10*time.Millisecond))
	if err != nil {
		return latencyResult{}, err
	}
	defer cons.Close()
	if err := h.db.Exec(fmt.Sprintf(`INSERT INTO %s.outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ('warm-up', 'alarm', 'dev-0', 'AlarmCreated', '{}')`, db)); err != nil {
		return latencyResult{}, err
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	for warm := 0; warm == 0 && wctx.Err() == nil; {
		cons.PollFetches(wctx).EachRecord(func(r *kgo.Record) {
			if !primed(r) {
				warm++
			}
		})
	}
	wcancel()
	warm := int(float64(rate) * latencyWarmUp.Seconds())
	if _, err := h.measureLatency(cons, db, "w", 4, warm, rate, 1, latencyWarmUp); err != nil {
		return latencyResult{}, fmt.Errorf("warm up: %w", err)
	}
	return h.measureLatency(cons, db, "l", 4, int(float64(rate)*d.Seconds()), rate, 1, d)
}

// binlogPos is a binlog file and position.
type binlogPos struct {
	file string
	pos  uint32
}

// recordBinlog notes the server's binlog position for db (taken with its
// GTID start position, before db's rows are written).
func (h *harness) recordBinlog(db string) error {
	pos, err := h.binlogEnd()
	if err != nil {
		return err
	}
	if h.binlog == nil {
		h.binlog = map[string]binlogPos{}
	}
	h.binlog[db] = pos
	return nil
}

// hostTicks is the machine's CPU time, busy and in all, over every core
// since boot (/proc/stat, in USER_HZ ticks); zero when unreadable.
type hostTicks struct{ busy, all uint64 }

func readHostTicks() hostTicks {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return hostTicks{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return hostTicks{}
	}
	var t hostTicks
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		t.all += n
		if i != 3 && i != 4 { // idle, iowait
			t.busy += n
		}
	}
	return t
}

// busySince is the share of the machine's CPU time (all cores) spent busy
// since t; -1 when unknown.
func (t hostTicks) busySince(end hostTicks) float64 {
	if t.all == 0 || end.all <= t.all {
		return -1
	}
	return float64(end.busy-t.busy) / float64(end.all-t.all)
}
