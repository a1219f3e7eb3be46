package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// auditSection (-sections audit, not in the default) publishes n outbox
// rows (INSERTs of 200 rows) with the relay, stops it, and times `audit`
// over them as its own process: rows per second and its peak RSS
// (getrusage's maxrss of the child).
func (h *harness) auditSection(loads map[string][2]string, n int) error {
	h.printf("\n## 5. Audit: %d outbox rows against their topic\n\n", n)
	load, ok := loads["multi200"]
	if !ok {
		db, from, err := h.load("multi200", n)
		if err != nil {
			return err
		}
		load = [2]string{db, from}
		loads["multi200"] = load
	}
	cfg := h.relayConfig("audit", load[0], load[1])
	// Not primed: primeTopic's records carry no event id (audit would
	// name them phantoms).
	if err := h.createTopic(cfg.Router.TopicPrefix + "alarm"); err != nil {
		return err
	}
	if err := h.newCheckpointTopic(cfg.Kafka.CheckpointTopic); err != nil {
		return err
	}
	cmd, err := h.relayCommand(cfg)
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	visible := make(chan visibleAt, 1)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go h.checkpointVisible(ctx, cfg.Kafka.CheckpointTopic, int64(n), time.Now(), visible)
	select {
	case _, ok := <-visible:
		if !ok {
			_ = cmd.Process.Kill()
			<-exited
			return errors.New("audit: the checkpoint reader failed (above)")
		}
	case err := <-exited:
		return fmt.Errorf("audit: relay %s exited before publishing %d rows: %v", cfg.Name, n, err)
	case <-time.After(30 * time.Minute):
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("audit: relay %s did not publish %d rows in 30 minutes", cfg.Name, n)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-exited
	}
	return h.timeAudit(cfg, n)
}

// timeAudit runs `audit --json` over cfg's rows of the last day.
func (h *harness) timeAudit(cfg config.Config, n int) error {
	path := filepath.Join(h.dir, cfg.Name+".yaml") // written by relayCommand
	audit := exec.Command(h.bin, "audit", "--config", path, "--since", "24h", "--json")
	audit.Stderr = os.Stderr
	began := time.Now()
	out, err := audit.Output()
	elapsed := time.Since(began)
	if err != nil {
		return fmt.Errorf("audit: %v\n%s", err, out)
	}
	var rep struct {
		Rows, Records, Published int
		Clean                    bool
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return fmt.Errorf("audit: read its report: %v\n%s", err, out)
	}
	if rep.Rows != n || rep.Published != n || !rep.Clean {
		return fmt.Errorf("audit: %d rows, %d published, clean %v; want %d published and clean: %s", rep.Rows, rep.Published, rep.Clean, n, out)
	}
	var maxRSS int64
	if ru, ok := audit.ProcessState.SysUsage().(*syscall.Rusage); ok {
		maxRSS = ru.Maxrss // kB on Linux
	}
	h.printf("`outbox-relay audit --since 24h --json` over %d rows and %d records (6 partitions): %.2f s, %.0f rows/s, %.2f CPU s, peak RSS %.0f MB; clean.\n",
		rep.Rows, rep.Records, elapsed.Seconds(), float64(rep.Rows)/elapsed.Seconds(), cpuTime(audit.ProcessState).Seconds(), float64(maxRSS)/1024)
	return nil
}
