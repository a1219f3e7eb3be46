// Package deploy holds deployment files (systemd, compose, Kubernetes,
// Grafana, Prometheus, server settings); this test checks what can be
// checked without running them: every YAML and JSON file parses, the relay
// configurations inside validate, every outbox_relay_ metric the alerts and
// the dashboard use exists and every family is on the dashboard, the alert
// rules load in promtool and pass their unit tests (prometheus/alerts_test.yml)
// and each has a runbook section, the systemd unit's security score
// (systemd_test.go), the Kubernetes pod against the restricted Pod Security
// profile (kubernetes_test.go). With the integration tag: MariaDB starts with
// mysql/mariadb.cnf and grants.sql passes the relay's checks
// (mariadb_test.go); dashtest evaluates the dashboard against a live relay.
package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

func files(t *testing.T, exts ...string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "templates" && strings.HasPrefix(p, "helm") {
			return filepath.SkipDir // Go templates (helm_test.go renders them)
		}
		for _, e := range exts {
			if !d.IsDir() && strings.HasSuffix(p, e) {
				out = append(out, p)
			}
		}
		return nil
	})
	if err != nil || len(out) == 0 {
		t.Fatalf("no %v files: %v", exts, err)
	}
	return out
}

func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, doc)
	}
}

func TestFilesParse(t *testing.T) {
	for _, f := range files(t, ".yml", ".yaml") {
		if len(yamlDocs(t, f)) == 0 {
			t.Errorf("%s: no YAML document", f)
		}
	}
	for _, f := range files(t, ".json") {
		raw, _ := os.ReadFile(f)
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func parseRelayConfig(t *testing.T, where, raw string) {
	t.Helper()
	secret := filepath.Join(t.TempDir(), "secret")
	_ = os.WriteFile(secret, []byte("x"), 0o600)
	raw = regexp.MustCompile(`password_file: \S+`).ReplaceAllString(raw, "password_file: "+secret)
	if _, err := config.Parse([]byte(raw), func(string) (string, bool) { return "x", true }); err != nil {
		t.Errorf("%s: %v", where, err)
	}
	if err := validateSchema(raw); err != nil {
		t.Errorf("%s: `outbox-relay config schema` refuses it: %v", where, err)
	}
}

// validateSchema validates a relay configuration against the JSON Schema
// `outbox-relay config schema` prints, with a JSON Schema library.
func validateSchema(raw string) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(config.JSONSchema()))
	if err != nil {
		return fmt.Errorf("the schema is not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(config.SchemaID, doc); err != nil {
		return err
	}
	schema, err := c.Compile(config.SchemaID)
	if err != nil {
		return err
	}
	j, err := sigsyaml.YAMLToJSON([]byte(raw))
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		return err
	}
	return schema.Validate(inst)
}

func TestRelayConfigsValidate(t *testing.T) {
	raw, err := os.ReadFile("compose/relay.yaml")
	if err != nil {
		t.Fatal(err)
	}
	parseRelayConfig(t, "compose/relay.yaml", string(raw))
	found := false
	for _, doc := range yamlDocs(t, "kubernetes/outbox-relay.yaml") {
		if doc["kind"] == "ConfigMap" {
			data, _ := doc["data"].(map[string]any)
			cfg, _ := data["relay.yaml"].(string)
			parseRelayConfig(t, "kubernetes ConfigMap", cfg)
			found = true
		}
	}
	if !found {
		t.Error("no ConfigMap with relay.yaml in kubernetes/outbox-relay.yaml")
	}
}

func TestMetricsExist(t *testing.T) {
	m := metrics.New("test")
	m.Events.WithLabelValues("t", "published")
	m.KafkaTransactions.WithLabelValues("commit")
	m.Restarts.WithLabelValues("kafka")
	m.Errors.WithLabelValues("kafka")
	m.InvalidOps.WithLabelValues("app.outbox", "update")
	m.SourceHosts.WithLabelValues("db:3306", "streaming")
	m.SetPosition("0-1-1")
	m.KafkaTxnSeconds.Observe(1)
	m.BatchRecords.Observe(1)
	m.AuditEnabled()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range fams {
		have[f.GetName()] = true
	}
	// Every family the relay exports is on the dashboard (process and Go
	// runtime: memory and GC at least).
	dash, _ := os.ReadFile("grafana/outbox-relay-dashboard.json")
	for n := range have {
		if strings.HasPrefix(n, "outbox_relay_") && !strings.Contains(string(dash), n) {
			t.Errorf("dashboard has no panel for %s", n)
		}
	}
	for _, n := range []string{"process_resident_memory_bytes", "go_memstats_heap_inuse_bytes", "go_gc_duration_seconds"} {
		if !strings.Contains(string(dash), n) {
			t.Errorf("dashboard has no panel for %s", n)
		}
	}
	if strings.Contains(string(dash), `"uid": "prometheus"`) {
		t.Error("dashboard hard-codes a datasource uid: use ${datasource}")
	}
	name := regexp.MustCompile(`outbox_relay_[a-z0-9_]+`)
	for _, f := range []string{"prometheus/alerts.yml", "grafana/outbox-relay-dashboard.json"} {
		raw, _ := os.ReadFile(f)
		used := name.FindAllString(string(raw), -1)
		if len(used) == 0 {
			t.Errorf("%s uses no outbox_relay_ metric", f)
		}
		for _, n := range used {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
			if !have[n] && !have[base] {
				t.Errorf("%s uses %s, which the relay does not export", f, n)
			}
		}
	}
}

// Every alert is tested to fire in alerts_test.yml and has a runbook
// section (a heading with its name) in docs/runbook.md that its runbook
// annotation points to.
func TestAlertsTestedAndInRunbook(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	raw, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	tests, _ := os.ReadFile("prometheus/alerts_test.yml")
	runbook, _ := os.ReadFile("../docs/runbook.md")
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			fires := regexp.MustCompile(`(?m)alertname: ` + r.Alert + `\n\s+exp_alerts:\n\s+- exp_labels`)
			if !fires.Match(tests) {
				t.Errorf("%s: no test in alerts_test.yml where it fires", r.Alert)
			}
			anchor, ok := strings.CutPrefix(r.Annotations["runbook"], "docs/runbook.md#")
			if !ok {
				t.Errorf("%s: runbook annotation %q does not point into docs/runbook.md", r.Alert, r.Annotations["runbook"])
				continue
			}
			heading := regexp.MustCompile(`(?mi)^#+ (\S+)`)
			found := false
			for _, h := range heading.FindAllSubmatch(runbook, -1) {
				found = found || strings.EqualFold(string(h[1]), anchor)
			}
			if !found {
				t.Errorf("%s: docs/runbook.md has no section %q", r.Alert, anchor)
			}
		}
	}
	if n < 10 {
		t.Fatalf("%d alerts", n)
	}
}

// promtoolRun runs `promtool test rules` on a test file written next to a
// copy of alerts.yml.
func promtoolRun(t *testing.T, tests string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("OUTBOX_RELAY_REQUIRE_PROMTOOL") != "" {
			t.Fatal("promtool is not installed (make deps installs it: apt-get install prometheus)")
		}
		t.Skip("promtool not installed; make test-integration requires it")
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

// A pipeline stopped for good beside another that streams has a critical
// pipeline-level alert firing. The failure guarded against: two pipelines
// scraped by one Prometheus (the layout alerts.yml is written for:
// "pipeline-wide alerts aggregate by (job, pipeline)"). The only instance
// of pipeline "orders" stops on a bad row (exit 65); systemd does not
// restart it (RestartPreventExitStatus=65), so its target stays down.
// Pipeline "alarms" keeps streaming. Thirty minutes later "orders" has
// published nothing for half an hour: a critical, pipeline-level alert must
// be firing. None is: OutboxRelayNotStreaming sums series that no longer
// exist (empty, not 0), OutboxRelayAbsent sees alarms' build_info, and
// OutboxRelayStoppedFatal resolved 15 minutes after the one scrape that saw
// exit code 65. Only the per-instance OutboxRelayTargetDown (warning) is
// left.
func TestAlertStoppedPipelineFiresCritical(t *testing.T) {
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
