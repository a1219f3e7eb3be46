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
The relay's configuration of a pipeline: its config with name and
http.listen set by the chart. Stops on a password given inline.
*/}}
{{- define "outbox-relay.config" -}}
{{- $p := .p -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" (toString $p.name)) -}}
{{- fail (printf "pipelines: name %q: want a DNS label (lowercase letters, digits, '-')" (toString $p.name)) -}}
{{- end -}}
{{- $cfg := deepCopy (required (printf "pipelines[%s].config: the relay's configuration is required" $p.name) $p.config) -}}
{{- if (($cfg.source).password) -}}
{{- fail (printf "pipelines[%s].config.source.password: a secret in values; put it in a Secret, mount it with pipelines[].secrets and set source.password_file" $p.name) -}}
{{- end -}}
{{- if ((($cfg.kafka).sasl).password) -}}
{{- fail (printf "pipelines[%s].config.kafka.sasl.password: a secret in values; put it in a Secret, mount it with pipelines[].secrets and set kafka.sasl.password_file" $p.name) -}}
{{- end -}}
{{- $cfg = mergeOverwrite $cfg (dict "name" $p.name "http" (dict "listen" "0.0.0.0:9464")) -}}
{{- toYaml $cfg -}}
{{- end -}}
