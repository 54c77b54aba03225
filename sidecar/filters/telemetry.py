"""The telemetry filter: turns exchange events into metrics, log lines and rejection records.

Best-effort: a metric or a log line that fails never changes what the agent gets.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from sidecar.exchange.filters import Filter, pause
from sidecar.exchange.state import Action, CallCheck, End, Exchange, ExchangeKey, RepairOutcome, ToolResultRecord
from sidecar.filters.results import DUPLICATE_RESULT
from sidecar.model import PerToolList, Provider, Reply, SessionSource, Verdict
from sidecar.telemetry.batched import Batched
from sidecar.telemetry.logs import log_event, log_event_at, trace_ids
from sidecar.telemetry.metrics import Metrics
from sidecar.telemetry.rejection_log import RejectionLog

log = logging.getLogger("sidecar.proxy")

# Tools whose calls were refused in this exchange's repair rounds (per-tool repair counts).
_REPAIRED: ExchangeKey[set[str]] = ExchangeKey("telemetry.repaired_tools")


@dataclass(slots=True)
class _Ended:
    """An exchange that ended, until its request line is written (in a batch): what the line
    tells, read at `on_done`. Not the exchange itself, so the exchange (its parsed request and
    replies) is freed when it ends, not in the batch (sidecar/telemetry/batched.py)."""

    exchange_id: str
    provider: Provider
    session: str
    session_source: SessionSource
    dialect: str
    model: str
    repair_rounds: int
    end: End
    at: float
    trace: dict[str, str]


class TelemetryFilter(Filter):
    name = "telemetry"

    def __init__(self, metrics: Metrics, rejections: RejectionLog) -> None:
        self.metrics = metrics
        self.rejections = rejections
        # Tool lists whose names were admitted already: admitting is idempotent and the label
        # set only grows, so a list seen before has nothing left to admit.
        self._admitted: PerToolList[bool] = PerToolList()
        # The request line and overhead sample of ended exchanges, in batches
        # (sidecar/telemetry/batched.py): before every metrics read, and when the sidecar closes.
        self._ended: Batched[_Ended] = Batched(metrics, self._request_done, self._failed)

    async def on_request(self, ex: Exchange) -> None:
        declared = ex.view.declarations
        if not self._admitted.get(declared):
            for name in declared:
                self.metrics.declare_tool(name)
            self._admitted.put(declared, True)
        for name in ex.view.server_tools:  # server calls are counted by tool too
            self.metrics.declare_tool(name)

    async def on_result(self, ex: Exchange, record: ToolResultRecord) -> None:
        if DUPLICATE_RESULT not in record.anomalies and not record.resent:
            outcome = "error" if record.outcome == "error" else "ok"
            path = ex.path_of(record.call_id).value
            self.metrics.tool_result(record.tool or "", outcome, record.latency_s, path)
        for kind in record.anomalies:
            self.metrics.tool_result_anomaly(kind, record.tool)

    async def on_reply(self, ex: Exchange, reply: Reply) -> None:
        if reply.removed_calls:
            log_event(
                "choice_calls_removed",
                log=log,
                session=ex.session,
                session_source=ex.session_source.value,
                calls=reply.removed_calls,
            )

    async def on_checked(self, ex: Exchange, checks: list[CallCheck]) -> None:
        provider, path = ex.provider.value, ex.path.value
        for position, check in enumerate(checks):
            await pause(position)
            call, verdict = check.call, check.verdict
            if check.earlier is None or not verdict.allowed:
                # The MCP execution of a call the model path delivered was counted there.
                self.metrics.tool_call(call.name, provider, verdict.kind.value, path)
            if verdict.allowed:
                # Refusals a shadow-mode policy only observed: logged so a rollout can be judged.
                for observed in check.observed:
                    self._log_refusal(ex, check, observed, "shadow")
                if check.action is Action.WITHDRAWN:
                    self._log_refusal(ex, check, verdict, check.action.value)
                continue
            if check.action is Action.REPAIR:  # per-tool repair counts for /v1/status
                ex.setdefault(_REPAIRED, set).add(call.name)
            for error in verdict.errors:
                self.metrics.argument_rejection(call.name, error.kind, path)
            self._log_refusal(ex, check, verdict, check.action.value)

    def _log_refusal(self, ex: Exchange, check: CallCheck, verdict: Verdict, action: str) -> None:
        call = check.call
        declaration = ex.view.declarations.get(call.name)
        self.rejections.log_rejection(
            session=ex.session,
            session_source=ex.session_source.value,
            provider=ex.provider.value,
            model=ex.view.model,
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
            session=ex.session,
            session_source=ex.session_source.value,
            tool=call.name,
            call_id=call.id,
            verdict=verdict.kind.value,
            status=verdict.status,
            action=action,
            round=check.round,
        )

    async def on_repaired(self, ex: Exchange, outcome: RepairOutcome) -> None:
        self.metrics.repair_round(outcome.value, sorted(ex.pop(_REPAIRED) or ()))
        log_event(
            "repair_round",
            session=ex.session,
            session_source=ex.session_source.value,
            outcome=outcome.value,
            rounds=ex.repair_rounds,
        )

    async def on_upstream(self, ex: Exchange, status: int | None, seconds: float) -> None:
        self.metrics.upstream(ex.provider.value, status, seconds)

    async def on_done(self, ex: Exchange, end: End) -> None:
        self._ended.add(
            _Ended(
                ex.id,
                ex.provider,
                ex.session,
                ex.session_source,
                ex.dialect.name,
                ex.view.model,
                ex.repair_rounds,
                end,
                time.time(),
                trace_ids(),
            )
        )

    def _request_done(self, ended: _Ended) -> None:
        end = ended.end
        provider = ended.provider.value
        self.metrics.overhead(provider, end.stream, end.overhead_s)
        log_event_at(
            ended.at,
            ended.trace,
            "request",
            level=logging.INFO if end.reason is None else logging.WARNING,
            session=ended.session,
            session_source=ended.session_source.value,
            provider=provider,
            dialect=ended.dialect,
            model=ended.model,
            status=end.status,
            outcome=end.outcome.value,
            stream=end.stream,
            repair_rounds=ended.repair_rounds,
            overhead_ms=round(end.overhead_s * 1000, 3),
            error=end.reason,
        )

    def _failed(self, ended: _Ended) -> None:
        log.exception("the request line of exchange %s failed", ended.exchange_id)
        self.metrics.filter_error(self.name, "on_done", critical=False)
