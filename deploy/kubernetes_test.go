package deploy

import (
	"fmt"
	"slices"
	"testing"
)

// restrictedViolations checks a pod spec against the Kubernetes Pod Security
// Standards "restricted" profile (which includes "baseline"), as of
// Kubernetes 1.30: https://kubernetes.io/docs/concepts/security/pod-security-standards/.
// It returns one line per violation.
func restrictedViolations(spec map[string]any) []string {
	var out []string
	bad := func(f string, a ...any) { out = append(out, fmt.Sprintf(f, a...)) }
	m := func(v any) map[string]any { x, _ := v.(map[string]any); return x }
	list := func(v any) []any { x, _ := v.([]any); return x }
	for _, k := range []string{"hostNetwork", "hostPID", "hostIPC"} {
		if spec[k] == true {
			bad("spec.%s is true", k)
		}
	}
	podSC := m(spec["securityContext"])
	allowedVolumes := []string{"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
	for _, v := range list(spec["volumes"]) {
		for k := range m(v) {
			if k != "name" && !slices.Contains(allowedVolumes, k) {
				bad("volume %v: type %s is not allowed", m(v)["name"], k)
			}
		}
	}
	for _, k := range []string{"sysctls"} {
		for _, s := range list(podSC[k]) {
			safe := []string{"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
				"net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
				"net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
			if !slices.Contains(safe, fmt.Sprint(m(s)["name"])) {
				bad("sysctl %v is not safe", m(s)["name"])
			}
		}
	}
	seccompOK := func(sc map[string]any) (set, ok bool) {
		p := m(sc["seccompProfile"])
		if p == nil {
			return false, true
		}
		t := p["type"]
		return true, t == "RuntimeDefault" || t == "Localhost"
	}
	podSeccomp, ok := seccompOK(podSC)
	if !ok {
		bad("spec.securityContext.seccompProfile.type %v: must be RuntimeDefault or Localhost", m(podSC["seccompProfile"])["type"])
	}
	if u, ok := podSC["runAsUser"]; ok && fmt.Sprint(u) == "0" {
		bad("spec.securityContext.runAsUser is 0")
	}
	checkSELinux := func(where string, sc map[string]any) {
		se := m(sc["seLinuxOptions"])
		if se == nil {
			return
		}
		if t, ok := se["type"]; ok && !slices.Contains([]string{"", "container_t", "container_init_t", "container_kvm_t"}, fmt.Sprint(t)) {
			bad("%s seLinuxOptions.type %v", where, t)
		}
		if se["user"] != nil || se["role"] != nil {
			bad("%s seLinuxOptions sets user or role", where)
		}
	}
	checkSELinux("spec.securityContext", podSC)
	var containers []map[string]any
	for _, k := range []string{"initContainers", "containers", "ephemeralContainers"} {
		for _, c := range list(spec[k]) {
			containers = append(containers, m(c))
		}
	}
	if len(containers) == 0 {
		bad("no containers")
	}
	for _, c := range containers {
		name := fmt.Sprintf("container %v", c["name"])
		sc := m(c["securityContext"])
		if sc["privileged"] == true {
			bad("%s: privileged", name)
		}
		if sc["allowPrivilegeEscalation"] != false {
			bad("%s: allowPrivilegeEscalation must be false", name)
		}
		nonRoot := sc["runAsNonRoot"]
		if nonRoot == nil {
			nonRoot = podSC["runAsNonRoot"]
		}
		if nonRoot != true {
			bad("%s: runAsNonRoot must be true (container or pod)", name)
		}
		if u, ok := sc["runAsUser"]; ok && fmt.Sprint(u) == "0" {
			bad("%s: runAsUser is 0", name)
		}
		set, ok := seccompOK(sc)
		if !ok {
			bad("%s: seccompProfile.type must be RuntimeDefault or Localhost", name)
		}
		if !set && !podSeccomp {
			bad("%s: no seccompProfile (container or pod)", name)
		}
		caps := m(sc["capabilities"])
		drop := list(caps["drop"])
		if !slices.ContainsFunc(drop, func(v any) bool { return v == "ALL" }) {
			bad("%s: capabilities.drop must contain ALL", name)
		}
		for _, a := range list(caps["add"]) {
			if a != "NET_BIND_SERVICE" {
				bad("%s: capabilities.add %v (only NET_BIND_SERVICE)", name, a)
			}
		}
		if pm, ok := sc["procMount"]; ok && pm != "Default" {
			bad("%s: procMount %v", name, pm)
		}
		if p := m(sc["appArmorProfile"]); p != nil && p["type"] == "Unconfined" {
			bad("%s: appArmorProfile Unconfined", name)
		}
		checkSELinux(name, sc)
		for _, p := range list(c["ports"]) {
			if hp, ok := m(p)["hostPort"]; ok && fmt.Sprint(hp) != "0" {
				bad("%s: hostPort %v", name, hp)
			}
		}
	}
	return out
}

// The validator itself: each rule fails a pod that breaks it.
func TestRestrictedValidatorCatches(t *testing.T) {
	good := func() map[string]any {
		return map[string]any{
			"securityContext": map[string]any{"runAsNonRoot": true, "seccompProfile": map[string]any{"type": "RuntimeDefault"}},
			"containers": []any{map[string]any{"name": "c", "securityContext": map[string]any{
				"allowPrivilegeEscalation": false, "capabilities": map[string]any{"drop": []any{"ALL"}}}}},
			"volumes": []any{map[string]any{"name": "v", "configMap": map[string]any{}}},
		}
	}
	if v := restrictedViolations(good()); len(v) != 0 {
		t.Fatalf("a restricted pod fails: %v", v)
	}
	c := func(p map[string]any) map[string]any {
		return p["containers"].([]any)[0].(map[string]any)["securityContext"].(map[string]any)
	}
	for name, breakIt := range map[string]func(map[string]any){
		"no drop ALL":        func(p map[string]any) { c(p)["capabilities"] = map[string]any{"drop": []any{"NET_RAW"}} },
		"added capability":   func(p map[string]any) { c(p)["capabilities"].(map[string]any)["add"] = []any{"SYS_ADMIN"} },
		"no seccomp":         func(p map[string]any) { delete(p["securityContext"].(map[string]any), "seccompProfile") },
		"unconfined seccomp": func(p map[string]any) { c(p)["seccompProfile"] = map[string]any{"type": "Unconfined"} },
		"escalation":         func(p map[string]any) { delete(c(p), "allowPrivilegeEscalation") },
		"root":               func(p map[string]any) { delete(p["securityContext"].(map[string]any), "runAsNonRoot") },
		"uid 0":              func(p map[string]any) { c(p)["runAsUser"] = 0 },
		"privileged":         func(p map[string]any) { c(p)["privileged"] = true },
		"hostPath": func(p map[string]any) {
			p["volumes"] = []any{map[string]any{"name": "h", "hostPath": map[string]any{}}}
		},
		"hostNetwork": func(p map[string]any) { p["hostNetwork"] = true },
		"hostPort": func(p map[string]any) {
			p["containers"].([]any)[0].(map[string]any)["ports"] = []any{map[string]any{"hostPort": 80}}
		},
	} {
		p := good()
		breakIt(p)
		if v := restrictedViolations(p); len(v) == 0 {
			t.Errorf("%s: passed the restricted profile", name)
		}
	}
}

func kubeDocs(t *testing.T) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, doc := range yamlDocs(t, "kubernetes/outbox-relay.yaml") {
		out[fmt.Sprint(doc["kind"])] = doc
	}
	return out
}

func path(v any, keys ...string) any {
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

// The Deployment's pod meets the restricted Pod Security profile.
func TestKubernetesPodIsRestricted(t *testing.T) {
	dep := kubeDocs(t)["Deployment"]
	spec, _ := path(dep, "spec", "template", "spec").(map[string]any)
	if spec == nil {
		t.Fatal("no Deployment pod spec")
	}
	for _, v := range restrictedViolations(spec) {
		t.Error(v)
	}
	c := path(spec, "containers").([]any)[0]
	if path(c, "securityContext", "readOnlyRootFilesystem") != true {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if img := fmt.Sprint(path(c, "image")); img == "" || img == "outbox-relay:latest" {
		t.Errorf("image %q: not the documented `make image` reference", img)
	}
}

// The ServiceMonitor selects the Service, names a port it has, carries the
// label kube-prometheus-stack selects by, and passes the pipeline label on.
func TestServiceMonitorMatches(t *testing.T) {
	docs := kubeDocs(t)
	svc, sm := docs["Service"], docs["ServiceMonitor"]
	if svc == nil || sm == nil {
		t.Fatal("no Service or ServiceMonitor")
	}
	if path(sm, "metadata", "labels", "release") == nil {
		t.Error("ServiceMonitor has no release label: kube-prometheus-stack's serviceMonitorSelector matches release=<helm release>")
	}
	svcLabels, _ := path(svc, "metadata", "labels").(map[string]any)
	for k, v := range path(sm, "spec", "selector", "matchLabels").(map[string]any) {
		if svcLabels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%v, the Service has %v", k, v, svcLabels[k])
		}
	}
	ports := map[string]bool{}
	for _, p := range path(svc, "spec", "ports").([]any) {
		ports[fmt.Sprint(path(p, "name"))] = true
	}
	for _, e := range path(sm, "spec", "endpoints").([]any) {
		if !ports[fmt.Sprint(path(e, "port"))] {
			t.Errorf("ServiceMonitor endpoint port %v: the Service has %v", path(e, "port"), ports)
		}
	}
	if tl, _ := path(sm, "spec", "targetLabels").([]any); !slices.Contains(tl, any("pipeline")) || svcLabels["pipeline"] == nil {
		t.Error("no pipeline target label: alerts and dashboard group by pipeline")
	}
	if svc["metadata"].(map[string]any)["name"] != "outbox-relay" {
		t.Error(`the Service's name is the job label; alerts select job="outbox-relay"`)
	}
}

// The manifest holds no secret value: the pod mounts a Secret created out
// of band, by reference, with mode 0400 (group read added by fsGroup only);
// a NetworkPolicy admits only the metrics port and lets out only DNS,
// MySQL and Kafka.
func TestKubernetesSecretByReferenceAndNetworkPolicy(t *testing.T) {
	docs := kubeDocs(t)
	if s, ok := docs["Secret"]; ok {
		t.Errorf("the manifest carries a Secret with its value inline: %v", s["metadata"])
	}
	spec, _ := path(docs["Deployment"], "spec", "template", "spec").(map[string]any)
	var mode any = "none"
	for _, v := range path(spec, "volumes").([]any) {
		if sec := path(v, "secret"); sec != nil {
			mode = path(sec, "defaultMode")
			if fmt.Sprint(path(sec, "secretName")) == "" {
				t.Error("the secret volume names no Secret")
			}
		}
	}
	if fmt.Sprint(mode) != "256" { // 0400
		t.Errorf("the secret volume's defaultMode is %v, want 0400 (256)", mode)
	}
	if fmt.Sprint(path(spec, "securityContext", "fsGroup")) != fmt.Sprint(path(spec, "securityContext", "runAsGroup")) {
		t.Error("fsGroup is not the relay's group: the 0400 secret files would not be readable by the relay")
	}
	np := docs["NetworkPolicy"]
	if np == nil {
		t.Fatal("no NetworkPolicy")
	}
	if fmt.Sprint(path(np, "spec", "podSelector", "matchLabels")) != fmt.Sprint(path(docs["Deployment"], "spec", "selector", "matchLabels")) {
		t.Error("the NetworkPolicy does not select the Deployment's pods")
	}
	if fmt.Sprint(path(np, "spec", "policyTypes")) != "[Ingress Egress]" {
		t.Errorf("policyTypes %v, want both Ingress and Egress", path(np, "spec", "policyTypes"))
	}
	for _, rule := range path(np, "spec", "ingress").([]any) {
		for _, p := range path(rule, "ports").([]any) {
			if fmt.Sprint(path(p, "port")) != "9464" {
				t.Errorf("ingress admits port %v, only the metrics port 9464 is served", path(p, "port"))
			}
		}
		if path(rule, "from") == nil {
			t.Error("an ingress rule admits every source")
		}
	}
}
