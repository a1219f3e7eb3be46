{{/* The name of a pipeline's resources: <release>-<pipeline>. */}}
{{- define "outbox-relay.fullname" -}}
{{- printf "%s-%s" .root.Release.Name .p.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels that select one pipeline's pods. */}}
{{- define "outbox-relay.selectorLabels" -}}
app.kubernetes.io/name: outbox-relay
app.kubernetes.io/instance: {{ .root.Release.Name }}
pipeline: {{ .p.name }}
{{- end -}}

{{- define "outbox-relay.labels" -}}
{{ include "outbox-relay.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "outbox-relay.image" -}}
{{- $i := .Values.image -}}
{{- if $i.digest -}}
{{ $i.repository }}@{{ $i.digest }}
{{- else -}}
{{ $i.repository }}:{{ $i.tag | default (printf "v%s" .Chart.AppVersion) }}
{{- end -}}
{{- end -}}

{{/*
The checks of the pipelines as a whole, which values.schema.json cannot
express: at least one, names unique (and so the resources' names, which
are cut at 63 characters). Renders nothing.
*/}}
{{- define "outbox-relay.checkPipelines" -}}
{{- if not .Values.pipelines -}}
{{- fail "pipelines: none given: add at least one pipeline ({name, config, secrets}; see the chart's values.yaml and docs/deployment.md)" -}}
{{- end -}}
{{- $names := dict -}}
{{- $fullnames := dict -}}
{{- range $p := .Values.pipelines -}}
{{- $name := toString $p.name -}}
{{- if hasKey $names $name -}}
{{- fail (printf "pipelines: two pipelines named %q: each pipeline needs a name of its own (its checkpoint, its resources)" $name) -}}
{{- end -}}
{{- $_ := set $names $name true -}}
{{- $full := include "outbox-relay.fullname" (dict "root" $ "p" $p) -}}
{{- if hasKey $fullnames $full -}}
{{- fail (printf "pipelines: %q and %q both make the resource name %q (<release>-<name> cut at 63 characters): shorten one" (get $fullnames $full) $name $full) -}}
{{- end -}}
{{- $_ := set $fullnames $full $name -}}
{{- end -}}
{{- end -}}

{{/*
A pipeline's value of .key: its own when it sets the key (even empty),
else the chart's. Returned as YAML.
*/}}
{{- define "outbox-relay.value" -}}
{{- hasKey .p .key | ternary (get .p .key) (get .root.Values .key) | toYaml -}}
{{- end -}}

{{/*
A pipeline's environment: the chart's env without the names the
pipeline sets, then the pipeline's. Returned as YAML (a list).
*/}}
{{- define "outbox-relay.env" -}}
{{- $own := .p.env | default list -}}
{{- $names := dict -}}
{{- range $own -}}{{- $_ := set $names (toString .name) true -}}{{- end -}}
{{- $env := list -}}
{{- range (.root.Values.env | default list) -}}
{{- if not (hasKey $names (toString .name)) -}}{{- $env = append $env . -}}{{- end -}}
{{- end -}}
{{- concat $env $own | toYaml -}}
{{- end -}}

{{/*
A pipeline's pod labels: the chart's podLabels with the pipeline's over
them; the selector's labels cannot be set.
*/}}
{{- define "outbox-relay.podLabels" -}}
{{- $labels := merge (dict) (.p.podLabels | default dict) (.root.Values.podLabels | default dict) -}}
{{- range $k := list "app.kubernetes.io/name" "app.kubernetes.io/instance" "pipeline" -}}
{{- if hasKey $labels $k -}}
{{- fail (printf "podLabels: %s is the chart's own label (it selects the pipeline's pods); choose another key" $k) -}}
{{- end -}}
{{- end -}}
{{- if $labels -}}{{- toYaml $labels -}}{{- end -}}
{{- end -}}

{{/*
A pipeline's affinity: its affinity value (or the chart's) with the
anti-affinity of podAntiAffinity added unless it sets podAntiAffinity: the
pipeline's two pods on different nodes (soft: preferred; hard: required)
and preferably in different zones.
*/}}
{{- define "outbox-relay.affinity" -}}
{{- $affinity := deepCopy (hasKey .p "affinity" | ternary .p.affinity .root.Values.affinity | default dict) -}}
{{- if not (hasKey $affinity "podAntiAffinity") -}}
{{- $mode := hasKey .p "podAntiAffinity" | ternary .p.podAntiAffinity .root.Values.podAntiAffinity -}}
{{- $selector := dict "labelSelector" (dict "matchLabels" (include "outbox-relay.selectorLabels" . | fromYaml)) -}}
{{- $node := merge (dict "topologyKey" "kubernetes.io/hostname") $selector -}}
{{- $zone := merge (dict "topologyKey" "topology.kubernetes.io/zone") $selector -}}
{{- if eq (toString $mode) "hard" -}}
{{- $_ := set $affinity "podAntiAffinity" (dict
      "requiredDuringSchedulingIgnoredDuringExecution" (list $node)
      "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $zone))) -}}
{{- else -}}
{{- $_ := set $affinity "podAntiAffinity" (dict
      "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $node) (dict "weight" 50 "podAffinityTerm" $zone))) -}}
{{- end -}}
{{- end -}}
{{- toYaml $affinity -}}
{{- end -}}

{{/*
The relay's configuration of a pipeline: its config with name and
http.listen set by the chart. Stops on a secret given inline (any key of
outbox-relay.secretKeys that is not a whole ${VAR}), and on a ${VAR} of a
secret key whose variable env gives as a plain value.
*/}}
{{- define "outbox-relay.config" -}}
{{- $p := .p -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" (toString $p.name)) -}}
{{- fail (printf "pipelines: name %q: want a DNS label (lowercase letters, digits, '-')" (toString $p.name)) -}}
{{- end -}}
{{- $cfg := deepCopy (required (printf "pipelines[%s].config: the relay's configuration is required" $p.name) $p.config) -}}
{{- $env := include "outbox-relay.env" . | fromYamlArray -}}
{{- range $key := include "outbox-relay.secretKeys" . | fromJsonArray -}}
{{- $v := $cfg -}}
{{- range $k := splitList "." $key -}}
{{- if kindIs "map" $v -}}{{- $v = get $v $k -}}{{- else -}}{{- $v = "" -}}{{- end -}}
{{- end -}}
{{- if and (not (kindIs "invalid" $v)) (ne (toString $v) "") -}}
{{- if not (regexMatch (include "outbox-relay.varOnly" .) (toString $v)) -}}
{{- fail (printf "pipelines[%s].config.%s: a secret in values; put it in a Secret, mount it with pipelines[].secrets and set %s_file, or take ${VAR} from a Secret in env (valueFrom.secretKeyRef)" $p.name $key $key) -}}
{{- end -}}
{{- $var := trimSuffix "}" (trimPrefix "${" (toString $v)) -}}
{{- range $e := $env -}}
{{- if and (eq (toString $e.name) $var) (hasKey $e "value") -}}
{{- fail (printf "pipelines[%s]: env %s holds config.%s, a secret, as a plain value; take it from a Secret (valueFrom.secretKeyRef)" $p.name $var $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $cfg = mergeOverwrite $cfg (dict "name" $p.name "http" (dict "listen" "0.0.0.0:9464")) -}}
{{- toYaml $cfg -}}
{{- end -}}
