package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
)

// Broker kinds a report part runs on.
const (
	brokerKfake = "kfake" // `outbox-relay dev kafka`: in memory, its own process
	brokerKafka = "kafka" // Apache Kafka, single KRaft node (deploy/dev/kafka.sh)
)

// startBroker makes h.broker point at a broker of kind and returns how to
// stop what it started and a line describing it. For kafka with addr set it
// uses that broker as it is; otherwise it starts deploy/dev/kafka.sh in a
// scratch directory on a free port (KAFKA_PORT when set), with kafka.sh's
// knobs from the environment: KAFKA_VERSION, KAFKA_HEAP, KAFKA_GC (the
// collector: g1, zgc, shenandoah) and KAFKA_JVM_OPTS, named in desc with
// the collector its GC log names.
func (h *harness) startBroker(kind, addr string) (stop func(), desc string, err error) {
	switch kind {
	case brokerKfake:
		port, err := devdb.FreePort()
		if err != nil {
			return nil, "", err
		}
		h.broker = fmt.Sprintf("127.0.0.1:%d", port)
		cmd := exec.Command(h.bin, "dev", "kafka", "--listen", h.broker)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, "", err
		}
		stop = func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }
		h.brokerPID = cmd.Process.Pid
		if err := waitBroker(h.broker); err != nil {
			stop()
			return nil, "", err
		}
		return stop, "kfake (`outbox-relay dev kafka`, in memory, its own process); topics of 6 partitions.", nil
	case brokerKafka:
		if addr != "" {
			h.broker = addr
			if _, port, err := net.SplitHostPort(addr); err == nil {
				// kafka.sh's directory: KAFKA_DIR as it was started with, or
				// its default.
				h.brokerDir = os.Getenv("KAFKA_DIR")
				if h.brokerDir == "" {
					h.brokerDir = filepath.Join(os.TempDir(), "outbox-relay-kafka-"+port)
				}
				h.brokerPID = pidFile(filepath.Join(h.brokerDir, "kafka.pid"))
			}
			return func() {}, fmt.Sprintf("Apache Kafka at %s (started by hand, collector %s); topics of 6 partitions, replication factor 1.", addr, collectorOf(h.brokerDir)), waitBroker(addr)
		}
		port, err := kafkaPort()
		if err != nil {
			return nil, "", err
		}
		dir, err := os.MkdirTemp("", "outbox-relay-bench-kafka-")
		if err != nil {
			return nil, "", err
		}
		env := append(os.Environ(), "KAFKA_PORT="+strconv.Itoa(port), "KAFKA_DIR="+dir)
		script := func(arg string) error {
			cmd := exec.Command("deploy/dev/kafka.sh", arg)
			cmd.Env, cmd.Stdout, cmd.Stderr = env, os.Stderr, os.Stderr
			return cmd.Run()
		}
		stop = func() { _ = script("stop"); _ = os.RemoveAll(dir) }
		if err := script("start"); err != nil {
			stop()
			return nil, "", fmt.Errorf("start Apache Kafka: %w", err)
		}
		h.broker = fmt.Sprintf("127.0.0.1:%d", port)
		h.brokerPID, h.brokerDir = pidFile(filepath.Join(dir, "kafka.pid")), dir
		ver := os.Getenv("KAFKA_VERSION")
		if ver == "" {
			ver = "4.1.1 (deploy/dev/kafka.sh's default)"
		}
		heap := os.Getenv("KAFKA_HEAP") // kafka.sh's -Xms and -Xmx
		if heap == "" {
			heap = "512m (deploy/dev/kafka.sh's default)"
		}
		opts := "Kafka's JVM options"
		if os.Getenv("KAFKA_JVM_OPTS") != "" {
			opts = "KAFKA_JVM_OPTS " + os.Getenv("KAFKA_JVM_OPTS")
		} else if gc := os.Getenv("KAFKA_GC"); gc != "" && gc != "g1" {
			opts = "Kafka's JVM options with KAFKA_GC=" + gc
		}
		return stop, fmt.Sprintf("Apache Kafka %s, one KRaft node on this machine (`deploy/dev/kafka.sh`, heap %s, %s, collector %s, broker defaults), started for this run; topics of 6 partitions, replication factor 1.",
			ver, heap, opts, collectorOf(dir)), nil
	}
	return nil, "", fmt.Errorf("unknown broker %q (kfake | kafka)", kind)
}

// pidFile reads a pid file; 0 when there is none.
func pidFile(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// collectorOf names the collector the broker's JVM ran, from its GC log.
func collectorOf(dir string) string {
	if c := gcCollector(dir); c != "" {
		return c + " (its GC log)"
	}
	return "unknown (no GC log)"
}

// kafkaPort is the port bench starts Apache Kafka on: KAFKA_PORT when set
// (kafka.sh's own knob: a host where each user has a range of ports), which
// must be free with its successor; otherwise a free pair.
func kafkaPort() (int, error) {
	v := os.Getenv("KAFKA_PORT")
	if v == "" {
		return freePortPair()
	}
	port, err := strconv.Atoi(v)
	if err != nil || port <= 0 || port >= 65535 {
		return 0, fmt.Errorf("KAFKA_PORT=%q: write a port number", v)
	}
	for _, p := range []int{port, port + 1} {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return 0, fmt.Errorf("KAFKA_PORT=%d: the broker needs ports %d and %d: %w", port, port, port+1, err)
		}
		l.Close()
	}
	return port, nil
}

// freePortPair is a free port whose successor is free too: kafka.sh puts
// the controller on KAFKA_PORT+1.
func freePortPair() (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+1))
		l.Close()
		if err == nil {
			l2.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("no two consecutive free ports found")
}

// latencyRun is one run of section 2: delivery, rate (events/s), events
// per transaction.
type latencyRun struct {
	delivery    string
	rate, perTx int
}

// defaultLatencyRuns are section 2's runs unless -latency-runs names others.
var defaultLatencyRuns = []latencyRun{
	{string(config.ExactlyOnce), 100, 1}, {string(config.ExactlyOnce), 1000, 1}, {string(config.AtLeastOnce), 1000, 1},
	{string(config.ExactlyOnce), 5000, 1}, {string(config.ExactlyOnce), 10000, 1}, {string(config.ExactlyOnce), 10000, 10},
}

// parseLatencyRuns reads -latency-runs: delivery:rate:perTx, comma separated.
func parseLatencyRuns(v string) ([]latencyRun, error) {
	var runs []latencyRun
	for _, f := range strings.Split(v, ",") {
		parts := strings.Split(f, ":")
		if len(parts) != 3 {
			return nil, fmt.Errorf("-latency-runs: %q: write delivery:rate:events-per-transaction, e.g. exactly-once:1000:1", f)
		}
		rate, err1 := strconv.Atoi(parts[1])
		per, err2 := strconv.Atoi(parts[2])
		d := config.Delivery(parts[0])
		if err1 != nil || err2 != nil || rate <= 0 || per <= 0 || (d != config.ExactlyOnce && d != config.AtLeastOnce) {
			return nil, fmt.Errorf("-latency-runs: %q: write delivery:rate:events-per-transaction, e.g. exactly-once:1000:1", f)
		}
		runs = append(runs, latencyRun{parts[0], rate, per})
	}
	return runs, nil
}

// latencySection writes section 2: commit-to-receive latency at fixed rates.
func (h *harness) latencySection(seconds int, runs []latencyRun) error {
	d := time.Duration(seconds) * time.Second
	h.printf("\n## 2. Commit-to-receive latency (%d s per rate)\n\n", seconds)
	h.printf("From the writer's COMMIT returning to a read_committed consumer (FetchMaxWait 10 ms) receiving the record; "+
		"transactions of an alarm record and 1 or 10 outbox rows (one INSERT), 4 writer connections, timed after %s at the same rate (not counted: a broker's JIT compiles its transaction path in the first thousands of transactions). "+
		"The last column is the median of the last tenth of the events to arrive: it grows with the run when the relay does not keep up.\n\n", latencyWarmUp)
	h.printf("The GC column is the broker's stop-the-world pauses during the run, and ZGC's allocation stalls when there were any, from its GC log (Apache Kafka started by `deploy/dev/kafka.sh`, collector %s; empty otherwise): an event committed during one waits for it, whatever the relay does.\n\n", collectorOf(h.brokerDir))
	h.printf("| delivery | target events/s | events per transaction | achieved | events | p50 ms | p99 ms | p99.9 ms | max ms | last tenth p50 ms | broker GC pauses: n, longest, total ms |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i, r := range runs {
		// With -relay-bin-b, each exactly-once run is measured with both
		// binaries, interleaved: A first in even runs, B first in odd ones.
		bins := []string{h.bin}
		if h.binB != "" && r.delivery == string(config.ExactlyOnce) {
			bins = []string{h.bin, h.binB}
			if i%2 == 1 {
				bins = []string{h.binB, h.bin}
			}
		}
		for _, bin := range bins {
			lat, err := h.latencyOf(bin, r.delivery, r.rate, r.perTx, d)
			if err != nil {
				return err
			}
			label := r.delivery
			if bin == h.binB {
				label += " (B)"
			}
			h.printf("| %s | %d | %d | %.0f | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %s |\n", label, r.rate, r.perTx, lat.achieved, len(lat.samples),
				ms(lat.quantile(0.5)), ms(lat.quantile(0.99)), ms(lat.quantile(0.999)), ms(lat.quantile(1)), ms(lat.lastP50), lat.gc)
		}
	}
	if h.latencySteps != "" {
		keepGCLog(h.brokerDir, filepath.Join(h.latencySteps, "broker-gc.log"))
	}
	return nil
}

// collectBrokerHeap has Apache Kafka's JVM collect its heap (`jcmd PID
// GC.run`) before a timed run, so that no run pays for the garbage of the
// one before it: after the baseline's 2,000,000 records the broker's G1
// started a concurrent cycle during the next run (the relay's exactly-once,
// always next in a round), 200 ms of broker CPU more than the same run
// later in the round, on a machine whose two cores the runs saturate. It
// does nothing on kfake, or when the broker's process is unknown; a
// failure is reported once and the runs go on.
func (h *harness) collectBrokerHeap() {
	if !h.apache || h.brokerPID == 0 || h.noBrokerGC {
		return
	}
	out, err := exec.Command("jcmd", strconv.Itoa(h.brokerPID), "GC.run").CombinedOutput()
	if err != nil && !h.brokerGCWarned {
		h.brokerGCWarned = true
		fmt.Fprintf(os.Stderr, "bench: cannot collect the broker's heap before a run (runs go on without): jcmd: %v: %s\n", err, out)
	}
}
