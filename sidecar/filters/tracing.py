"""OpenTelemetry traces (GenAI semantic conventions) and the tool duration metric, over OTLP.

Spans, following the GenAI conventions (`gen_ai.provider.name`, the current attribute; older
versions called it `gen_ai.system`):

- `chat {model}` (CLIENT): one per proxied model request, continuing the agent's
  `traceparent`; the upstream request carries this span's context.
- `repair_round {n}` (CLIENT): one per repair round the sidecar holds with the model, a child
  of the request span; the repair request upstream carries its context.
- `execute_tool {tool}` (INTERNAL): one per tool call. A delivered call's span runs from the
  moment the call reached the agent to the arrival of its result (the agent's next request,
  or the MCP server's answer when the agent executes it through the sidecar's MCP path);
  a refused call's span is instantaneous and carries `error.type`.
- `{mcp.method.name} {tool}` (CLIENT): one per MCP `tools/call` or `tools/list` the sidecar
  checks, following the OpenTelemetry MCP conventions (`mcp.method.name`, `gen_ai.tool.name`,
  `jsonrpc.request.id`, `mcp.protocol.version`, `error.type`, `tool_error` for a result with
  `isError`). Its parent is the `execute_tool` span of the model-path call it executes, else
  the client's `params._meta.traceparent`, else its `traceparent` header; the call goes to the
  server with this span's context in `params._meta`. With OTLP metrics on, its duration is
  recorded as `mcp.client.operation.duration`.

Pending tool spans live in a bounded map; the oldest are ended as "abandoned" when it fills.
Providers are private to the Sidecar (never the global ones) so several sidecars and tests in
one process do not collide. Argument values and results are recorded only with
`telemetry.capture_content`; replay keys are never recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from contextvars import Token
from typing import Any

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.metrics import Histogram
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sidecar import __version__
from sidecar.config import TelemetrySettings
from sidecar.exchange.filters import Filter
from sidecar.exchange.state import Action, CallCheck, End, Exchange, ExchangeKey, McpFacts, Outcome, RepairOutcome
from sidecar.model import Reply, ToolCall, VerdictKind
from sidecar.telemetry.redact import redact, redact_text

# Explicit bucket boundaries the GenAI conventions give for durations (seconds).
DURATION_BUCKETS: tuple[float, ...] = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)
TOOL_DURATION_METRIC = "gen_ai.execute_tool.duration"
MCP_DURATION_METRIC = "mcp.client.operation.duration"
MAX_PENDING = 10_000
ABANDONED = "abandoned"

_propagator = TraceContextTextMapPropagator()


def error_type(check: CallCheck) -> str | None:
    """`error.type` for a refused call (None when allowed)."""
    verdict = check.verdict
    if verdict.allowed:
        return None
    if verdict.kind is VerdictKind.REJECT:
        return "unknown_tool" if verdict.status == "unknown_tool" else "schema_violation"
    return {
        VerdictKind.DENY: "policy_denied",
        VerdictKind.APPROVAL: "approval_required",
        VerdictKind.REPLAY: "replay",
    }.get(verdict.kind, "_OTHER")


def _otlp_url(endpoint: str, signal: str) -> str:
    """`http://collector:4318` → `…/v1/traces`; an endpoint already naming the path is kept."""
    base = endpoint.rstrip("/")
    for known in ("/v1/traces", "/v1/metrics"):
        if base.endswith(known):
            base = base[: -len(known)]
    return f"{base}/v1/{signal}"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value, default=str).decode()


def reply_attributes(reply: Reply) -> dict[str, Any]:
    """gen_ai.response.* and usage from a reply envelope, whichever dialect wrote it."""
    env = reply.envelope
    attrs: dict[str, Any] = {}
    if isinstance(env.get("model"), str):
        attrs["gen_ai.response.model"] = env["model"]
    if isinstance(env.get("id"), str):
        attrs["gen_ai.response.id"] = env["id"]
    usage = env.get("usage")
    if isinstance(usage, dict):
        for key, names in (
            ("gen_ai.usage.input_tokens", ("input_tokens", "prompt_tokens")),
            ("gen_ai.usage.output_tokens", ("output_tokens", "completion_tokens")),
        ):
            for name in names:
                if isinstance(usage.get(name), int):
                    attrs[key] = usage[name]
                    break
    reasons: list[str] = []
    if isinstance(env.get("stop_reason"), str):  # Anthropic
        reasons.append(env["stop_reason"])
    for choice in env.get("choices") or []:  # Chat Completions
        if isinstance(choice, dict) and isinstance(choice.get("finish_reason"), str):
            reasons.append(choice["finish_reason"])
    if env.get("object") == "response" and isinstance(env.get("status"), str):  # Responses
        reasons.append(env["status"])
    if reasons:
        attrs["gen_ai.response.finish_reasons"] = reasons
    return attrs


class _State:
    """Per-exchange tracing state (the exchange's `_TRACE` slot)."""

    __slots__ = ("ctx", "errored", "pending_verdicts", "replies", "round", "round_span", "span", "token")

    def __init__(self, span: Span, ctx: otel_context.Context, token: Token[otel_context.Context]) -> None:
        self.span = span
        self.ctx = ctx
        self.token = token
        self.round = 0
        self.round_span: Span | None = None
        self.replies = 0
        self.errored = False
        # call id -> the check of a call that is going to be delivered (verdict, reasons).
        self.pending_verdicts: dict[str, CallCheck] = {}


_TRACE: ExchangeKey[_State] = ExchangeKey("tracing")


class TracingFilter(Filter):
    """Spans and the tool duration metric; in the chain only when OTLP is configured.

    Best-effort, and first in the chain: its span is current while every later filter runs,
    so their log lines carry its trace and span ids.
    """

    name = "tracing"
    sets_context = True  # the request's span, current for the whole exchange

    def __init__(
        self,
        settings: TelemetrySettings,
        span_exporter: SpanExporter | None = None,
        span_processor: SpanProcessor | None = None,
        metric_reader: MetricReader | None = None,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self.capture_content = settings.capture_content
        self.max_pending = max_pending
        resource = Resource.create({"service.name": "agent-tool-sidecar", "service.version": __version__})
        self.provider = TracerProvider(resource=resource)
        if span_processor is None and span_exporter is None and settings.otlp_endpoint:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            span_exporter = OTLPSpanExporter(endpoint=_otlp_url(settings.otlp_endpoint, "traces"))
        if span_processor is None and span_exporter is not None:
            span_processor = BatchSpanProcessor(span_exporter)
        if span_processor is not None:
            self.provider.add_span_processor(span_processor)
        self.tracer = self.provider.get_tracer("sidecar.telemetry.tracing", __version__)

        self.meter_provider: MeterProvider | None = None
        self.tool_duration: Histogram | None = None
        self.mcp_duration: Histogram | None = None
        if metric_reader is None and settings.otlp_metrics and settings.otlp_endpoint:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            metric_reader = PeriodicExportingMetricReader(
                OTLPMetricExporter(endpoint=_otlp_url(settings.otlp_endpoint, "metrics"))
            )
        if metric_reader is not None:
            self.meter_provider = MeterProvider(metric_readers=[metric_reader], resource=resource)
            meter = self.meter_provider.get_meter("sidecar.telemetry.tracing", __version__)
            self.tool_duration = meter.create_histogram(
                TOOL_DURATION_METRIC,
                unit="s",
                description="Duration of tool call executions.",
                explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
            )
            self.mcp_duration = meter.create_histogram(
                MCP_DURATION_METRIC,
                unit="s",
                description="Duration of MCP requests the sidecar sent to a server, from the client's request on.",
                explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
            )
        # call id -> (span, perf_counter at delivery, attributes for the duration metric)
        self._pending: OrderedDict[str, tuple[Span, float, dict[str, str]]] = OrderedDict()

    # ---------------------------------------------------------------- lifecycle

    def force_flush(self) -> None:
        """Blocking: export everything buffered (call from a thread when inside a loop)."""
        self.provider.force_flush()
        if self.meter_provider is not None:
            self.meter_provider.force_flush()

    def shutdown(self) -> None:
        """Blocking: end pending tool spans as abandoned, flush and stop the exporters."""
        while self._pending:
            _, (span, _, _) = self._pending.popitem(last=False)
            self._abandon(span)
        self.provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.shutdown)

    # ---------------------------------------------------------------- helpers

    @staticmethod
    def _state(exchange: Exchange) -> _State | None:
        return exchange.get(_TRACE)

    async def on_reply(self, exchange: Exchange, reply: Reply) -> None:
        """The first reply belongs to the request span, later ones to the repair round."""
        state = self._state(exchange)
        if state is None:
            return
        state.replies += 1
        target = state.span if state.replies == 1 or state.round_span is None else state.round_span
        if target.is_recording():
            target.set_attributes(reply_attributes(reply))

    @staticmethod
    def _abandon(span: Span) -> None:
        span.set_attribute("sidecar.tool.outcome", ABANDONED)
        span.set_status(Status(StatusCode.ERROR, ABANDONED))
        span.end()

    def _check_attributes(self, check: CallCheck) -> dict[str, Any]:
        call, verdict = check.call, check.verdict
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
            "sidecar.verdict": verdict.kind.value,
            "sidecar.action": check.action.value,
            "sidecar.repair.round": check.round,
        }
        if verdict.status:
            attrs["sidecar.status"] = verdict.status
        reasons = list(check.policy_reasons or verdict.reasons)
        if reasons:
            attrs["sidecar.policy.reasons"] = [redact_text(r) for r in reasons]
        if verdict.errors:
            # Field names and problem kinds only: a problem text may quote an argument value.
            attrs["sidecar.argument_errors.fields"] = [e.field for e in verdict.errors]
            attrs["sidecar.argument_errors.kinds"] = [e.kind for e in verdict.errors]
        if verdict.guard:
            attrs["sidecar.guard"] = verdict.guard
        if check.observed:
            attrs["sidecar.observed_verdicts"] = [v.kind.value for v in check.observed]
        if check.replay.count:
            attrs["sidecar.replay.count"] = check.replay.count
        if check.approval.status != "none":
            attrs["sidecar.approval.status"] = check.approval.status
        if self.capture_content:
            arguments = _text(redact(call.arguments)) if call.arguments is not None else call.raw_arguments
            attrs["gen_ai.tool.call.arguments"] = redact_text(arguments)
        return attrs

    # ---------------------------------------------------------------- hooks

    async def on_request(self, exchange: Exchange) -> None:
        if exchange.mcp is not None:
            self._start_mcp(exchange, exchange.mcp)
            return
        parent = _propagator.extract(_HeaderGetter.carrier(exchange.headers))
        model = exchange.view.model or "unknown"
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": exchange.provider.value,
            "gen_ai.request.model": model,
            "sidecar.session.hash": _short_hash(exchange.session),
            "sidecar.session.source": exchange.session_source.value,
            "sidecar.dialect": exchange.dialect.name,
            "sidecar.stream": exchange.view.stream,
        }
        if exchange.url.host:
            attrs["server.address"] = exchange.url.host
        if exchange.url.port:
            attrs["server.port"] = exchange.url.port
        span = self.tracer.start_span(f"chat {model}", context=parent, kind=SpanKind.CLIENT, attributes=attrs)
        ctx = trace.set_span_in_context(span, parent)
        # Current for the rest of the handler, so log lines carry this span's ids.
        token = otel_context.attach(ctx)
        exchange.put(_TRACE, _State(span, ctx, token))
        self._inject(exchange, ctx)
        self._match_results(exchange)  # tool spans end inside the request that brings the result

    def _start_mcp(self, exchange: Exchange, mcp: McpFacts) -> None:
        """The MCP request span: a child of the model-path call it executes, if any."""
        executes = next(iter(exchange.earlier), None)
        pending = self._pending.get(executes) if executes is not None else None
        if pending is not None:
            parent = trace.set_span_in_context(pending[0])
        else:
            parent = _propagator.extract(dict(mcp.carrier) or _HeaderGetter.carrier(exchange.headers))
        attrs: dict[str, Any] = {
            "mcp.method.name": mcp.method,
            "jsonrpc.protocol.version": "2.0",
            "sidecar.mcp.server": mcp.server,
            "sidecar.session.hash": _short_hash(exchange.session),
        }
        if mcp.request_id is not None:
            attrs["jsonrpc.request.id"] = str(mcp.request_id)
        if mcp.protocol_version:
            attrs["mcp.protocol.version"] = mcp.protocol_version
        if mcp.target is not None:
            attrs["gen_ai.operation.name"] = "execute_tool"
            attrs["gen_ai.tool.name"] = mcp.target
        if executes is not None:
            attrs["gen_ai.tool.call.id"] = executes
        if exchange.url.host:
            attrs["server.address"] = exchange.url.host
        if exchange.url.port:
            attrs["server.port"] = exchange.url.port
        name = f"{mcp.method} {mcp.target}" if mcp.target else mcp.method
        span = self.tracer.start_span(name, context=parent, kind=SpanKind.CLIENT, attributes=attrs)
        ctx = trace.set_span_in_context(span, parent)
        token = otel_context.attach(ctx)
        exchange.put(_TRACE, _State(span, ctx, token))
        carrier: dict[str, str] = {}
        _propagator.inject(carrier, context=ctx)
        exchange.request = exchange.dialect.with_trace_context(exchange.request, carrier)

    def _mcp_checked(self, state: _State, checks: list[CallCheck]) -> None:
        """The MCP span is the call's execute_tool span: a refusal marks it."""
        for check in checks:
            state.span.set_attributes(self._check_attributes(check))
            kind = error_type(check)
            if kind is not None and check.action is not Action.OBSERVED:
                state.span.set_attribute("error.type", kind)
                state.span.set_status(Status(StatusCode.ERROR, check.verdict.summary()[:200]))
                state.errored = True

    async def on_answered(self, exchange: Exchange) -> None:
        """An MCP result: it ends the execute_tool span of the model-path call it executes."""
        self._match_results(exchange)
        state = self._state(exchange)
        if state is None:
            return
        for result in exchange.view.results:
            if result.is_error:
                state.span.set_attribute("error.type", "tool_error")
                state.span.set_status(Status(StatusCode.ERROR, "tool_error"))
                state.errored = True
            elif self.capture_content:
                state.span.set_attribute("gen_ai.tool.call.result", _text(result.content))

    @staticmethod
    def _inject(exchange: Exchange, ctx: otel_context.Context) -> None:
        for name in ("traceparent", "tracestate"):
            exchange.headers.popall(name, None)
        carrier: dict[str, str] = {}
        _propagator.inject(carrier, context=ctx)
        exchange.headers.update(carrier)

    def _match_results(self, exchange: Exchange) -> None:
        """End the spans of delivered calls whose results this request carries."""
        now = time.perf_counter()
        for result in exchange.view.results:
            entry = self._pending.pop(result.call_id, None)
            if entry is None:
                continue  # an old result repeated in history, or a call this process never saw
            span, delivered_at, metric_attrs = entry
            seconds = max(0.0, now - delivered_at)
            span.set_attribute("sidecar.tool.outcome", "error" if result.is_error else "ok")
            if self.capture_content:
                span.set_attribute("gen_ai.tool.call.result", redact_text(_text(result.content)))
            if result.is_error:
                span.set_attribute("error.type", "tool_error")
                span.set_status(Status(StatusCode.ERROR, "tool_error"))
                metric_attrs = {**metric_attrs, "error.type": "tool_error"}
            span.end()
            if self.tool_duration is not None:
                self.tool_duration.record(seconds, metric_attrs)

    async def on_checked(self, exchange: Exchange, checks: list[CallCheck]) -> None:
        state = self._state(exchange)
        if state is None:
            return
        if exchange.mcp is not None:
            self._mcp_checked(state, checks)
            return
        # A new batch of checks closes the repair round whose reply they judged.
        if state.round_span is not None:
            state.round_span.end()
            state.round_span = None
        parent_ctx = state.ctx
        if any(c.action is Action.REPAIR for c in checks):
            state.round += 1
            model = exchange.view.model or "unknown"
            state.round_span = self.tracer.start_span(
                f"repair_round {state.round}",
                context=state.ctx,
                kind=SpanKind.CLIENT,
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": exchange.provider.value,
                    "gen_ai.request.model": model,
                    "sidecar.repair.round": state.round,
                    "sidecar.repair.refused_calls": sum(1 for c in checks if c.action is Action.REPAIR),
                },
            )
            # The repair request upstream carries the round's context.
            self._inject(exchange, trace.set_span_in_context(state.round_span, state.ctx))
        for check in checks:
            if check.action in (Action.ALLOWED, Action.OBSERVED):
                state.pending_verdicts[check.call.id] = check
                continue
            # Refused (repair, blocked) or not run: never reaches the agent, an instant span.
            span = self.tracer.start_span(
                f"execute_tool {check.call.name}",
                context=parent_ctx,
                kind=SpanKind.INTERNAL,
                attributes=self._check_attributes(check),
            )
            kind = error_type(check)
            if kind is not None:
                span.set_attribute("error.type", kind)
                span.set_status(Status(StatusCode.ERROR, redact_text(check.verdict.summary()[:200])))
            span.end()

    async def on_delivered(self, exchange: Exchange, reply: Reply, calls: list[ToolCall]) -> None:
        state = self._state(exchange)
        if state is None:
            return
        now = time.perf_counter()
        for call in calls:
            check = state.pending_verdicts.pop(call.id, None)
            attrs = (
                self._check_attributes(check)
                if check is not None
                else {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": call.name,
                    "gen_ai.tool.call.id": call.id,
                    "gen_ai.tool.type": "function",
                    "sidecar.verdict": "allow",
                }
            )
            if check is not None:
                observed = error_type(check)
                if observed is not None:  # observe mode: delivered despite a refusal
                    attrs["sidecar.observed_error_type"] = observed
            span = self.tracer.start_span(
                f"execute_tool {call.name}", context=state.ctx, kind=SpanKind.INTERNAL, attributes=attrs
            )
            metric_attrs = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": call.name,
                "gen_ai.provider.name": exchange.provider.value,
            }
            self._pending.pop(call.id, None)
            self._pending[call.id] = (span, now, metric_attrs)
            while len(self._pending) > self.max_pending:
                _, (oldest, _, _) = self._pending.popitem(last=False)
                self._abandon(oldest)

    async def on_repaired(self, exchange: Exchange, outcome: RepairOutcome) -> None:
        state = self._state(exchange)
        if state is None:
            return
        state.span.set_attribute("sidecar.repair.outcome", outcome.value)
        if state.round_span is not None and outcome is RepairOutcome.EXHAUSTED:
            state.round_span.set_attribute("sidecar.repair.outcome", outcome.value)

    async def on_upstream(self, exchange: Exchange, status: int | None, seconds: float) -> None:
        state = self._state(exchange)
        if state is None:
            return
        target = state.round_span if state.round_span is not None else state.span
        if target.is_recording():
            if status is not None:
                target.set_attribute("http.response.status_code", status)
            if status is None or status >= 400 or status < 200:
                target.set_attribute("error.type", str(status) if status is not None else "upstream_unreachable")
                target.set_status(Status(StatusCode.ERROR))
                state.errored = state.errored or target is state.span

    async def on_done(self, exchange: Exchange, end: End) -> None:
        state = exchange.pop(_TRACE)
        if state is None:
            return
        if state.round_span is not None:
            state.round_span.end()
        span = state.span
        # A thread's first turn learns its session with the reply: the span says the final one.
        span.set_attribute("sidecar.session.hash", _short_hash(exchange.session))
        span.set_attribute("sidecar.session.source", exchange.session_source.value)
        if exchange.mcp is not None:
            self._end_mcp(exchange, exchange.mcp, state, end)
            return
        span.set_attribute("sidecar.repair.rounds", exchange.repair_rounds)
        span.set_attribute("sidecar.overhead_ms", round(end.overhead_s * 1000, 3))
        if end.status >= 400 and not state.errored:
            span.set_attribute("error.type", str(end.status))
            span.set_status(Status(StatusCode.ERROR))
        elif end.reason is not None and not state.errored:
            span.set_attribute("error.type", "sidecar_incomplete")
            span.set_status(Status(StatusCode.ERROR, end.reason))
        span.end()
        with contextlib.suppress(Exception):  # a foreign context: nothing to restore
            otel_context.detach(state.token)

    def _end_mcp(self, exchange: Exchange, mcp: McpFacts, state: _State, end: End) -> None:
        span = state.span
        span.set_attribute("sidecar.overhead_ms", round(end.overhead_s * 1000, 3))
        if end.outcome is Outcome.FAILED and not state.errored:
            span.set_attribute("error.type", end.reason or str(end.status))
            span.set_status(Status(StatusCode.ERROR, end.reason))
        recorded = getattr(span, "attributes", None)  # the SDK span's attributes, before it ends
        attrs: Mapping[str, Any] = recorded if isinstance(recorded, Mapping) else {}
        span.end()
        with contextlib.suppress(Exception):
            otel_context.detach(state.token)
        if self.mcp_duration is not None:
            metric_attrs = {"mcp.method.name": mcp.method}
            if mcp.target is not None:
                metric_attrs["gen_ai.tool.name"] = mcp.target
            failure = attrs.get("error.type")
            if isinstance(failure, str):
                metric_attrs["error.type"] = failure
            self.mcp_duration.record(time.perf_counter() - exchange.started, metric_attrs)


class _HeaderGetter:
    @staticmethod
    def carrier(headers: Mapping[str, str]) -> dict[str, str]:
        """traceparent/tracestate from the agent's headers, lower-cased for the propagator."""
        out: dict[str, str] = {}
        for name in ("traceparent", "tracestate"):
            value = headers.get(name)
            if value is not None:
                out[name] = value
        return out


def _short_hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


__all__: Sequence[str] = ("DURATION_BUCKETS", "TOOL_DURATION_METRIC", "TracingFilter")
