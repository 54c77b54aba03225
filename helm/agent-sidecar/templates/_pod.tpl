{{/*
The pod parts: what an agent's chart includes in sidecar mode, and what the gateway
Deployment is made of. Each renders list items (or nothing), to be placed with nindent:

  {{- $sidecar := index .Subcharts "agent-sidecar" }}
  metadata:
    labels:      {{- include "agent-sidecar.podLabels" $sidecar | nindent 8 }}
    annotations: {{- include "agent-sidecar.podAnnotations" $sidecar | nindent 8 }}
  spec:
    terminationGracePeriodSeconds: {{ include "agent-sidecar.terminationGracePeriodSeconds" $sidecar }}
    initContainers: {{- include "agent-sidecar.initContainers" $sidecar | nindent 6 }}
    containers:
      - name: agent
        env: {{- include "agent-sidecar.env" $sidecar | nindent 10 }}
      {{- include "agent-sidecar.containers" $sidecar | nindent 6 }}
    volumes: {{- include "agent-sidecar.volumes" $sidecar | nindent 6 }}

initContainers holds the sidecar (and OPA) as native sidecars on Kubernetes 1.29+ (see
sidecar.nativeSidecar) and is empty otherwise; containers holds them otherwise.
*/}}

{{- define "agent-sidecar.mountPath" -}}/etc/agent-sidecar{{- end -}}

{{/* The agent's environment: its SDKs' base URLs pointed at the sidecar. */}}
{{- define "agent-sidecar.env" -}}
{{- $base := "" -}}
{{- if eq .Values.mode "gateway" -}}
{{- $base = printf "http://%s.%s.svc:%d" (include "agent-sidecar.fullname" .) .Release.Namespace (int .Values.proxy.port) -}}
{{- else -}}
{{- $base = printf "http://127.0.0.1:%d" (int .Values.proxy.port) -}}
{{- end -}}
- name: ANTHROPIC_BASE_URL
  value: {{ $base | quote }}
- name: OPENAI_BASE_URL
  value: {{ printf "%s/v1" $base | quote }}
{{- end -}}

{{/* "true" when the sidecar container itself is a native sidecar (sidecar mode only). */}}
{{- define "agent-sidecar.sidecarNative" -}}
{{- if and (eq .Values.mode "sidecar") (include "agent-sidecar.native" .) -}}true{{- end -}}
{{- end -}}

{{- define "agent-sidecar.container" -}}
{{- include "agent-sidecar.validate" . -}}
{{- $tokens := include "agent-sidecar.tokensSecretName" . -}}
- name: agent-sidecar
  image: {{ include "agent-sidecar.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if include "agent-sidecar.sidecarNative" . }}
  restartPolicy: Always
  {{- end }}
  args:
    - --config
    - {{ include "agent-sidecar.mountPath" . }}/config/config.yaml
    - --policies
    - {{ include "agent-sidecar.mountPath" . }}/policies
    {{- if $tokens }}
    - --admin-token-file
    - {{ include "agent-sidecar.mountPath" . }}/admin/{{ .Values.adminTokens.key }}
    {{- end }}
    {{- if and (eq .Values.mode "gateway") (gt (int .Values.gateway.workers) 1) }}
    - --workers
    - {{ int .Values.gateway.workers | quote }}
    {{- end }}
  ports:
    {{- if eq .Values.mode "gateway" }}
    - name: sidecar-proxy
      containerPort: {{ int .Values.proxy.port }}
      protocol: TCP
    {{- end }}
    - name: sidecar-admin
      containerPort: {{ int .Values.admin.port }}
      protocol: TCP
  env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    {{- if eq .Values.state.backend "redis" }}
    - name: SIDECAR_STATE__REDIS_URL
      valueFrom:
        secretKeyRef:
          name: {{ .Values.state.redis.existingSecret }}
          key: {{ .Values.state.redis.key }}
    {{- end }}
    {{- with .Values.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  startupProbe:
    httpGet:
      path: /readyz
      port: sidecar-admin
    periodSeconds: {{ .Values.probes.startup.periodSeconds }}
    failureThreshold: {{ .Values.probes.startup.failureThreshold }}
    timeoutSeconds: {{ .Values.probes.startup.timeoutSeconds }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: sidecar-admin
    periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
    failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
    timeoutSeconds: {{ .Values.probes.liveness.timeoutSeconds }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: sidecar-admin
    periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
    failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
    timeoutSeconds: {{ .Values.probes.readiness.timeoutSeconds }}
  resources:
    {{- toYaml (ternary .Values.gateway.resources .Values.sidecar.resources (eq .Values.mode "gateway")) | nindent 4 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  {{- with .Values.lifecycle }}
  lifecycle:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: agent-sidecar-config
      mountPath: {{ include "agent-sidecar.mountPath" . }}/config
      readOnly: true
    - name: agent-sidecar-policies
      mountPath: {{ include "agent-sidecar.mountPath" . }}/policies
      readOnly: true
    {{- if $tokens }}
    - name: agent-sidecar-admin-tokens
      mountPath: {{ include "agent-sidecar.mountPath" . }}/admin
      readOnly: true
    {{- end }}
    - name: agent-sidecar-tmp
      mountPath: /tmp
    {{- if eq .Values.state.backend "sqlite" }}
    - name: agent-sidecar-state
      mountPath: /var/lib/agent-sidecar
    {{- end }}
    {{- with .Values.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}

{{/*
OPA as a second container on the same policies ConfigMap. Its REST API (which can replace
policies) listens on loopback only, for the sidecar; the kubelet probes the read-only
diagnostic listener. Hidden entries (the ConfigMap's ..data links) and *_test.rego files are
not loaded; --watch reloads on a ConfigMap change.
*/}}
{{- define "agent-sidecar.opaContainer" -}}
- name: opa
  image: {{ include "agent-sidecar.imageRef" (dict "image" .Values.opa.image "defaultTag" "") | quote }}
  imagePullPolicy: {{ .Values.opa.image.pullPolicy }}
  {{- if include "agent-sidecar.native" . }}
  restartPolicy: Always
  {{- end }}
  args:
    - run
    - --server
    - --addr=127.0.0.1:{{ int .Values.opa.port }}
    - --diagnostic-addr=0.0.0.0:{{ int .Values.opa.diagnosticPort }}
    - --watch
    - --ignore=.*
    - --ignore=*_test.rego
    - --log-level={{ .Values.opa.logLevel }}
    - --disable-telemetry
    - /policies
  ports:
    - name: opa-diag
      containerPort: {{ int .Values.opa.diagnosticPort }}
      protocol: TCP
  startupProbe:
    httpGet:
      path: /health
      port: opa-diag
    periodSeconds: 1
    failureThreshold: 60
  livenessProbe:
    httpGet:
      path: /health
      port: opa-diag
    periodSeconds: 10
  readinessProbe:
    httpGet:
      path: /health
      port: opa-diag
    periodSeconds: 5
  resources:
    {{- toYaml .Values.opa.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  volumeMounts:
    - name: agent-sidecar-policies
      mountPath: /policies
      readOnly: true
{{- end -}}

{{- define "agent-sidecar.initContainers" -}}
{{- if include "agent-sidecar.sidecarNative" . -}}
{{- if eq .Values.policy.engine "opa" -}}
{{ include "agent-sidecar.opaContainer" . }}
{{ end -}}
{{ include "agent-sidecar.container" . }}
{{- end -}}
{{- end -}}

{{- define "agent-sidecar.containers" -}}
{{- if not (include "agent-sidecar.sidecarNative" .) -}}
{{ include "agent-sidecar.container" . }}
{{- if eq .Values.policy.engine "opa" }}
{{ include "agent-sidecar.opaContainer" . }}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "agent-sidecar.volumes" -}}
{{- $tokens := include "agent-sidecar.tokensSecretName" . -}}
- name: agent-sidecar-config
  configMap:
    name: {{ include "agent-sidecar.configMapName" . }}
- name: agent-sidecar-policies
  configMap:
    name: {{ include "agent-sidecar.policiesConfigMapName" . }}
{{- if $tokens }}
- name: agent-sidecar-admin-tokens
  secret:
    secretName: {{ $tokens }}
    defaultMode: 292 # 0444: the sidecar's user reads it; no other container mounts it
{{- end }}
- name: agent-sidecar-tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if eq .Values.state.backend "sqlite" }}
- name: agent-sidecar-state
  emptyDir: {}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}
