{{/*
Recording rules and alerts, as the `groups` list of a Prometheus rules file. The PrometheusRule
renders them with the values' targets; deploy/prometheus/sidecar-rules.yaml in the repository
is the same list rendered with the default values (a test keeps the two equal).

Burn-rate alerts follow the multi-window, multi-burn-rate scheme for a 30-day objective:
14.4x over 1h and 5m, 6x over 6h and 30m (page); 3x over 1d and 2h, 1x over 3d and 6h (ticket).
*/}}
{{- define "agent-sidecar.ruleGroups" -}}
{{- $slo := .Values.monitoring.prometheusRule.slo -}}
{{- $alerts := .Values.monitoring.prometheusRule.alerts -}}
{{- $errorBudget := printf "(1 - %v)" $slo.toolSuccessObjective -}}
{{- $latencyBudget := printf "(1 - %v)" $slo.toolLatencyObjective -}}
{{- /* Prometheus 2 keeps the client's "10.0", Prometheus 3 normalises it to "10": match both. */ -}}
{{- $le := printf "%s(\\\\.0)?" (toString $slo.toolLatencySeconds | replace "." "\\\\.") -}}
- name: agent-sidecar.tool-slo.rules
  rules:
    {{- range $window := list "5m" "30m" "1h" "2h" "6h" "1d" "3d" }}
    - record: namespace_tool:sidecar_tool_errors:ratio_rate{{ $window }}
      expr: |-
        sum by (namespace, tool) (rate(sidecar_tool_results_total{outcome="error"}[{{ $window }}]))
        /
        sum by (namespace, tool) (rate(sidecar_tool_results_total[{{ $window }}]))
    - record: namespace_tool:sidecar_tool_slow_calls:ratio_rate{{ $window }}
      expr: |-
        1 - (
          sum by (namespace, tool) (rate(sidecar_tool_call_duration_seconds_bucket{le=~"{{ $le }}"}[{{ $window }}]))
          /
          sum by (namespace, tool) (rate(sidecar_tool_call_duration_seconds_count[{{ $window }}]))
        )
    {{- end }}
    - record: namespace_tool_verdict:sidecar_tool_calls:rate5m
      expr: sum by (namespace, tool, verdict) (rate(sidecar_tool_calls_total[5m]))
- name: agent-sidecar.alerts
  rules:
    {{- range $kind := list "errors" "slow_calls" }}
    {{- $budget := ternary $errorBudget $latencyBudget (eq $kind "errors") }}
    {{- $name := ternary "SidecarToolErrorBudgetBurn" "SidecarToolLatencyBudgetBurn" (eq $kind "errors") }}
    {{- $what := ternary "tool results are errors" (printf "tool calls take longer than %ss" (toString $slo.toolLatencySeconds)) (eq $kind "errors") }}
    {{- $series := printf "namespace_tool:sidecar_tool_%s:ratio_rate" $kind }}
    {{- $objective := ternary $slo.toolSuccessObjective $slo.toolLatencyObjective (eq $kind "errors") }}
    {{- $budgetText := printf "%.4g%%" (mulf (subf 1.0 (float64 $objective)) 100.0) }}
    {{- $budgetName := ternary "error budget" "latency budget" (eq $kind "errors") }}
    - alert: {{ $name }}
      expr: |-
        (
          {{ $series }}1h > (14.4 * {{ $budget }})
          and
          {{ $series }}5m > (14.4 * {{ $budget }})
        )
        or
        (
          {{ $series }}6h > (6 * {{ $budget }})
          and
          {{ $series }}30m > (6 * {{ $budget }})
        )
      for: 2m
      labels:
        severity: critical
      annotations:
        summary: {{ printf "%s burns its %s fast" `Tool {{ $labels.tool }} in {{ $labels.namespace }}` $budgetName | quote }}
        description: {{ printf "%s of %s: at this rate the 30-day budget (%s) is gone within days." `{{ $value | humanizePercentage }}` $what $budgetText | quote }}
    - alert: {{ $name }}Slow
      expr: |-
        (
          {{ $series }}1d > (3 * {{ $budget }})
          and
          {{ $series }}2h > (3 * {{ $budget }})
        )
        or
        (
          {{ $series }}3d > {{ $budget }}
          and
          {{ $series }}6h > {{ $budget }}
        )
      for: 15m
      labels:
        severity: warning
      annotations:
        summary: {{ printf "%s burns its %s" `Tool {{ $labels.tool }} in {{ $labels.namespace }}` $budgetName | quote }}
        description: {{ printf "%s of %s over the last days: more than the 30-day budget (%s) allows." `{{ $value | humanizePercentage }}` $what $budgetText | quote }}
    {{- end }}
    - alert: SidecarStateBackendErrors
      expr: sum by (namespace, pod, backend) (rate(sidecar_state_errors_total[5m])) > 0
      for: 5m
      labels:
        severity: critical
      annotations:
        summary: {{ `The {{ $labels.backend }} state backend of {{ $labels.namespace }}/{{ $labels.pod }} fails` | quote }}
        description: "The replay ledger, sessions or approvals cannot be read or written; the guards that need them fail closed, so tool calls are refused. Check the backend (Redis reachable, disk writable)."
    - alert: SidecarPolicyReloadFailing
      expr: sum by (namespace, pod) (increase(sidecar_policy_reload_failures_total[15m])) > 0
      labels:
        severity: warning
      annotations:
        summary: {{ `A policy change failed to load in {{ $labels.namespace }}/{{ $labels.pod }}` | quote }}
        description: "The changed policies did not compile or load; the last good policy stays in force. /v1/status and the sidecar's log name the file and line; test changes with `sidecar policy test` before applying them."
    - alert: SidecarPolicyStale
      expr: max by (namespace, pod) (sidecar_policy_stale_seconds) > {{ int $alerts.policyStaleSeconds }}
      labels:
        severity: warning
      annotations:
        summary: {{ `{{ $labels.namespace }}/{{ $labels.pod }} enforces a stale policy` | quote }}
        description: {{ printf "The policy in force has been behind its source for %s: a changed policy failed to load (the last good one still decides), or the OPA server stopped answering." `{{ $value | humanizeDuration }}` | quote }}
    - alert: SidecarPolicyEvaluationErrors
      expr: sum by (namespace, pod) (rate(sidecar_policy_decisions_total{decision="error"}[5m])) > 0
      for: 5m
      labels:
        severity: critical
      annotations:
        summary: {{ `Policy evaluation fails in {{ $labels.namespace }}/{{ $labels.pod }}` | quote }}
        description: "The policy engine returns errors (an OPA server unreachable or timing out, a policy failing at evaluation); with policy.on_error=deny (the default) those tool calls are refused."
    - alert: SidecarApprovalsPendingTooLong
      expr: max by (namespace, pod) (min_over_time(sidecar_approvals_pending[{{ $alerts.approvalsPendingFor }}])) > 0
      labels:
        severity: warning
      annotations:
        summary: {{ printf "Approvals in %s have waited for a human for %s" `{{ $labels.namespace }}/{{ $labels.pod }}` $alerts.approvalsPendingFor | quote }}
        description: "At least one tool call has waited for approval the whole time; list them with `sidecar approvals list` against this pod's admin port."
    - alert: SidecarApprovalsExpired
      expr: sum by (namespace, pod) (increase(sidecar_approvals_total{outcome="expired"}[1h])) > 0
      labels:
        severity: warning
      annotations:
        summary: {{ `Approvals expired unanswered in {{ $labels.namespace }}/{{ $labels.pod }}` | quote }}
        description: "Tool calls that needed approval expired before anyone decided: the approvers are not reached (notifications, webhook) or too few."
    - alert: SidecarRejectionLogDropping
      expr: sum by (namespace, pod) (increase(sidecar_rejection_log_dropped_total[10m])) > 0
      labels:
        severity: warning
      annotations:
        summary: {{ `The rejection log of {{ $labels.namespace }}/{{ $labels.pod }} drops lines` | quote }}
        description: "Refused payloads arrive faster than the rejection log writes them; the dropped lines are lost for audit and `sidecar rejections top`."
    - alert: SidecarRejectionLogErrors
      expr: sum by (namespace, pod) (increase(sidecar_rejection_log_errors_total[10m])) > 0
      labels:
        severity: warning
      annotations:
        summary: {{ `The rejection log of {{ $labels.namespace }}/{{ $labels.pod }} cannot be written` | quote }}
        description: "Writing the rejection log fails (disk full, path not writable); refused payloads are not recorded."
    - alert: SidecarUpstreamErrorSpike
      expr: |-
        sum by (namespace, provider) (rate(sidecar_upstream_request_duration_seconds_count{status=~"5..|error"}[10m]))
        /
        sum by (namespace, provider) (rate(sidecar_upstream_request_duration_seconds_count[10m]))
        > {{ $alerts.upstreamErrorRatio }}
      for: 10m
      labels:
        severity: warning
      annotations:
        summary: {{ `Requests to {{ $labels.provider }} fail in {{ $labels.namespace }}` | quote }}
        description: {{ printf "%s of model requests to the upstream fail (a 5xx answer, or none: connect error, timeout, dropped stream; sidecar_upstream_errors_total has the causes)." `{{ $value | humanizePercentage }}` | quote }}
{{- end -}}
