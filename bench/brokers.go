package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
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
// uses that broker as it is; otherwise it starts deploy/dev/kafka.sh on a
// free port in a scratch directory.
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
		if err := waitBroker(h.broker); err != nil {
			stop()
			return nil, "", err
		}
		return stop, "kfake (`outbox-relay dev kafka`, in memory, its own process); topics of 6 partitions.", nil
	case brokerKafka:
		if addr != "" {
			h.broker = addr
			return func() {}, fmt.Sprintf("Apache Kafka at %s (started by hand); topics of 6 partitions, replication factor 1.", addr), waitBroker(addr)
		}
		port, err := freePortPair()
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
		ver := os.Getenv("KAFKA_VERSION")
		if ver == "" {
			ver = "4.1.1 (deploy/dev/kafka.sh's default)"
		}
		return stop, fmt.Sprintf("Apache Kafka %s, one KRaft node on this machine (`deploy/dev/kafka.sh`, 512 MB heap, broker defaults), started for this run; topics of 6 partitions, replication factor 1.", ver), nil
	}
	return nil, "", fmt.Errorf("unknown broker %q (kfake | kafka)", kind)
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

// latencySection writes section 2: commit-to-receive latency at fixed rates.
func (h *harness) latencySection(seconds int) error {
	d := time.Duration(seconds) * time.Second
	h.printf("\n## 2. Commit-to-receive latency (%d s per rate)\n\n", seconds)
	h.printf("From the writer's COMMIT returning to a read_committed consumer (FetchMaxWait 10 ms) receiving the record; " +
		"transactions of an alarm record and 1 or 10 outbox rows (one INSERT), 4 writer connections. " +
		"The last column is the median of the last tenth of the events to arrive: it grows with the run when the relay does not keep up.\n\n")
	h.printf("| delivery | target events/s | events per transaction | achieved | events | p50 ms | p99 ms | max ms | last tenth p50 ms |\n|---|---|---|---|---|---|---|---|---|\n")
	runs := []struct {
		delivery    string
		rate, perTx int
	}{
		{string(config.ExactlyOnce), 100, 1}, {string(config.ExactlyOnce), 1000, 1}, {string(config.AtLeastOnce), 1000, 1},
		{string(config.ExactlyOnce), 5000, 1}, {string(config.ExactlyOnce), 10000, 1}, {string(config.ExactlyOnce), 10000, 10},
	}
	for _, r := range runs {
		lat, err := h.latency(r.delivery, r.rate, r.perTx, d)
		if err != nil {
			return err
		}
		h.printf("| %s | %d | %d | %.0f | %d | %.1f | %.1f | %.1f | %.1f |\n", r.delivery, r.rate, r.perTx, lat.achieved, len(lat.samples),
			ms(lat.quantile(0.5)), ms(lat.quantile(0.99)), ms(lat.quantile(1)), ms(lat.lastP50))
	}
	return nil
}
