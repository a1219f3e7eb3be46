//go:build integration

package itest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// SIGHUP (a closed terminal, a supervisor's "reload"), SIGUSR1 and SIGUSR2
// to a running relay: each is logged and ignored; the relay goes on
// publishing every row, and SIGTERM still stops it with exit 0. Go's default
// for SIGHUP is to die at once with no final checkpoint, and systemd's
// Restart=on-failure counts that death as clean: the relay stayed down.
func TestSIGHUPAndUserSignalsKeepRelayPublishing(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, s, cfg := env.Pipeline(t)
	cfg.Log.Level = "info"
	p := env.StartProc(t, WriteConfig(t, cfg))
	waitStarted(t, p, cfg)
	for i, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGHUP} {
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		Eventually(t, 10*time.Second, func() error {
			if p.Exited() {
				t.Fatalf("the relay exited on %s: %v\n%s", sig, p.cmd.ProcessState, p.Output())
			}
			if n := strings.Count(p.Output(), `"signal ignored`); n < i+1 {
				return fmt.Errorf("%d signals logged as ignored, want %d", n, i+1)
			}
			return nil
		})
		if _, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 20, Tag: fmt.Sprintf("s%d", i)}); err != nil {
			t.Fatal(err)
		}
		WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	}
	if !strings.Contains(p.Output(), `"signal":"hangup"`) {
		t.Fatalf("the log does not name SIGHUP:\n%s", p.Output())
	}
	code, err := p.Terminate(time.Minute)
	if err != nil || code != 0 {
		t.Fatalf("SIGTERM after the ignored signals: exit %d (%v):\n%s", code, err, p.Output())
	}
	rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix))
	if !rep.OK() {
		t.Fatal(rep)
	}
	t.Logf("after SIGHUP, SIGUSR1, SIGUSR2, SIGHUP: %s", rep)
}

// The reading end of the relay's stderr pipe closes (a log shipper or a
// `| tee` that died): the relay is not killed by SIGPIPE (Go's default for
// a write to a broken fd 2, a death systemd's Restart=on-failure counts as
// clean), it stops cleanly on its next log line instead, with its final
// checkpoint covering what it read, and exits 75 so that a supervisor starts
// it again with a log stream. The restarted relay completes the stream
// exactly once.
func TestClosedStderrPipeStopsRelayCleanly(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, s, cfg := env.Pipeline(t)
	cfg.Log.Level = "info"
	// While events flow a progress line is logged every 100 ms.
	cfg.Log.ProgressInterval = 100 * time.Millisecond
	path := WriteConfig(t, cfg)
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(env.Binary, "run", "--config", path)
	cmd.Stderr = wr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wr.Close() // the child holds the only writing end
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })

	var mu sync.Mutex
	var logged bytes.Buffer
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 4096)
		for {
			n, err := rd.Read(buf)
			mu.Lock()
			logged.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	output := func() string { mu.Lock(); defer mu.Unlock(); return logged.String() }
	Eventually(t, time.Minute, func() error {
		select {
		case <-exited:
			t.Fatalf("relay exited: %s", output())
		default:
		}
		if cp := loadCheckpoint(t, cfg); cp == nil {
			return fmt.Errorf("no checkpoint yet")
		}
		return nil
	})
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 50, Tag: "a"}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)

	// Close the reading end: the next line the relay logs (the progress
	// of the rows written next) meets EPIPE.
	rd.Close()
	<-readDone
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 50, Pace: 5 * time.Millisecond, Tag: "b"}); err != nil {
		t.Fatal(err)
	}
	read := Head(t, env.DB)
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatalf("the relay did not stop within a minute of its stderr closing; its log before:\n%s", output())
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		t.Fatalf("the relay died by %s when its stderr pipe closed; its log before:\n%s", ws.Signal(), output())
	}
	if code := ws.ExitStatus(); code != 75 {
		t.Fatalf("exit %d after its stderr closed, want 75 (restart); its log before:\n%s", code, output())
	}
	// Stopped cleanly: nothing left open, and the final checkpoint covers
	// what it had read when it stopped (at least what was written before
	// the pipe closed; the rest follows after the restart).
	requireNoOpenTransaction(t, k.Brokers, cfg.Kafka.CheckpointTopic, cfg.Router.TopicPrefix)
	final := loadCheckpoint(t, cfg)
	if final == nil || final.Events < 100 {
		t.Fatalf("final checkpoint %+v, want the 100 events written before the stop", final)
	}
	env.StartProc(t, path)
	WaitCheckpoint(t, cfg, read, time.Minute)
	rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix))
	if !rep.OK() {
		t.Fatal(rep)
	}
	t.Logf("exit 75 once its stderr closed; the final checkpoint counted %d events; after the restart: %s", final.Events, rep)
}
