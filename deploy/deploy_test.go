// Package deploy holds deployment files (systemd, compose, Kubernetes,
// Grafana, Prometheus, server settings); this test checks what can be
// checked without running them: every YAML and JSON file parses, the relay
// configurations inside validate, every outbox_relay_ metric the alerts and
// the dashboard use exists, and the alert rules load in promtool.
package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

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
	m.SetPosition("0-1-1")
	m.KafkaTxnSeconds.Observe(1)
	m.BatchRecords.Observe(1)
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range fams {
		have[f.GetName()] = true
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

func TestAlertRulesLoadInPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("OUTBOX_RELAY_REQUIRE_PROMTOOL") != "" {
			t.Fatal("promtool is not installed (make test installs it: apt-get install prometheus)")
		}
		t.Skip("promtool not installed; make test installs it")
	}
	out, err := exec.Command(promtool, "check", "rules", "prometheus/alerts.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
