package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// promtoolRun runs `promtool test rules` on a test file written next to a
// copy of alerts.yml.
func promtoolRun(t *testing.T, tests string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed")
	}
	dir := t.TempDir()
	rules, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.yml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "t.yml"), []byte(tests), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "t.yml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// Two pipelines scraped by one Prometheus (the layout alerts.yml is written
// for: "pipeline-wide alerts aggregate by (job, pipeline)"). The only
// instance of pipeline "orders" stops on a bad row (exit 65); systemd does
// not restart it (RestartPreventExitStatus=65), so its target stays down.
// Pipeline "alarms" keeps streaming. Thirty minutes later "orders" has
// published nothing for half an hour: a critical, pipeline-level alert must
// be firing. None is: OutboxRelayNotStreaming sums series that no longer
// exist (empty, not 0), OutboxRelayAbsent sees alarms' build_info, and
// OutboxRelayStoppedFatal resolved 15 minutes after the one scrape that saw
// exit code 65. Only the per-instance OutboxRelayTargetDown (warning) is left.
func TestAttack14StoppedPipelineNoCriticalAlert(t *testing.T) {
	promtoolRun(t, `
rule_files: [alerts.yml]
evaluation_interval: 15s
tests:
  - interval: 15s
    input_series:
      - series: 'up{job="outbox-relay",instance="a:9464",pipeline="alarms"}'
        values: '1x200'
      - series: 'outbox_relay_build_info{job="outbox-relay",instance="a:9464",pipeline="alarms",version="v1"}'
        values: '1x200'
      - series: 'outbox_relay_up{job="outbox-relay",instance="a:9464",pipeline="alarms",state="streaming"}'
        values: '1x200'
      - series: 'outbox_relay_exit_code{job="outbox-relay",instance="a:9464",pipeline="alarms"}'
        values: '-1x200'
      - series: 'up{job="outbox-relay",instance="o:9464",pipeline="orders"}'
        values: '1x9 0x190'
      - series: 'outbox_relay_build_info{job="outbox-relay",instance="o:9464",pipeline="orders",version="v1"}'
        values: '1x9'
      - series: 'outbox_relay_up{job="outbox-relay",instance="o:9464",pipeline="orders",state="streaming"}'
        values: '1x8 0'
      - series: 'outbox_relay_up{job="outbox-relay",instance="o:9464",pipeline="orders",state="stopped"}'
        values: '0x8 1'
      - series: 'outbox_relay_exit_code{job="outbox-relay",instance="o:9464",pipeline="orders"}'
        values: '-1x8 65'
    alert_rule_test:
      # 5 minutes in: StoppedFatal fires (as designed)
      - eval_time: 5m
        alertname: OutboxRelayStoppedFatal
        exp_alerts:
          - exp_labels: {severity: critical, job: outbox-relay, pipeline: orders, instance: "o:9464"}
            exp_annotations:
              description: "65: a data stop (bad row, statement-logged DML, ...); 66: the checkpoint's binlogs are purged; 78: configuration. A restart stops again: the log's last error says what to fix."
              runbook: "docs/runbook.md#outboxrelaystoppedfatal"
              summary: "outbox-relay o:9464 (orders) stopped with exit code 65"
      # 30 minutes in, still stopped: the pipeline must still be reported
      # (critical) as not publishing.
      - eval_time: 30m
        alertname: OutboxRelayNotStreaming
        exp_alerts:
          - exp_labels: {severity: critical, job: outbox-relay, pipeline: orders}
            exp_annotations:
              description: "For over a minute no instance has streamed the binlog to Kafka: a source or Kafka outage, a fatal stop, or a lost lock group. Events wait in the binlog."
              runbook: "docs/runbook.md#outboxrelaynotstreaming"
              summary: "outbox-relay pipeline orders: no instance is streaming"
`)
}
