{{/*
Names, labels, image references and the rendered sidecar config file.

Every helper takes this chart's context. From a parent chart that lists agent-sidecar as a
dependency, pass the subchart's context: `(index .Subcharts "agent-sidecar")` (or the
dependency's alias), so the helpers see this chart's values, name and files.
*/}}

{{- define "agent-sidecar.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "agent-sidecar.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Service names are DNS labels (63 characters): room for the suffix. */}}
{{- define "agent-sidecar.adminServiceName" -}}
{{- printf "%s-admin" (include "agent-sidecar.fullname" . | trunc 57 | trimSuffix "-") -}}
{{- end -}}

{{- define "agent-sidecar.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agent-sidecar.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "agent-sidecar.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "agent-sidecar.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/*
The label every pod running this release's sidecar carries: agent pods in sidecar mode (the
agent's chart adds it with agent-sidecar.podLabels, the printed patch adds it too) and the
gateway pods. The PodMonitor and the NetworkPolicy select pods by it.
*/}}
{{- define "agent-sidecar.podLabels" -}}
agent-sidecar/instance: {{ include "agent-sidecar.fullname" . }}
{{- end -}}

{{- define "agent-sidecar.imageRef" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (toString (default .defaultTag .image.tag)) -}}
{{- end -}}
{{- end -}}

{{- define "agent-sidecar.image" -}}
{{- include "agent-sidecar.imageRef" (dict "image" .Values.image "defaultTag" .Chart.AppVersion) -}}
{{- end -}}

{{/* "true" when containers go into initContainers with restartPolicy: Always, else "". */}}
{{- define "agent-sidecar.native" -}}
{{- $setting := toString .Values.sidecar.nativeSidecar -}}
{{- if eq $setting "true" -}}
true
{{- else if eq $setting "auto" -}}
{{- if semverCompare ">=1.29.0-0" (default .Capabilities.KubeVersion.Version .Values.kubeVersion) -}}
true
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "agent-sidecar.proxyBind" -}}
{{- if .Values.proxy.bindAddress -}}
{{- .Values.proxy.bindAddress -}}
{{- else if eq .Values.mode "gateway" -}}
0.0.0.0
{{- else -}}
127.0.0.1
{{- end -}}
{{- end -}}

{{- define "agent-sidecar.configMapName" -}}
{{- printf "%s-config" (include "agent-sidecar.fullname" .) -}}
{{- end -}}

{{- define "agent-sidecar.policiesConfigMapName" -}}
{{- default (printf "%s-policies" (include "agent-sidecar.fullname" .)) .Values.policy.existingConfigMap -}}
{{- end -}}

{{/* Name of the admin tokens Secret, or "" when no token is configured. */}}
{{- define "agent-sidecar.tokensSecretName" -}}
{{- if .Values.adminTokens.existingSecret -}}
{{- .Values.adminTokens.existingSecret -}}
{{- else if .Values.adminTokens.tokens -}}
{{- printf "%s-admin-tokens" (include "agent-sidecar.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The admin tokens file, one line per token: `TOKEN NAME GROUP,GROUP`. */}}
{{- define "agent-sidecar.tokensFile" -}}
{{- range .Values.adminTokens.tokens }}
{{ .token }} {{ .name }} {{ join "," .groups }}
{{- end }}
{{- end -}}

{{/* The sidecar's drain grace: its shutdown_grace_s setting, 25 s by default. */}}
{{- define "agent-sidecar.shutdownGrace" -}}
{{- dig "shutdown_grace_s" 25 .Values.config -}}
{{- end -}}

{{- define "agent-sidecar.terminationGracePeriodSeconds" -}}
{{- $grace := include "agent-sidecar.shutdownGrace" . | float64 -}}
{{- if le (float64 .Values.terminationGracePeriodSeconds) $grace -}}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed the sidecar's drain grace shutdown_grace_s (%v), or Kubernetes kills it mid-drain" .Values.terminationGracePeriodSeconds $grace) -}}
{{- end -}}
{{- .Values.terminationGracePeriodSeconds | int -}}
{{- end -}}

{{/*
The sidecar's config file: the settings the chart owns (listen addresses, upstreams, policy
engine, state backend) merged over `config`. The schema refuses those keys in `config`, so
nothing here is silently overridden. The Redis URL is not here: it comes from its Secret
through SIDECAR_STATE__REDIS_URL.
*/}}
{{- define "agent-sidecar.configYaml" -}}
{{- $policy := dict "engine" .Values.policy.engine -}}
{{- if eq .Values.policy.engine "opa" -}}
{{- $_ := set $policy "opa_url" (printf "http://127.0.0.1:%d" (int .Values.opa.port)) -}}
{{- end -}}
{{- $state := dict "backend" .Values.state.backend -}}
{{- if eq .Values.state.backend "sqlite" -}}
{{- $_ := set $state "sqlite_path" "/var/lib/agent-sidecar/state.db" -}}
{{- end -}}
{{- $owned := dict
  "listen" (printf "%s:%d" (include "agent-sidecar.proxyBind" .) (int .Values.proxy.port))
  "admin_listen" (printf "%s:%d" .Values.admin.bindAddress (int .Values.admin.port))
  "anthropic_upstream" .Values.upstreams.anthropic
  "openai_upstream" .Values.upstreams.openai
  "policy" $policy
  "state" $state -}}
{{- toYaml (mustMergeOverwrite (deepCopy .Values.config) $owned) -}}
{{- end -}}

{{/*
Pod annotations for pods running the sidecar: a checksum of the config file, so that a
config change rolls the pods (policies and admin tokens are reloaded live and need none).
*/}}
{{- define "agent-sidecar.podAnnotations" -}}
checksum/agent-sidecar-config: {{ include "agent-sidecar.configYaml" . | sha256sum }}
{{- end -}}

{{/* Cross-field checks the schema cannot word clearly. */}}
{{- define "agent-sidecar.validate" -}}
{{- if and (eq .Values.mode "gateway") (eq .Values.state.backend "memory" "sqlite") (or .Values.gateway.autoscaling.enabled (gt (int .Values.gateway.replicas) 1)) -}}
{{- fail (printf "gateway mode with more than one replica needs state.backend=redis (with state.redis.existingSecret): with %s state, each replica keeps its own replay ledger and approvals" .Values.state.backend) -}}
{{- end -}}
{{- if and (eq .Values.mode "gateway") (eq .Values.state.backend "memory") (gt (int .Values.gateway.workers) 1) -}}
{{- fail "gateway.workers above 1 needs state.backend=sqlite or redis: with memory state, each worker process keeps its own replay ledger and approvals" -}}
{{- end -}}
{{- if and (eq .Values.mode "sidecar") (gt (int .Values.gateway.workers) 1) -}}
{{- fail "gateway.workers applies to gateway mode only: a sidecar serves one agent" -}}
{{- end -}}
{{- end -}}

{{- define "agent-sidecar.serviceAccountName" -}}
{{- if .Values.gateway.serviceAccount.create -}}
{{- default (include "agent-sidecar.fullname" .) .Values.gateway.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.gateway.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* TCP ports of the upstream URLs (explicit, else 443 for https and 80 for http), as a list. */}}
{{- define "agent-sidecar.upstreamPorts" -}}
{{- $ports := dict -}}
{{- range $url := list .Values.upstreams.anthropic .Values.upstreams.openai -}}
{{- $parsed := urlParse $url -}}
{{- $explicit := regexFind ":[0-9]+$" $parsed.host -}}
{{- if $explicit -}}
{{- $_ := set $ports (trimPrefix ":" $explicit) true -}}
{{- else -}}
{{- $_ := set $ports (ternary "443" "80" (eq $parsed.scheme "https")) true -}}
{{- end -}}
{{- end -}}
{{- toJson (keys $ports | sortAlpha) -}}
{{- end -}}

{{/* "true" when the Prometheus Operator objects (monitoring.coreos.com/v1) are rendered. */}}
{{- define "agent-sidecar.operator" -}}
{{- $setting := toString .Values.monitoring.prometheusOperator -}}
{{- if .Values.monitoring.enabled -}}
{{- if or (eq $setting "true") (and (eq $setting "auto") (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1")) -}}
true
{{- end -}}
{{- end -}}
{{- end -}}
