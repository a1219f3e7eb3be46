package itest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"gopkg.in/yaml.v3"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// RelayConfig returns a valid configuration for tables on db and k, with test
// friendly timings; edit it before use.
func (e *Env) RelayConfig(k *Kafka, tables ...string) config.Config {
	cfg := config.Default()
	cfg.Name = e.Unique("relay")
	cfg.Source.Hosts = []string{e.DB.Addr}
	cfg.Source.User = "relay"
	cfg.Source.Password = "relay-pw"
	cfg.Source.ServerID = uint32(1000 + e.counter.Add(1))
	cfg.Source.Tables = tables
	cfg.Source.HeartbeatPeriod = time.Second
	cfg.Kafka.Brokers = k.Brokers
	cfg.Kafka.CheckpointTopic = "outbox-relay.checkpoints." + cfg.Name
	cfg.Kafka.CheckpointInterval = 200 * time.Millisecond
	cfg.Kafka.TopicPartitions = 3
	cfg.Router.TopicPrefix = "outbox.event." + cfg.Name + "."
	cfg.HTTP.Listen = ""
	cfg.Log.Level = "debug"
	// A restarted relay takes the lease once its killed incarnation's group
	// session ends: keep that short (the brokers allow it: harness.go,
	// deploy/dev/kafka.sh). The HA tests use the defaults.
	cfg.HA.SessionTimeout = 3 * time.Second
	cfg.HA.HeartbeatInterval = 500 * time.Millisecond
	return cfg
}

// Pipeline is the usual start of a test: a broker, a fresh outbox schema and
// a relay configuration capturing its outbox table.
func (e *Env) Pipeline(t testing.TB) (*Kafka, *Schema, config.Config) {
	t.Helper()
	k := StartKafka(t)
	s := e.NewSchema(t)
	return k, s, e.RelayConfig(k, s.Table())
}

// WriteConfig writes cfg as YAML into the test's directory; the password is
// passed as ${RELAY_TEST_PASSWORD} so the file holds no secret.
func WriteConfig(t testing.TB, cfg config.Config) string {
	t.Helper()
	// One file is one instance: processes started from it again (a
	// restart) keep its lock group instance id, as on a real host.
	if cfg.HA.InstanceID == "" {
		cfg.HA.InstanceID = newInstanceID()
	}
	pw := cfg.Source.Password
	cfg.Source.Password = "${RELAY_TEST_PASSWORD}"
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RELAY_TEST_PASSWORD", pw)
	return path
}

// InProcess is a relay running in the test process.
type InProcess struct {
	Metrics *metrics.Metrics
	logs    syncBuffer
	cancel  context.CancelFunc
	done    chan struct{}
	err     error
}

type syncBuffer struct {
	mu  chan struct{}
	buf *bytes.Buffer
}

func (b syncBuffer) Write(p []byte) (int, error) {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.Write(p)
}

// RunRelay starts the relay in-process; Stop ends it.
func RunRelay(t testing.TB, cfg config.Config) *InProcess {
	t.Helper()
	logs := syncBuffer{mu: make(chan struct{}, 1), buf: &bytes.Buffer{}}
	log := zerolog.New(logs).Level(zerolog.DebugLevel)
	m := metrics.New("test")
	if cfg.HA.InstanceID == "" {
		// Every in-process instance is an instance of its own (they share
		// this host's name, the default).
		cfg.HA.InstanceID = newInstanceID()
	}
	r, err := relay.New(cfg, log, m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &InProcess{Metrics: m, logs: logs, cancel: cancel, done: make(chan struct{})}
	go func() { p.err = r.Run(ctx); close(p.done) }()
	t.Cleanup(func() { _ = p.Stop() })
	return p
}

// Logs is what the relay logged so far.
func (p *InProcess) Logs() string {
	p.logs.mu <- struct{}{}
	defer func() { <-p.logs.mu }()
	return p.logs.buf.String()
}

// WaitReady polls until the relay has written its starting checkpoint and
// streams the binlog.
func (p *InProcess) WaitReady(t testing.TB) {
	t.Helper()
	Eventually(t, time.Minute, func() error {
		select {
		case <-p.done:
			t.Fatalf("relay stopped: %v", p.err)
		default:
		}
		if !p.Metrics.Ready.Load() {
			return fmt.Errorf("relay not ready")
		}
		return nil
	})
}

// Stop cancels the relay and returns Run's error.
func (p *InProcess) Stop() error {
	p.cancel()
	<-p.done
	return p.err
}

// StoppedWith waits for the relay to end by itself and returns Run's error;
// it fails the test if the relay is still running after a minute.
func (p *InProcess) StoppedWith(t testing.TB) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(time.Minute):
		t.Fatalf("the relay did not stop by itself within a minute; its last lines:\n%s", tailLines(p.Logs(), 12))
		return nil
	}
}

// Done is closed when Run returns; Err is then its result.
func (p *InProcess) Done() <-chan struct{} { return p.done }

// Err is Run's result once Done is closed.
func (p *InProcess) Err() error { return p.err }

// Proc is the relay binary running as a child process.
type Proc struct {
	cmd  *exec.Cmd
	Log  string // path of its combined output
	done chan struct{}
	err  error
	peak atomic.Int64 // the largest VmHWM sampled (PeakRSS)
}

// StartProc runs `outbox-relay run --config path`.
func (e *Env) StartProc(t testing.TB, path string, extraEnv ...string) *Proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "relay.log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(e.Binary, "run", "--config", path)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{cmd: cmd, Log: logPath, done: make(chan struct{})}
	go p.samplePeak()
	go func() { p.err = cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			out := p.Output()
			if len(out) > 6000 {
				out = "..." + out[len(out)-6000:]
			}
			t.Logf("relay output (%s):\n%s", logPath, out)
		}
	})
	return p
}

// Kill sends SIGKILL and waits.
func (p *Proc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Terminate sends SIGTERM and returns the exit code.
func (p *Proc) Terminate(timeout time.Duration) (int, error) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	return p.Wait(timeout)
}

// Wait waits for the process to exit and returns its exit code.
func (p *Proc) Wait(timeout time.Duration) (int, error) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), nil
	case <-time.After(timeout):
		return -1, fmt.Errorf("relay did not exit within %s", timeout)
	}
}

// Killed reports whether the process ended by SIGKILL.
func (p *Proc) Killed() bool {
	if !p.Exited() {
		return false
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// PeakRSS is the process's peak resident set size in bytes: the largest
// of its VmHWM (/proc/PID/status) sampled every 5 ms while it ran and read
// now if it still runs; -1 if none could be read. Not getrusage's maxrss:
// Go starts a child with vfork (CLONE_VM), so the kernel counts the test
// process's own peak, at the start, in the child's maxrss.
func (p *Proc) PeakRSS() int64 {
	if !p.Exited() {
		p.readPeak()
	}
	if v := p.peak.Load(); v > 0 {
		return v
	}
	return -1
}

// samplePeak reads the process's VmHWM every 5 ms until it exits.
func (p *Proc) samplePeak() {
	for tick := time.NewTicker(5 * time.Millisecond); ; {
		p.readPeak()
		select {
		case <-p.done:
			tick.Stop()
			return
		case <-tick.C:
		}
	}
}

func (p *Proc) readPeak() {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			for v := n << 10; ; {
				old := p.peak.Load()
				if v <= old || p.peak.CompareAndSwap(old, v) {
					return
				}
			}
		}
	}
}

// Output is what the process wrote so far.
func (p *Proc) Output() string {
	b, _ := os.ReadFile(p.Log)
	return string(b)
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// WaitCheckpoint polls the committed checkpoint until it covers target.
func WaitCheckpoint(t testing.TB, cfg config.Config, target string, timeout time.Duration) *checkpoint.Checkpoint {
	t.Helper()
	store := Store(t, cfg)
	want, err := binlog.ParseSet("mariadb", target)
	if err != nil {
		t.Fatal(err)
	}
	var got *checkpoint.Checkpoint
	Eventually(t, timeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cp, err := store.Load(ctx, cfg.Name)
		if err != nil {
			return err
		}
		if cp == nil {
			return fmt.Errorf("no checkpoint yet")
		}
		have, err := binlog.ParseSet(cp.Flavor, cp.GTIDSet)
		if err != nil {
			return err
		}
		if !have.Contain(want) || cp.Partial != nil {
			return fmt.Errorf("checkpoint at %q (partial %v), want %q", cp.GTIDSet, cp.Partial, target)
		}
		got = cp
		return nil
	})
	return got
}

// CLI runs the relay binary with args (stdin not a terminal) and returns
// its stdout, stderr and exit code.
func (e *Env) CLI(t testing.TB, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(e.Binary, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("run %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return out.String(), errb.String(), code
}

// Store is cfg's checkpoint store.
func Store(t testing.TB, cfg config.Config) *checkpoint.Store {
	t.Helper()
	k, err := clients.NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return checkpoint.NewStore(cfg.Kafka.CheckpointTopic, k.Admin()...)
}

// WithHeader returns cfg with column copied into a record header.
func WithHeader(cfg config.Config, column string) config.Config {
	cfg.Router.AdditionalFields = append(cfg.Router.AdditionalFields, config.AdditionalField{Column: column, Placement: "header"})
	return cfg
}

var instanceSeq atomic.Int64

// newInstanceID is a lock group instance id no other instance of this test
// binary uses.
func newInstanceID() string {
	return fmt.Sprintf("itest-%d-%d", os.Getpid(), instanceSeq.Add(1))
}

// tailLines is the last n lines of s.
func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WaitLockGroup waits until the lock group of pipeline name is stable with
// n members: the instances started have joined and no rebalance is under
// way.
func WaitLockGroup(t testing.TB, brokers []string, name string, n int, timeout time.Duration) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	Eventually(t, timeout, func() error {
		groups, err := adm.DescribeGroups(context.Background(), clients.GroupID(name))
		if err == nil {
			err = groups.Error()
		}
		if err != nil {
			return err
		}
		for _, g := range groups {
			if g.State != "Stable" || len(g.Members) != n {
				return fmt.Errorf("lock group %s, %d of %d members", g.State, len(g.Members), n)
			}
		}
		return nil
	})
}
