"""The telemetry addon: turns exchange events into metrics, log lines and rejection records."""

from __future__ import annotations

from collections import OrderedDict

from sidecar.addons import Addon
from sidecar.exchange.state import CallCheck, Exchange
from sidecar.model import Verdict
from sidecar.telemetry.logs import log_event
from sidecar.telemetry.metrics import Metrics
from sidecar.telemetry.rejection_log import RejectionLog

_SCHEMA_MEMORY = 4096
_REPAIR_TOOLS = "telemetry.repair_tools"


class TelemetryAddon(Addon):
    name = "telemetry"

    def __init__(self, metrics: Metrics, rejections: RejectionLog) -> None:
        self.metrics = metrics
        self.rejections = rejections
        # Last schema hash seen per tool, to count declaration changes (bounded LRU).
        self._schemas: OrderedDict[str, str] = OrderedDict()

    async def request(self, exchange: Exchange) -> None:
        for name, declaration in exchange.view.declarations.items():
            self.metrics.declare_tool(name)
            previous = self._schemas.get(name)
            if previous is not None and previous != declaration.schema_hash:
                self.metrics.schema_change(name)
            self._schemas[name] = declaration.schema_hash
            self._schemas.move_to_end(name)
        while len(self._schemas) > _SCHEMA_MEMORY:
            self._schemas.popitem(last=False)
        for tool in exchange.hidden_tools:
            self.metrics.tool_hidden(tool)

    async def checked(self, exchange: Exchange, checks: list[CallCheck]) -> None:
        provider = exchange.provider.value
        for check in checks:
            call, verdict = check.call, check.verdict
            self.metrics.tool_call(call.name, provider, verdict.kind.value)
            if verdict.allowed:
                # Refusals a shadow-mode policy only observed: logged so a rollout can be judged.
                for observed in check.observed:
                    self._log_refusal(exchange, check, observed, "shadow")
                continue
            if check.action == "repair":  # per-tool repair counts for /v1/status
                exchange.scratch.setdefault(_REPAIR_TOOLS, set()).add(call.name)
            for error in verdict.errors:
                self.metrics.argument_rejection(call.name, error.kind)
            self._log_refusal(exchange, check, verdict, check.action)

    def _log_refusal(self, exchange: Exchange, check: CallCheck, verdict: Verdict, action: str) -> None:
        call = check.call
        declaration = exchange.view.declarations.get(call.name)
        self.rejections.log_rejection(
            session=exchange.session,
            provider=exchange.provider.value,
            model=exchange.view.model,
            tool=call.name,
            call_id=call.id,
            arguments=call.arguments if call.arguments is not None else call.raw_arguments,
            verdict=verdict,
            action=action,
            repair_round=check.round,
            schema=declaration.schema if declaration else None,
            guard=verdict.guard,
        )
        log_event(
            "verdict",
            session=exchange.session,
            tool=call.name,
            call_id=call.id,
            verdict=verdict.kind.value,
            status=verdict.status,
            action=action,
            round=check.round,
        )

    async def repaired(self, exchange: Exchange, outcome: str) -> None:
        self.metrics.repair_round(outcome, sorted(exchange.scratch.pop(_REPAIR_TOOLS, ())))
        log_event("repair_round", session=exchange.session, outcome=outcome, rounds=exchange.repair_rounds)

    async def upstream(self, exchange: Exchange, status: int | None, seconds: float) -> None:
        self.metrics.upstream(exchange.provider.value, status, seconds)

    async def done(self, exchange: Exchange, status: int, overhead_s: float, stream: bool) -> None:
        self.metrics.overhead(exchange.provider.value, stream, overhead_s)
        log_event(
            "request",
            session=exchange.session,
            provider=exchange.provider.value,
            dialect=exchange.dialect.name,
            model=exchange.view.model,
            status=status,
            stream=stream,
            repair_rounds=exchange.repair_rounds,
            overhead_ms=round(overhead_s * 1000, 3),
        )
