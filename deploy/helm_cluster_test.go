//go:build !integration

package deploy

import (
	"maps"
	"reflect"
	"slices"
	"testing"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// renderDeployments renders a values file and returns its Deployments and
// ConfigMaps by name, each decoded strictly, each pod checked against the
// restricted profile.
func renderDeployments(t *testing.T, valuesFile string) (map[string]appsv1.Deployment, map[string]corev1.ConfigMap) {
	t.Helper()
	out, err := helmTemplate(t, "shop", valuesFile)
	if err != nil {
		t.Fatalf("helm template -f %s: %v", valuesFile, err)
	}
	deps := map[string]appsv1.Deployment{}
	cms := map[string]corev1.ConfigMap{}
	for _, m := range splitManifests(t, out) {
		obj, err := decodeStrict(m)
		if err != nil {
			t.Error(err)
			continue
		}
		switch o := obj.(type) {
		case *appsv1.Deployment:
			spec, _ := path(m.doc, "spec", "template", "spec").(map[string]any)
			for _, v := range restrictedViolations(spec) {
				t.Errorf("%s: %s", m.name, v)
			}
			deps[m.name] = *o
		case *corev1.ConfigMap:
			cms[m.name] = *o
		}
	}
	return deps, cms
}

// Every value a cluster asks for renders where Kubernetes reads it, for
// every pipeline, and a pipeline's own value replaces the chart's (env,
// envFrom, podAnnotations and podLabels add to it); the pods stay
// "restricted". The failure guarded against: the chart had no
// imagePullSecrets, env/envFrom (the tracing docs need
// OTEL_EXPORTER_OTLP_HEADERS, ${VAR} in the config needs env),
// nodeSelector, tolerations, affinity, serviceAccountName, pod annotations
// and labels or priorityClassName.
func TestHelmChartRendersClusterValues(t *testing.T) {
	deps, cms := renderDeployments(t, chartDir+"/ci/cluster-values.yaml")
	orders, ok := deps["shop-orders"]
	if !ok {
		t.Fatalf("no Deployment shop-orders: %v", slices.Collect(maps.Keys(deps)))
	}
	events := deps["shop-events"]
	o, e := orders.Spec.Template, events.Spec.Template

	check := func(what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}
	for _, pod := range []corev1.PodTemplateSpec{o, e} {
		check("imagePullSecrets", pod.Spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "registry-internal"}})
		c := pod.Spec.Containers[0]
		check("image", c.Image, "registry.internal.example.com/outbox-relay:v0.1.0")
		check("pullPolicy", c.ImagePullPolicy, corev1.PullAlways)
		if a := pod.Spec.AutomountServiceAccountToken; a == nil || *a {
			t.Error("the ServiceAccount token is mounted: the relay never calls the API")
		}
		if a := pod.Spec.Affinity; a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
			a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key != "node.example.com/pool" {
			t.Errorf("%s: affinity %+v: no nodeAffinity of the values", pod.Labels["pipeline"], a)
		}
		if pod.Annotations["checksum/config"] == "" {
			t.Error("no checksum/config annotation: a config change would not roll the pods")
		}
	}
	// orders: the chart's values, env merged by name (the pipeline's TZ)
	check("orders serviceAccountName", o.Spec.ServiceAccountName, "outbox-relay")
	check("orders priorityClassName", o.Spec.PriorityClassName, "relay-critical")
	check("orders nodeSelector", o.Spec.NodeSelector, map[string]string{"kubernetes.io/os": "linux"})
	check("orders tolerations", o.Spec.Tolerations, []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "relay", Effect: corev1.TaintEffectNoSchedule}})
	check("orders env", envNames(o.Spec.Containers[0].Env), []string{"OTEL_EXPORTER_OTLP_HEADERS", "KAFKA_TOKEN", "TZ=Europe/Paris"})
	if env := o.Spec.Containers[0].Env; len(env) == 0 || env[0].ValueFrom == nil || env[0].ValueFrom.SecretKeyRef == nil || env[0].ValueFrom.SecretKeyRef.Name != "otlp" {
		t.Errorf("orders env %v: OTEL_EXPORTER_OTLP_HEADERS is not from the Secret otlp", env)
	}
	check("orders envFrom", len(o.Spec.Containers[0].EnvFrom), 1)
	check("orders owner annotation", o.Annotations["example.com/owner"], "platform")
	check("orders labels", [2]string{o.Labels["team"], o.Labels["pipeline"]}, [2]string{"platform", "orders"})
	if o.Spec.Affinity == nil || o.Spec.Affinity.PodAntiAffinity == nil || e.Spec.Affinity == nil || e.Spec.Affinity.PodAntiAffinity == nil {
		t.Fatalf("no pod anti-affinity: %+v %+v", o.Spec.Affinity, e.Spec.Affinity)
	}
	anti := o.Spec.Affinity.PodAntiAffinity
	if len(anti.RequiredDuringSchedulingIgnoredDuringExecution) != 0 || len(anti.PreferredDuringSchedulingIgnoredDuringExecution) != 2 ||
		anti.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("orders anti-affinity %+v: want soft (preferred per node, then per zone)", anti)
	}
	// events: its own values replace the chart's, or add to them
	check("events serviceAccountName", e.Spec.ServiceAccountName, "events-relay")
	check("events priorityClassName", e.Spec.PriorityClassName, "")
	check("events nodeSelector", len(e.Spec.NodeSelector), 0)
	check("events tolerations", len(e.Spec.Tolerations), 0)
	check("events env", envNames(e.Spec.Containers[0].Env), []string{"OTEL_EXPORTER_OTLP_HEADERS", "TZ=UTC"})
	if ef := e.Spec.Containers[0].EnvFrom; len(ef) != 2 || ef[1].SecretRef == nil || ef[1].SecretRef.Name != "events-aws" {
		t.Errorf("events envFrom %+v: want the chart's, then the Secret events-aws", ef)
	}
	check("events owner annotation", e.Annotations["example.com/owner"], "events")
	check("events labels", [2]string{e.Labels["team"], e.Labels["tier"]}, [2]string{"platform", "cdc"})
	check("events memory limit", e.Spec.Containers[0].Resources.Limits.Memory().String(), "512Mi")
	req := e.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if len(req) != 1 || req[0].TopologyKey != "kubernetes.io/hostname" || req[0].LabelSelector.MatchLabels["pipeline"] != "events" {
		t.Errorf("events anti-affinity %+v: want hard (required per node, its own pods)", e.Spec.Affinity.PodAntiAffinity)
	}
	// the token stays a reference in the ConfigMap; the relay expands it
	cfg := cms["shop-orders"].Data["relay.yaml"]
	parseRelayConfig(t, "ConfigMap shop-orders", cfg)
	var relay struct {
		Kafka struct{ SASL struct{ Token string } }
	}
	if err := yaml.Unmarshal([]byte(cfg), &relay); err != nil || relay.Kafka.SASL.Token != "${KAFKA_TOKEN}" {
		t.Errorf("ConfigMap shop-orders: token %q (%v), want ${KAFKA_TOKEN}", relay.Kafka.SASL.Token, err)
	}
	parseRelayConfig(t, "ConfigMap shop-events", cms["shop-events"].Data["relay.yaml"])
}

// By default the standby can share the active pod's node: the
// anti-affinity is preferred, so a one-node cluster runs both. The failure
// guarded against: the required per-node anti-affinity left the standby
// Pending on a one-node cluster.
func TestHelmChartStandbySchedulesOnOneNode(t *testing.T) {
	deps, _ := renderDeployments(t, chartDir+"/ci/three-pipelines-values.yaml")
	if len(deps) != 3 {
		t.Fatalf("%d Deployments, want 3", len(deps))
	}
	for name, d := range deps {
		anti := d.Spec.Template.Spec.Affinity.PodAntiAffinity
		if anti == nil || len(anti.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
			t.Errorf("%s: anti-affinity %+v: a required term leaves the standby Pending on one node", name, anti)
			continue
		}
		var keys []string
		for _, p := range anti.PreferredDuringSchedulingIgnoredDuringExecution {
			keys = append(keys, p.PodAffinityTerm.TopologyKey)
			if p.PodAffinityTerm.LabelSelector.MatchLabels["pipeline"] != d.Spec.Selector.MatchLabels["pipeline"] {
				t.Errorf("%s: anti-affinity selects %v, not its own pods", name, p.PodAffinityTerm.LabelSelector.MatchLabels)
			}
		}
		if !reflect.DeepEqual(keys, []string{"kubernetes.io/hostname", "topology.kubernetes.io/zone"}) {
			t.Errorf("%s: preferred anti-affinity by %v, want per node, then per zone", name, keys)
		}
	}
}

// envNames lists env as NAME (from a source) or NAME=value.
func envNames(env []corev1.EnvVar) []string {
	var out []string
	for _, e := range env {
		if e.ValueFrom != nil {
			out = append(out, e.Name)
		} else {
			out = append(out, e.Name+"="+e.Value)
		}
	}
	return out
}
