//go:build !integration

package deploy

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// The chart is linted and rendered through Helm's Go packages (the ones
// `helm lint` and `helm template` run), which share the test's build cache:
// a helm binary built from the module proxy costs minutes of CPU on a
// 2-core machine.
const chartDir = "helm/outbox-relay"

// helmTemplate renders the chart with a values file as `helm template
// RELEASE CHART -f VALUES` does, and returns the manifests in order.
func helmTemplate(t *testing.T, release, valuesFile string) (string, error) {
	t.Helper()
	vals, err := common.ReadValuesFile(valuesFile)
	if err != nil {
		t.Fatalf("read %s: %v", valuesFile, err)
	}
	return helmRender(t, release, vals, false)
}

// helmRender renders the chart with values as `helm template RELEASE
// CHART` does: values.schema.json checked first (unless skipSchema, as
// --skip-schema-validation), then the templates.
func helmRender(t *testing.T, release string, vals map[string]any, skipSchema bool) (string, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	rv, err := util.ToRenderValuesWithSchemaValidation(chrt, vals, common.ReleaseOptions{Name: release, Namespace: "relay", IsInstall: true}, nil, skipSchema)
	if err != nil {
		return "", err
	}
	out, err := engine.Render(chrt, rv)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(out)) {
		if strings.HasSuffix(name, ".yaml") && strings.TrimSpace(out[name]) != "" {
			fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", name, out[name])
		}
	}
	return b.String(), nil
}

// manifest is one rendered document: its kind, name, the raw YAML and the
// generic form the restricted-profile check reads.
type manifest struct {
	kind, name string
	raw        []byte
	doc        map[string]any
}

func splitManifests(t *testing.T, out string) []manifest {
	t.Helper()
	var ms []manifest
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var node yaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			return ms
		}
		if err != nil {
			t.Fatalf("rendered YAML: %v\n%s", err, out)
		}
		var doc map[string]any
		if err := node.Decode(&doc); err != nil || doc == nil {
			continue
		}
		raw, err := yaml.Marshal(&node)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, manifest{kind: fmt.Sprint(doc["kind"]), name: fmt.Sprint(path(doc, "metadata", "name")), raw: raw, doc: doc})
	}
}

// decodeStrict decodes a manifest into its Kubernetes API type: a field the
// type does not have, or a duplicate key, is an error (kubectl's
// server-side field validation "Strict").
func decodeStrict(m manifest) (any, error) {
	var obj any
	switch m.kind {
	case "Deployment":
		obj = &appsv1.Deployment{}
	case "Service":
		obj = &corev1.Service{}
	case "ConfigMap":
		obj = &corev1.ConfigMap{}
	case "Secret":
		obj = &corev1.Secret{}
	case "PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case "NetworkPolicy":
		obj = &networkingv1.NetworkPolicy{}
	case "ServiceMonitor", "PrometheusRule":
		return nil, nil // CRDs: no type in k8s.io/api; checked by field below
	default:
		return nil, fmt.Errorf("%s %s: a kind this check does not know", m.kind, m.name)
	}
	if err := sigsyaml.UnmarshalStrict(m.raw, obj); err != nil {
		return nil, fmt.Errorf("%s %s: %w", m.kind, m.name, err)
	}
	return obj, nil
}

// helm lint passes with each values file of ci/ (as chart-testing lints):
// no error or warning. The chart's own values.yaml has no pipeline, which
// the chart refuses (TestHelmChartRefusesWrongValues).
func TestHelmChartLints(t *testing.T) {
	ci, err := filepath.Glob(chartDir + "/ci/*-values.yaml")
	if err != nil || len(ci) < 2 {
		t.Fatalf("ci values files: %v %v", ci, err)
	}
	for _, values := range ci {
		vals, err := common.ReadValuesFile(values)
		if err != nil {
			t.Fatal(err)
		}
		res := lint.RunAll(chartDir, vals, "relay")
		for _, m := range res.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("helm lint -f %s: %s", values, m)
			} else {
				t.Logf("helm lint -f %s: %s", values, m)
			}
		}
	}
}

// Three pipelines in one values file render three Deployments of two pods
// each, every one restricted, decoded strictly, with its own ConfigMap
// (a valid relay configuration named after the pipeline), Service,
// PodDisruptionBudget, NetworkPolicy and ServiceMonitor, secrets mounted by
// reference with mode 0400, and one PrometheusRule holding the rules of
// deploy/prometheus/alerts.yml.
func TestHelmChartRendersThreePipelines(t *testing.T) {
	out, err := helmTemplate(t, "shop", chartDir+"/ci/three-pipelines-values.yaml")
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	pipelines := []string{"orders-shard-0", "orders-shard-1", "billing"}
	byKind := map[string]map[string]manifest{}
	for _, m := range splitManifests(t, out) {
		if _, err := decodeStrict(m); err != nil {
			t.Error(err)
		}
		if byKind[m.kind] == nil {
			byKind[m.kind] = map[string]manifest{}
		}
		if _, dup := byKind[m.kind][m.name]; dup {
			t.Errorf("two %s named %s", m.kind, m.name)
		}
		byKind[m.kind][m.name] = m
	}
	for _, kind := range []string{"Deployment", "ConfigMap", "Service", "PodDisruptionBudget", "NetworkPolicy", "ServiceMonitor"} {
		if len(byKind[kind]) != len(pipelines) {
			t.Errorf("%d %ss, want one per pipeline (%d)", len(byKind[kind]), kind, len(pipelines))
		}
	}
	if len(byKind["Secret"]) != 0 {
		t.Error("the chart renders a Secret: secrets are referenced, never values")
	}
	for _, p := range pipelines {
		name := "shop-" + p
		dep, ok := byKind["Deployment"][name]
		if !ok {
			t.Errorf("no Deployment %s", name)
			continue
		}
		var d appsv1.Deployment
		if err := sigsyaml.UnmarshalStrict(dep.raw, &d); err != nil {
			t.Fatal(err)
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
			t.Errorf("%s: replicas %s, want 2 (active + standby)", name, ptrString(d.Spec.Replicas))
		}
		spec, _ := path(dep.doc, "spec", "template", "spec").(map[string]any)
		for _, v := range restrictedViolations(spec) {
			t.Errorf("%s: %s", name, v)
		}
		pod := d.Spec.Template.Spec
		c := pod.Containers[0]
		if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
			t.Errorf("%s: readOnlyRootFilesystem is not true", name)
		}
		if !strings.Contains(c.Image, "@sha256:") {
			t.Errorf("%s: image %q: the values pin a digest", name, c.Image)
		}
		secrets := 0
		for _, v := range pod.Volumes {
			if v.Secret != nil {
				secrets++
				if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o400 {
					t.Errorf("%s: secret volume %s defaultMode %s, want 0400 (256)", name, v.Name, ptrString(v.Secret.DefaultMode))
				}
				if v.Secret.SecretName != p+"-mysql" {
					t.Errorf("%s: secret volume names %q, want the existing Secret %s-mysql", name, v.Secret.SecretName, p)
				}
			}
		}
		if secrets != 1 {
			t.Errorf("%s: %d secret volumes, want the one of its values", name, secrets)
		}
		if pod.SecurityContext.FSGroup == nil || pod.SecurityContext.RunAsGroup == nil || *pod.SecurityContext.FSGroup != *pod.SecurityContext.RunAsGroup {
			t.Errorf("%s: fsGroup is not the relay's group: the 0400 secret files would not be readable", name)
		}
		sel := d.Spec.Selector.MatchLabels
		if sel["pipeline"] != p {
			t.Errorf("%s: selector %v has no pipeline=%s", name, sel, p)
		}
		// One pipeline's selector must not select another's pods.
		for _, other := range byKind["Deployment"] {
			if other.name != name && reflect.DeepEqual(path(other.doc, "spec", "selector"), path(dep.doc, "spec", "selector")) {
				t.Errorf("%s and %s select the same pods", name, other.name)
			}
		}
		var cm corev1.ConfigMap
		if err := sigsyaml.UnmarshalStrict(byKind["ConfigMap"][name].raw, &cm); err != nil {
			t.Fatalf("ConfigMap %s: %v", name, err)
		}
		cfg := cm.Data["relay.yaml"]
		parseRelayConfig(t, "ConfigMap "+name, cfg)
		var relay struct {
			Name string
			HTTP struct{ Listen string }
		}
		if err := yaml.Unmarshal([]byte(cfg), &relay); err != nil || relay.Name != p || relay.HTTP.Listen != "0.0.0.0:9464" {
			t.Errorf("ConfigMap %s: name %q listen %q (%v), want %q on 0.0.0.0:9464", name, relay.Name, relay.HTTP.Listen, err, p)
		}
		for _, kind := range []string{"Service", "PodDisruptionBudget", "NetworkPolicy", "ServiceMonitor"} {
			m, ok := byKind[kind][name]
			if !ok {
				t.Errorf("no %s %s", kind, name)
				continue
			}
			var got any
			switch kind {
			case "Service":
				got = path(m.doc, "spec", "selector")
			case "ServiceMonitor":
				got = path(m.doc, "spec", "selector", "matchLabels")
			default:
				got = path(m.doc, "spec", "selector", "matchLabels")
				if kind == "NetworkPolicy" {
					got = path(m.doc, "spec", "podSelector", "matchLabels")
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(path(dep.doc, "spec", "selector", "matchLabels")) {
				t.Errorf("%s %s selects %v, the Deployment's pods are %v", kind, name, got, sel)
			}
		}
		sm := byKind["ServiceMonitor"][name].doc
		if path(sm, "spec", "jobLabel") != "app.kubernetes.io/name" || path(byKind["Service"][name].doc, "metadata", "labels", "app.kubernetes.io/name") != "outbox-relay" {
			t.Errorf(`ServiceMonitor %s: the job label is not "outbox-relay", which the alerts select`, name)
		}
		if tl, _ := path(sm, "spec", "targetLabels").([]any); !slices.Contains(tl, any("pipeline")) {
			t.Errorf("ServiceMonitor %s: no pipeline target label", name)
		}
	}
	if len(byKind["PrometheusRule"]) != 1 {
		t.Fatalf("%d PrometheusRules, want one for the release", len(byKind["PrometheusRule"]))
	}
	for _, rule := range byKind["PrometheusRule"] {
		var alerts map[string]any
		raw, err := os.ReadFile("prometheus/alerts.yml")
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, &alerts); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(path(rule.doc, "spec", "groups"), alerts["groups"]) {
			t.Error("the PrometheusRule's groups are not those of deploy/prometheus/alerts.yml")
		}
	}
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

// The plain manifest decodes strictly with the Kubernetes API types too.
func TestKubernetesManifestDecodesStrictly(t *testing.T) {
	raw, err := os.ReadFile("kubernetes/outbox-relay.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ms := splitManifests(t, string(raw))
	if len(ms) == 0 {
		t.Fatal("no manifests")
	}
	for _, m := range ms {
		if _, err := decodeStrict(m); err != nil {
			t.Error(err)
		}
	}
}
