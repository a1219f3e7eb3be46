//go:build !integration

package deploy

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"

	"github.com/outbox-relay/outbox-relay/internal/chartgen"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

// baseValues are the values of ci/three-pipelines-values.yaml, which
// render; each refusal below changes them in one place.
func baseValues(t *testing.T) map[string]any {
	t.Helper()
	vals, err := common.ReadValuesFile(chartDir + "/ci/three-pipelines-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

// pipeline is the i-th pipeline of vals.
func pipeline(vals map[string]any, i int) map[string]any {
	return vals["pipelines"].([]any)[i].(map[string]any)
}

// setKey sets the value at a dotted path of m, making the maps on the way.
func setKey(m map[string]any, path string, v any) {
	keys := strings.Split(path, ".")
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = v
}

// Each value a cluster operator gets wrong stops `helm template` with a
// message naming the key and what to write. The failure guarded against:
// `secret:` for `secrets:`, `pullPolicy: Sometimes`, `resources: big`, a
// misspelt relay key (sever_id), duplicate pipeline names and `pipelines:
// []` all rendered without an error (the last one to nothing).
func TestHelmChartRefusesWrongValues(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(vals map[string]any)
		want   string
	}{
		{"secret for secrets", func(v map[string]any) {
			p := pipeline(v, 0)
			p["secret"] = p["secrets"]
			delete(p, "secrets")
		}, "at '/pipelines/0': additional properties 'secret' not allowed"},
		{"pull policy", func(v map[string]any) { setKey(v, "image.pullPolicy", "Sometimes") },
			"at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'"},
		{"resources not a mapping", func(v map[string]any) { v["resources"] = "big" },
			"at '/resources': got string, want object"},
		{"a pipeline's resources not a quantity", func(v map[string]any) { setKey(pipeline(v, 1), "resources.limits.memory", "lots") },
			"at '/pipelines/1/resources/limits/memory'"},
		{"misspelt relay key", func(v map[string]any) {
			src := pipeline(v, 0)["config"].(map[string]any)["source"].(map[string]any)
			src["sever_id"] = src["server_id"]
			delete(src, "server_id")
		}, "at '/pipelines/0/config/source': additional properties 'sever_id' not allowed"},
		{"relay value of the wrong type", func(v map[string]any) { setKey(pipeline(v, 2), "config.kafka.delivery", "twice") },
			"at '/pipelines/2/config/kafka/delivery'"},
		{"name in the relay's config", func(v map[string]any) { setKey(pipeline(v, 0), "config.name", "other") },
			"at '/pipelines/0/config': additional properties 'name' not allowed"},
		{"http.listen in the relay's config", func(v map[string]any) { setKey(pipeline(v, 0), "config.http.listen", ":8080") },
			"at '/pipelines/0/config/http': additional properties 'listen' not allowed"},
		{"unknown top-level value", func(v map[string]any) { v["imagePullSecret"] = "regcred" },
			"additional properties 'imagePullSecret' not allowed"},
		{"pod anti-affinity mode", func(v map[string]any) { v["podAntiAffinity"] = "required" },
			"at '/podAntiAffinity': value must be one of 'soft', 'hard'"},
		{"env value not a string", func(v map[string]any) { v["env"] = []any{map[string]any{"name": "GOMAXPROCS", "value": 2}} },
			"at '/env/0/value': got number, want string"},
		{"toleration operator", func(v map[string]any) { v["tolerations"] = []any{map[string]any{"key": "k", "operator": "Is"}} },
			"at '/tolerations/0/operator'"},
		{"digest", func(v map[string]any) { setKey(v, "image.digest", "latest") }, "at '/image/digest'"},
		{"no pipeline", func(v map[string]any) { v["pipelines"] = []any{} },
			"pipelines: none given: add at least one pipeline"},
		{"duplicate names", func(v map[string]any) { pipeline(v, 2)["name"] = "orders-shard-0" },
			`pipelines: two pipelines named "orders-shard-0"`},
		{"names equal once cut to 63 characters", func(v map[string]any) {
			long := strings.Repeat("a", 58)
			pipeline(v, 0)["name"] = long + "-x"
			pipeline(v, 1)["name"] = long + "-y"
		}, "(<release>-<name> cut at 63 characters): shorten one"},
		{"a selector label in podLabels", func(v map[string]any) { pipeline(v, 1)["podLabels"] = map[string]any{"pipeline": "other"} },
			"podLabels: pipeline is the chart's own label"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := baseValues(t)
			tc.change(vals)
			_, err := helmRender(t, "shop", vals, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("helm template: %v\nwant an error with %q", err, tc.want)
			}
		})
	}
	// The chart's own values.yaml has no pipeline.
	_, err := helmRender(t, "shop", map[string]any{}, false)
	if err == nil || !strings.Contains(err.Error(), "pipelines: none given") {
		t.Errorf("helm template with the chart's values.yaml: %v, want the pipelines refused", err)
	}
}

// Every key of the relay's configuration that holds a secret is refused in
// a pipeline's values, in any form but a whole ${VAR}, by the schema and,
// with --skip-schema-validation, by the templates; the error never shows
// the value. The failure guarded against: only source.password and
// kafka.sasl.password were refused; an OAUTHBEARER kafka.sasl.token, an
// AWS secret_access_key and session_token landed in the ConfigMap in
// plain text.
func TestHelmChartRefusesEverySecretInline(t *testing.T) {
	keys := config.SecretKeys()
	for _, want := range []string{"source.password", "kafka.sasl.password", "kafka.sasl.token", "kafka.sasl.secret_access_key", "kafka.sasl.session_token"} {
		if !strings.Contains(strings.Join(keys, " "), want) {
			t.Errorf("config.SecretKeys() %v: no %s", keys, want)
		}
	}
	for _, key := range keys {
		for _, value := range []any{"hunter2-" + key, "${PW:-hunter2-" + key + "}", 424242} {
			for _, skip := range []bool{false, true} {
				vals := baseValues(t)
				setKey(pipeline(vals, 1)["config"].(map[string]any), key, value)
				_, err := helmRender(t, "shop", vals, skip)
				want := chartgen.SecretRefusal
				if skip {
					want = "pipelines[orders-shard-1].config." + key + ": a secret in values"
				}
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("%s: %v (skip schema %v): %v\nwant %q", key, value, skip, err, want)
					continue
				}
				if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "424242") {
					t.Errorf("%s: the error shows the secret: %v", key, err)
				}
			}
		}
	}
}

// A secret key written as ${VAR} renders (the relay expands it from env),
// unless env gives VAR as a plain value: that is the secret inline again.
func TestHelmChartSecretByVariable(t *testing.T) {
	for _, key := range config.SecretKeys() {
		vals := baseValues(t)
		p := pipeline(vals, 0)
		setKey(p["config"].(map[string]any), key, "${RELAY_SECRET}")
		p["env"] = []any{map[string]any{"name": "RELAY_SECRET", "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": "s", "key": "k"}}}}
		if _, err := helmRender(t, "shop", vals, false); err != nil {
			t.Errorf("%s as ${RELAY_SECRET} from a Secret: %v", key, err)
		}
		vals["env"] = []any{map[string]any{"name": "RELAY_SECRET", "value": "hunter2"}}
		delete(p, "env")
		_, err := helmRender(t, "shop", vals, false)
		if want := "pipelines[orders-shard-0]: env RELAY_SECRET holds config." + key + ", a secret, as a plain value"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s from env given as a value: %v, want %q", key, err, want)
		}
	}
}

// The chart's generated files are current: values.schema.json embeds the
// relay's schema of today (`outbox-relay config schema`) and its secret
// keys, templates/_secretkeys.tpl lists the same keys, files/alerts.yml is
// deploy/prometheus/alerts.yml; and the chart holds no symbolic link (Helm
// warns about each on every command).
func TestHelmChartGeneratedFilesAreCurrent(t *testing.T) {
	files, err := chartgen.Files("..")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		path := chartDir + "/" + name
		fi, err := os.Lstat(path)
		if err != nil {
			t.Errorf("%s: %v (go generate ./internal/config/, or make docs, writes it)", path, err)
			continue
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			t.Errorf("%s is a symbolic link: Helm warns on every command; make docs writes a copy", path)
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s is stale: run go generate ./internal/config/ (or make docs)", path)
		}
	}
	err = filepath.WalkDir(chartDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSymlink != 0 {
			t.Errorf("%s is a symbolic link: Helm warns on every command", path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Every value of the chart's schema is documented in docs/deployment.md
// (the chart's section), by its path: image.tag, pipelines[].env.
func TestHelmChartValuesDocumented(t *testing.T) {
	raw, err := os.ReadFile(chartDir + "/values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/deployment.md")
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	var walk func(prefix string, s map[string]any)
	walk = func(prefix string, s map[string]any) {
		props, _ := s["properties"].(map[string]any)
		for name, p := range props {
			p, _ := p.(map[string]any)
			if prefix == "" && name == "global" {
				continue // Helm's, for subcharts
			}
			_, nested := p["properties"]
			switch {
			case name == "pipelines":
				paths = append(paths, name)
				walk(name+"[].", p["items"].(map[string]any))
			case nested && name != "prometheus": // a NetworkPolicyPeer, as Kubernetes has it
				walk(prefix+name+".", p)
			default:
				paths = append(paths, prefix+name)
			}
		}
	}
	walk("", schema)
	if len(paths) < 35 {
		t.Fatalf("%d values in the schema: %v", len(paths), paths)
	}
	for _, p := range paths {
		if !strings.Contains(string(doc), "`"+p+"`") {
			t.Errorf("docs/deployment.md does not document the value %s", p)
		}
	}
}
