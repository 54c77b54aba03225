"""Prometheus metrics (DESIGN.md "Metrics (contract)") and the per-tool status summary.

One `Metrics` object per process, owning its own registry so tests and several apps in one
process never collide on the global registry. Every label value is bounded: tool names go
through `ToolLabels`, enumerated labels fall back to a catch-all value, so nothing a model or
an agent sends can grow the number of series.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, ProcessCollector
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from sidecar.telemetry.pending import Pending
from sidecar.telemetry.tokens import DIRECTIONS
from sidecar.timefmt import iso_utc

log = logging.getLogger("sidecar.metrics")

OTHER = "other"

# Buckets sized for what each histogram measures (seconds).
POLICY_BUCKETS = (
    0.00001,
    0.000025,
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,  # an OPA server at its 0.25 s timeout must still land in a bucket
)
TOOL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)
OVERHEAD_BUCKETS = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
)
LOOP_LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
UPSTREAM_BUCKETS = (
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)

VERDICTS = frozenset({"allow", "reject", "deny", "approval", "replay"})
PROBLEMS = frozenset({"type", "required", "unknown_property", "enum", "format", "range", "other"})
DECISIONS = ("allow", "deny", "approval", "error")
OUTCOMES = frozenset({"ok", "error"})
REPLAY_ACTIONS = frozenset({"allowed", "answered"})
RESULT_ACTIONS = frozenset({"withheld", "redacted"})
APPROVAL_OUTCOMES = ("approved", "denied", "expired")
REPAIR_OUTCOMES = ("corrected", "abandoned", "exhausted")
PROVIDERS = frozenset({"anthropic", "openai", "mcp"})
# Which way a call travelled (the `path` label): asked for by a model, or sent as MCP tools/call.
PATHS = ("model", "mcp")
# MCP methods the sidecar names in `sidecar_mcp_operation_duration_seconds{method}` (else other).
MCP_METHODS = frozenset(
    {
        "initialize",
        "ping",
        "server/discover",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        "subscriptions/listen",
        "tasks/get",
        "tasks/result",
        "tasks/list",
        "tasks/cancel",
    }
)
# error.type of an MCP operation: none, tool_error (a CallToolResult with isError), a refusal
# by the sidecar (the verdict's), jsonrpc (a JSON-RPC error answer), http (an HTTP error status),
# upstream (no answer).
MCP_ERROR_TYPES = frozenset(
    {"none", "tool_error", "reject", "deny", "approval", "replay", "jsonrpc", "http", "upstream", "refused"}
)
# Why a request or reply was refused as a whole (sidecar_requests_refused_total{reason}).
REFUSAL_REASONS = frozenset(
    {"size", "depth", "encoding", "content_type", "status", "framing", "unsupported_path", "websocket", "limit"}
)
UPSTREAM_CAUSES = frozenset({"dns", "connect", "tls", "timeout", "disconnected", "protocol"})
# Paths forwarded untouched, by what they are (sidecar_passthrough_requests_total{path_class}).
# The classes of sidecar/proxy/coverage.py (`PathClass`) that can be forwarded.
PATH_CLASSES = frozenset(
    {
        "models",
        "count_tokens",
        "files",
        "batches",
        "embeddings",
        "moderations",
        "audio",
        "images",
        "videos",
        "legacy_completions",
        "storage",
        "fine_tuning",
        "admin",
        "conversations",
        "responses",
        "assistants",
        "realtime",
        "hosted_agents",
        "stored_completions",
        "unknown",
        "history",
        "other",
    }
)
ENGINES = frozenset({"embedded", "opa"})
TOKEN_DIRECTIONS = frozenset(d.value for d in DIRECTIONS)
LINT_SEVERITIES = ("error", "warning", "info")
# Lint findings of the latest declaration of each tool: {(tool name, severity): count}.
LintSource = Callable[[], Mapping[tuple[str, str], int]]
# sidecar_policy_decision_flips_total{direction}: "<before>_to_<after>" over allow/deny/approval.
FLIP_DIRECTIONS = frozenset(f"{a}_to_{b}" for a in DECISIONS[:3] for b in DECISIONS[:3] if a != b)

# Longer names are not real tool names (providers cap them at 64-128 chars).
_MAX_TOOL_NAME = 128
_RESERVOIR = 1024


def _bounded(value: object, allowed: Iterable[str], fallback: str = OTHER) -> str:
    text = value if type(value) is str else str(getattr(value, "value", value))
    return text if text in allowed else fallback


class ToolLabels:
    """Maps tool names to `tool` label values: declared names up to `cap`, else "other".

    Only `declare` (called for tools an agent's request declares) admits a name, so a model
    inventing tool names can never create series. Admission is first come, first served, for
    the process lifetime: a name once admitted keeps its series.
    """

    def __init__(self, cap: int = 200) -> None:
        self.cap = cap
        self._names: set[str] = set()
        self._lock = threading.Lock()

    def declare(self, name: str) -> str:
        """Admit `name` if there is room; returns the label it will get."""
        if name in self._names:
            return name
        if not name or len(name) > _MAX_TOOL_NAME or name == OTHER:
            return OTHER
        with self._lock:
            if name not in self._names and len(self._names) < self.cap:
                self._names.add(name)
        return name if name in self._names else OTHER

    def label(self, name: str | None) -> str:
        # A set lookup is atomic under the GIL: no lock on the hot path.
        return name if name is not None and name in self._names else OTHER

    def __len__(self) -> int:
        return len(self._names)


@dataclass(frozen=True, slots=True)
class _TokenSlot:
    """A (tool, direction) pair's counter child, and the tool's /v1/status token totals."""

    child: Any
    totals: dict[str, float]
    direction: str


class _ToolStats:
    """Bounded per-tool counters and a latency reservoir for /v1/status."""

    __slots__ = ("durations", "errors", "ok", "rejections", "repairs", "replays", "tokens", "verdicts")

    def __init__(self) -> None:
        self.verdicts: dict[str, int] = {}
        self.tokens: dict[str, float] = {}
        self.ok = 0
        self.errors = 0
        self.replays = 0
        self.repairs = 0
        self.rejections = 0
        self.durations: deque[float] = deque(maxlen=_RESERVOIR)


def quantile(sorted_values: list[float], q: float) -> float | None:
    """Linear-interpolated quantile of an already sorted list (None when empty)."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


class Metrics:
    """All sidecar metrics, one method per event; every method is cheap and never raises."""

    def __init__(self, tool_label_cap: int = 200, version: str | None = None) -> None:
        from sidecar import __version__

        self.registry = CollectorRegistry(auto_describe=True)
        self.tools = ToolLabels(tool_label_cap)
        self._started = time.time()
        self._lock = threading.Lock()
        self._settles: list[Callable[[], None]] = []  # see settle_before_read
        # Hot-path increments and observations, applied before every read (see `settle`).
        self._pending = Pending()
        # Requests the proxy port is handling now (counted by the server, sidecar/app.py), not
        # exported: batched work (sidecar/telemetry/batched.py) runs at once when it is the only one.
        self.requests_in_flight = 0
        self._stats: dict[str, _ToolStats] = {}
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        # (tool, direction) as a reply names them -> where their tokens go (bounded: only
        # declared tools, at most `tool_label_cap`, and the four directions are remembered).
        self._token_slots: dict[tuple[str | None, str], _TokenSlot] = {}
        self._repairs = dict.fromkeys(REPAIR_OUTCOMES, 0)
        self._approvals_pending = 0
        self._anomaly_kinds: set[str] = set()
        r = self.registry

        # --- contract (DESIGN.md) ---
        self.tool_calls = Counter(
            "sidecar_tool_calls",
            "Tool calls judged, by guard verdict and path (a model's call, or an MCP tools/call).",
            ["tool", "provider", "verdict", "path"],
            registry=r,
        )
        self.tool_call_duration = Histogram(
            "sidecar_tool_call_duration_seconds",
            "Time from a tool call reaching the agent (or its MCP server) to its result arriving.",
            ["tool", "outcome", "path"],
            buckets=TOOL_BUCKETS,
            registry=r,
        )
        self.tool_results = Counter(
            "sidecar_tool_results",
            "Tool results sent back by the agent, or returned by an MCP server (path).",
            ["tool", "outcome", "path"],
            registry=r,
        )
        self.tool_replays = Counter(
            "sidecar_tool_replays",
            "Repeated identical calls: allowed, or answered from ledger.",
            ["tool", "action", "path"],
            registry=r,
        )
        self.argument_rejections = Counter(
            "sidecar_argument_rejections",
            "Argument lockdown failures, one per field problem.",
            ["tool", "problem", "path"],
            registry=r,
        )
        self.policy_decisions = Counter(
            "sidecar_policy_decisions",
            "Rego policy decisions.",
            ["decision", "path"],
            registry=r,
        )
        self.policy_evaluation = Histogram(
            "sidecar_policy_evaluation_seconds",
            "Rego policy evaluation time.",
            ["engine"],
            buckets=POLICY_BUCKETS,
            registry=r,
        )
        self.approvals_pending_gauge = Gauge(
            "sidecar_approvals_pending",
            "Approvals waiting for a human.",
            registry=r,
        )
        self.approvals = Counter(
            "sidecar_approvals",
            "Approvals resolved, by outcome.",
            ["outcome"],
            registry=r,
        )
        self.repair_rounds = Counter(
            "sidecar_repair_rounds",
            "Repair rounds sent to the model, by outcome.",
            ["outcome"],
            registry=r,
        )
        self.upstream_duration = Histogram(
            "sidecar_upstream_request_duration_seconds",
            "Upstream provider request time.",
            ["provider", "status"],
            buckets=UPSTREAM_BUCKETS,
            registry=r,
        )
        self.proxy_overhead = Histogram(
            "sidecar_proxy_overhead_seconds",
            "Time spent in the sidecar itself per request.",
            ["provider", "stream"],
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self.schema_changes = Counter(
            "sidecar_tool_schema_changes",
            "A tool's declaration (description or schema) differs from the one last seen for its agent and provider.",
            ["tool"],
            registry=r,
        )
        self.requests_refused = Counter(
            "sidecar_requests_refused",
            "Requests or replies refused as a whole (unsupported path, unreadable framing, size...).",
            ["reason"],
            registry=r,
        )

        # --- operational extras ---
        self.rejection_log_errors = Counter(
            "sidecar_rejection_log_errors",
            "Rejection log write failures (disk full, unwritable).",
            registry=r,
        )
        self.rejection_log_dropped = Counter(
            "sidecar_rejection_log_dropped",
            "Rejection log lines dropped: the queue was full.",
            registry=r,
        )
        self.admin_unauthorized = Counter(
            "sidecar_admin_unauthorized",
            "Admin API requests refused for a missing or bad token.",
            registry=r,
        )
        self.policy_reload_failures = Counter(
            "sidecar_policy_reload_failures",
            "Policy reloads that failed (previous policy kept).",
            registry=r,
        )
        self.policy_reloads = Counter(
            "sidecar_policy_reloads",
            "Policy reloads that succeeded.",
            registry=r,
        )
        self.policy_flips = Counter(
            "sidecar_policy_decision_flips",
            "Calls the policy decided differently from what was applied (shadow mode: the call "
            "was let through, the policy said deny or approval).",
            ["tool", "direction"],
            registry=r,
        )
        self.tools_hidden = Counter(
            "sidecar_tools_hidden",
            "Declared tools hidden from the model by the tool_list policy.",
            ["tool", "path"],
            registry=r,
        )
        self.tool_result_anomalies = Counter(
            "sidecar_tool_result_anomalies",
            "Anomalies found in tool results, by tool and kind (sum by (kind) for the totals).",
            ["tool", "kind"],
            registry=r,
        )
        self.tool_results_rewritten = Counter(
            "sidecar_tool_results_rewritten",
            "Tool results the model did not get as the agent sent them, by tool and action "
            "(withheld: a notice instead; redacted: matched spans replaced); counted once, when "
            "a result is decided: re-sent with the history, it is rewritten again, not counted again.",
            ["tool", "action"],
            registry=r,
        )
        self.state_errors = Counter(
            "sidecar_state_errors",
            "State backend operations that failed.",
            ["backend"],
            registry=r,
        )
        self.policy_stale = Gauge(
            "sidecar_policy_stale_seconds",
            "Seconds the policy in force has been behind its source (0: current; a reload failed).",
            registry=r,
        )
        self.upstream_errors = Counter(
            "sidecar_upstream_errors",
            "Upstream requests that failed without an HTTP answer, by cause.",
            ["provider", "cause"],
            registry=r,
        )
        self.passthrough = Counter(
            "sidecar_passthrough_requests",
            "Requests forwarded untouched (paths that cannot carry a tool call), by path class.",
            ["provider", "path_class"],
            registry=r,
        )
        self.loop_lag = Histogram(
            "sidecar_event_loop_lag_seconds",
            "How late the event loop ran a timer asked for every 20 ms (time nothing else could run).",
            buckets=LOOP_LAG_BUCKETS,
            registry=r,
        )
        self.filter_errors = Counter(
            "sidecar_filter_errors",
            "Filters that raised, by filter and hook; critical ones made the exchange fail closed.",
            ["filter", "hook", "critical"],
            registry=r,
        )
        self.mcp_operation_duration = Histogram(
            "sidecar_mcp_operation_duration_seconds",
            "MCP requests proxied to a configured server (mcp.client.operation.duration), by server, "
            "method and error type (none when it succeeded).",
            ["server", "method", "error_type"],
            buckets=UPSTREAM_BUCKETS,
            registry=r,
        )
        self._mcp_servers: frozenset[str] = frozenset()
        # --- approvers (docs/approvals.md) ---
        self.approval_decisions_refused = Counter(
            "sidecar_approval_decisions_refused",
            "Approval decisions refused from an authenticated caller (outside the group, unmapped Slack user).",
            ["via", "reason"],
            registry=r,
        )
        self.slack_callbacks_refused = Counter(
            "sidecar_slack_callbacks_refused",
            "Slack interaction callbacks refused before any decision (signature, stale, replayed, malformed).",
            ["reason"],
            registry=r,
        )
        self.slack_api_failures = Counter(
            "sidecar_slack_api_failures",
            "Slack Web API calls that failed (unreachable, or answered ok: false), by method.",
            ["method"],
            registry=r,
        )
        self.tool_tokens_counter = Counter(
            "sidecar_tool_tokens",
            "Tokens attributed to a tool (an estimate: usage comes per reply and is shared out, docs/cost.md): "
            "output = writing its calls; input / input_cached / input_cache_write = its calls and results "
            "in later prompts, at the base rate, read from the cache, written to the cache.",
            ["tool", "direction"],
            registry=r,
        )
        self.build = Info("sidecar_build", "Sidecar version.", registry=r)
        self.build.info({"version": version or __version__})
        # process_cpu_seconds_total, process_resident_memory_bytes, ... on this registry too.
        ProcessCollector(registry=r)

        # Zero series for small enumerations, so rate() and alerts work before the first event.
        for decision in DECISIONS:
            for path in PATHS:
                self.policy_decisions.labels(decision, path)
        for outcome in APPROVAL_OUTCOMES:
            self.approvals.labels(outcome)
        for outcome in REPAIR_OUTCOMES:
            self.repair_rounds.labels(outcome)
        for reason in REFUSAL_REASONS:
            self.requests_refused.labels(reason)
        for provider in PROVIDERS:
            for cause in UPSTREAM_CAUSES:
                self.upstream_errors.labels(provider, cause)

    # ---------------------------------------------------------------- helpers

    def _tool_stats(self, label: str) -> _ToolStats:
        stats = self._stats.get(label)
        if stats is None:
            stats = self._stats.setdefault(label, _ToolStats())
        return stats

    def _inc(self, metric: Any, *labels: str) -> None:
        """One more on the series of `metric` with these (bounded) labels, held until the next
        read (sidecar/telemetry/pending.py)."""
        self._pending.inc(self._child(metric, *labels))

    def _observe(self, seconds: float, metric: Any, *labels: str) -> None:
        """`seconds` observed on the series of `metric` with these labels, held like `_inc`'s."""
        self._pending.observe(self._child(metric, *labels), seconds)

    def _child(self, metric: Any, *labels: str) -> Any:
        """Label children cached: `labels()` costs microseconds on the hot path, a dict
        lookup does not. Bounded because every label value already is."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def declare_tool(self, name: str) -> str:
        """Admit a tool name a request declared; returns its label."""
        return self.tools.declare(name)

    # ---------------------------------------------------------------- contract events

    def tool_call(self, tool: str, provider: str, verdict: str, path: str = "model") -> None:
        """A complete tool call was judged. verdict: allow, reject, deny, approval, replay."""
        label = self.tools.label(tool)
        verdict_label = _bounded(verdict, VERDICTS)
        self._inc(self.tool_calls, label, _bounded(provider, PROVIDERS), verdict_label, _path(path))
        with self._lock:
            verdicts = self._tool_stats(label).verdicts
            verdicts[verdict_label] = verdicts.get(verdict_label, 0) + 1

    def argument_rejection(self, tool: str, problem: str, path: str = "model") -> None:
        """One field failed lockdown. problem: a FieldError.kind."""
        label = self.tools.label(tool)
        self._inc(self.argument_rejections, label, _bounded(problem, PROBLEMS), _path(path))
        with self._lock:
            self._tool_stats(label).rejections += 1

    def policy_decision(self, decision: str, engine: str, seconds: float | None = None, path: str = "model") -> None:
        """A policy evaluation finished. decision: allow, deny, approval, error."""
        self._inc(self.policy_decisions, _bounded(decision, DECISIONS, "error"), _path(path))
        if seconds is not None:
            self.policy_evaluated(engine, seconds)

    def policy_evaluated(self, engine: str, seconds: float) -> None:
        """A policy evaluation took `seconds` (a tool list, a result with nothing to say, or
        a decision)."""
        self._observe(seconds, self.policy_evaluation, _bounded(engine, ENGINES))

    def tool_result(self, tool: str, outcome: str, seconds: float | None = None, path: str = "model") -> None:
        """A tool result arrived. outcome: ok or error; seconds None when the call is unknown."""
        label = self.tools.label(tool)
        outcome_label = _bounded(outcome, OUTCOMES, "error")
        path_label = _path(path)
        self._inc(self.tool_results, label, outcome_label, path_label)
        if seconds is not None and seconds >= 0:
            self._observe(seconds, self.tool_call_duration, label, outcome_label, path_label)
        with self._lock:
            stats = self._tool_stats(label)
            if outcome_label == "ok":
                stats.ok += 1
            else:
                stats.errors += 1
            if seconds is not None and seconds >= 0:
                stats.durations.append(seconds)

    def replay(self, tool: str, action: str, path: str = "model") -> None:
        """An identical call was seen again. action: allowed or answered (from the ledger)."""
        label = self.tools.label(tool)
        self._inc(self.tool_replays, label, _bounded(action, REPLAY_ACTIONS), _path(path))
        with self._lock:
            self._tool_stats(label).replays += 1

    def repair_round(self, outcome: str, tools: Iterable[str] = ()) -> None:
        """A repair sequence ended. outcome: corrected, abandoned or exhausted; tools: the refused calls'."""
        outcome_label = _bounded(outcome, REPAIR_OUTCOMES)
        self._inc(self.repair_rounds, outcome_label)
        with self._lock:
            self._repairs[outcome_label] = self._repairs.get(outcome_label, 0) + 1
            for tool in tools:
                self._tool_stats(self.tools.label(tool)).repairs += 1

    def upstream(self, provider: str, status: int | str | None, seconds: float) -> None:
        """An upstream request finished; status None (or non-HTTP) for a transport error."""
        self._observe(seconds, self.upstream_duration, _bounded(provider, PROVIDERS), _status(status))

    def overhead(self, provider: str, stream: bool, seconds: float) -> None:
        """Time the sidecar itself added to one request (parsing, guards, rewriting)."""
        self._observe(seconds, self.proxy_overhead, _bounded(provider, PROVIDERS), "true" if stream else "false")

    def schema_change(self, tool: str) -> None:
        self._inc(self.schema_changes, self.tools.label(tool))

    def tool_tokens(self, tool: str | None, direction: str, tokens: float) -> None:
        """Tokens attributed to a tool (an estimate, sidecar/telemetry/tokens.py). direction: one of DIRECTIONS."""
        self.tool_tokens_spent(((tool, direction, tokens),))

    def tool_tokens_spent(self, spent: Iterable[tuple[str | None, str, float]]) -> None:
        """`tool_tokens` for each (tool, direction, tokens) of one exchange's replies, under one
        lock: an exchange attributes tokens to a dozen or more (tool, direction) pairs."""
        counted: list[tuple[_TokenSlot, float]] = []
        for tool, direction, tokens in spent:
            if tokens < 0 or tokens != tokens:
                continue
            slot = self._token_slots.get((tool, direction)) or self._token_slot(tool, direction)
            if tokens == 0:  # the slot's series and total exist at 0 already: nothing to add
                continue
            self._pending.inc(slot.child, tokens)
            counted.append((slot, tokens))
        with self._lock:
            for slot, tokens in counted:
                slot.totals[slot.direction] = slot.totals.get(slot.direction, 0.0) + tokens

    def _token_slot(self, tool: str | None, direction: str) -> _TokenSlot:
        """Where a (tool, direction) pair's tokens go; remembered once its labels are final: a
        declared tool keeps its label for the process lifetime (ToolLabels), a name that is not
        (yet) declared is labelled "other" now and may be admitted later."""
        label = self.tools.label(tool)
        direction_label = _bounded(direction, TOKEN_DIRECTIONS, "input")
        with self._lock:
            totals = self._tool_stats(label).tokens
            totals.setdefault(direction_label, 0.0)  # listed from its first reply on, as its series
        slot = _TokenSlot(self._child(self.tool_tokens_counter, label, direction_label), totals, direction_label)
        if (label != OTHER or tool is None) and direction in TOKEN_DIRECTIONS:
            self._token_slots[(tool, direction)] = slot
        return slot

    def lint_findings(self, source: LintSource) -> None:
        """Expose `sidecar_tool_lint_findings{tool,severity}`, read from `source` at scrape time
        (it must return what was already linted: a scrape never lints)."""
        self.registry.register(_LintCollector(self.tools, source))

    def approvals_pending(self, n: int) -> None:
        self._approvals_pending = n
        self.approvals_pending_gauge.set(n)

    def approvals_pending_add(self, delta: int) -> None:
        """One approval more (or fewer) pending, without a recount."""
        self.approvals_pending(max(0, self._approvals_pending + delta))

    def approval(self, outcome: str) -> None:
        """An approval was resolved. outcome: approved, denied, expired."""
        self._inc(self.approvals, _bounded(outcome, APPROVAL_OUTCOMES))

    # ---------------------------------------------------------------- operational events

    def rejection_log_error(self, _exc: BaseException | None = None) -> None:
        self.rejection_log_errors.inc()

    def rejection_log_drop(self) -> None:
        self.rejection_log_dropped.inc()

    def admin_unauthorized_request(self) -> None:
        self.admin_unauthorized.inc()

    def approval_decision_refused(self, via: str, reason: str) -> None:
        self.approval_decisions_refused.labels(via, reason).inc()

    def slack_callback_refused(self, reason: str) -> None:
        self.slack_callbacks_refused.labels(reason).inc()

    def slack_api_failure(self, method: str) -> None:
        self.slack_api_failures.labels(method).inc()

    def policy_reload(self, ok: bool) -> None:
        (self.policy_reloads if ok else self.policy_reload_failures).inc()

    def policy_staleness(self, seconds: Callable[[], float]) -> None:
        """Report how long the policy in force has been behind its source, read at scrape time."""
        self.policy_stale.set_function(seconds)

    def filter_error(self, name: str, hook: str, critical: bool) -> None:
        """A filter raised. Names and hooks come from code (a fixed, small set)."""
        self._inc(self.filter_errors, name[:64], hook[:32], "true" if critical else "false")

    def request_refused(self, reason: str) -> None:
        """A request or reply refused as a whole. reason: one of REFUSAL_REASONS."""
        self._inc(self.requests_refused, _bounded(reason, REFUSAL_REASONS))

    def upstream_error(self, provider: str, cause: str) -> None:
        """An upstream request failed without an HTTP answer (connect, timeout, ...)."""
        self._inc(self.upstream_errors, _bounded(provider, PROVIDERS), _bounded(cause, UPSTREAM_CAUSES))

    def passthrough_request(self, provider: str, path_class: str) -> None:
        """A request forwarded untouched (it cannot carry a tool call)."""
        self._inc(self.passthrough, _bounded(provider, PROVIDERS), _bounded(path_class, PATH_CLASSES))

    def policy_decision_flip(self, tool: str, before: str, after: str) -> None:
        """A decision flipped: `before` was applied, the policy said `after` (allow, deny, approval)."""
        direction = _bounded(f"{before}_to_{after}", FLIP_DIRECTIONS)
        self._inc(self.policy_flips, self.tools.label(tool), direction)

    def tool_hidden(self, tool: str, path: str = "model") -> None:
        self._inc(self.tools_hidden, self.tools.label(tool), _path(path))

    def mcp_servers(self, names: Iterable[str]) -> None:
        """The configured MCP server names: the only values the `server` label takes."""
        self._mcp_servers = frozenset(name for name in names if len(name) <= _MAX_TOOL_NAME)

    def mcp_operation(self, server: str, method: str, error_type: str, seconds: float) -> None:
        """One MCP request proxied (or answered by the sidecar), from its arrival to its answer."""
        self._observe(
            seconds,
            self.mcp_operation_duration,
            _bounded(server, self._mcp_servers),
            _bounded(method, MCP_METHODS),
            _bounded(error_type, MCP_ERROR_TYPES),
        )

    def tool_result_anomaly(self, kind: str, tool: str | None = None) -> None:
        """Anomaly kinds come from code, but cap them anyway (32 distinct, then other)."""
        if kind not in self._anomaly_kinds:
            with self._lock:
                if len(self._anomaly_kinds) < 32 and len(kind) <= 64:
                    self._anomaly_kinds.add(kind)
        kind_label = kind if kind in self._anomaly_kinds else OTHER
        self._inc(self.tool_result_anomalies, self.tools.label(tool), kind_label)

    def tool_result_rewritten(self, tool: str | None, action: str) -> None:
        """A tool result was rewritten before it went upstream. action: withheld or redacted."""
        self._inc(self.tool_results_rewritten, self.tools.label(tool), _bounded(action, RESULT_ACTIONS))

    def state_error(self, backend: str) -> None:
        self._inc(self.state_errors, _bounded(backend, {"memory", "sqlite", "redis"}))

    # ---------------------------------------------------------------- exposition

    def settle_before_read(self, settle: Callable[[], None]) -> None:
        """`settle` runs before the metrics are read (`render`, `status_summary`) and when the
        sidecar closes (`settle`): for work done in batches (sidecar/telemetry/batched.py), so
        a read never misses what already happened and a graceful stop loses nothing."""
        self._settles.append(settle)

    def settle(self) -> None:
        """Run every batch waiting (see `settle_before_read`), one that fails logged; then add
        the increments and observations held on the hot path (sidecar/telemetry/pending.py),
        the batches' own included. Whoever reads the prometheus_client objects directly (not
        through `render` or `status_summary`) settles first."""
        for settle in self._settles:
            try:
                settle()
            except Exception:
                log.exception("settling counts before a metrics read failed")
        self._pending.apply()

    def render(self, accept_header: str | None = None) -> tuple[bytes, str]:
        """Body and content type for /metrics: OpenMetrics when the scraper asks for it."""
        self.settle()
        encoder, content_type = choose_encoder(accept_header or "")
        if content_type.startswith("application/openmetrics-text"):
            return encoder(self.registry), content_type
        # In the text format `_created` samples become separate gauge series that double the
        # series count and no dashboard uses; OpenMetrics carries them natively, so keep them there.
        return encoder(_WithoutCreated(self.registry)), content_type

    def status_summary(self, also: Iterable[str] = ()) -> dict[str, Any]:
        """Per-tool view for /v1/status: calls by verdict, latency quantiles, error rate, tokens.
        `also`: tool names listed even when nothing was counted for them yet (declared tools)."""
        self.settle()
        with self._lock:
            items = [
                (
                    name,
                    dict(s.verdicts),
                    s.ok,
                    s.errors,
                    s.replays,
                    s.repairs,
                    s.rejections,
                    sorted(s.durations),
                    dict(s.tokens),
                )
                for name, s in self._stats.items()
            ]
            repairs = dict(self._repairs)
        counted = {item[0] for item in items}
        items += [(name, {}, 0, 0, 0, 0, 0, [], {}) for name in set(also) - counted]
        tools: dict[str, Any] = {}
        for name, verdicts, ok, errors, replays, repairs_n, rejections, durations, tokens in sorted(items):
            results = ok + errors
            tools[name] = {
                "calls": sum(verdicts.values()),
                "calls_by_verdict": verdicts,
                "results": {"ok": ok, "error": errors},
                "error_rate": errors / results if results else None,
                "latency_seconds": {
                    "p50": quantile(durations, 0.50),
                    "p95": quantile(durations, 0.95),
                    "samples": len(durations),
                },
                "argument_rejections": rejections,
                "replays": replays,
                "repairs": repairs_n,
                # Estimated (docs/cost.md), rounded to whole tokens.
                "tokens": {d.value: round(tokens.get(d.value, 0.0)) for d in DIRECTIONS},
            }
        return {
            "started_at": iso_utc(self._started),
            "uptime_seconds": round(time.time() - self._started, 3),
            "tools": tools,
            "tool_labels": {"declared": len(self.tools), "cap": self.tools.cap},
            "repair_rounds": repairs,
            "approvals_pending": self._approvals_pending,
        }

    snapshot = status_summary


class _LintCollector:
    """`sidecar_tool_lint_findings`: what the source already linted, tool names through the
    label cap (names folded into `other` add up)."""

    def __init__(self, tools: ToolLabels, source: LintSource) -> None:
        self.tools = tools
        self.source = source

    def describe(self) -> Iterator[Metric]:
        yield self._family({})

    def collect(self) -> Iterator[Metric]:
        counts: dict[tuple[str, str], int] = {}
        for (tool, severity), n in self.source().items():
            key = (self.tools.label(tool), _bounded(severity, LINT_SEVERITIES, "info"))
            counts[key] = counts.get(key, 0) + n
        yield self._family(counts)

    @staticmethod
    def _family(counts: Mapping[tuple[str, str], int]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "sidecar_tool_lint_findings",
            "Lint findings (sidecar schemas lint rules) of the latest declaration of each tool, by severity; "
            "the highest count over the providers that declare it.",
            labels=["tool", "severity"],
        )
        for (tool, severity), n in sorted(counts.items()):
            family.add_metric([tool, severity], n)
        return family


class _WithoutCreated:
    """A collector view of a registry without `*_created` samples."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            metric.samples = [s for s in metric.samples if not s.name.endswith("_created")]
            yield metric


def _path(path: str) -> str:
    return path if path in PATHS else "model"


def _status(status: int | str | None) -> str:
    if isinstance(status, int) and not isinstance(status, bool) and 100 <= status <= 599:
        return str(status)
    if isinstance(status, str) and status.isdigit() and 100 <= int(status) <= 599:
        return status
    return "error"
