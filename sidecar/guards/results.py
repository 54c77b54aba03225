"""Tool results matched to the calls they answer: latency, outcome, size and anomalies.

Each result in an agent's request (only those after the latest model turn, see
`RequestView.results`) is looked up in the state store by call id. The ledger knows when the
call reached the agent, so the request's arrival gives the tool's latency; the result is then
remembered there, so a later replay of the call can be answered from it.

A result the ledger does not know (after a restart, an expired entry, a replica with memory
state) is counted without a latency: that is not an error. Structural oddities are counted
as anomalies and kept on the exchange (`exchange.scratch["tool_results"]`) for the policy's
`tool_result` phase.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from sidecar.addons import Addon
from sidecar.dialects.base import compact
from sidecar.exchange.state import Exchange
from sidecar.model import ToolResult
from sidecar.state import StateStore, StateUnavailable
from sidecar.telemetry.metrics import Metrics

log = logging.getLogger("sidecar.results")

SCRATCH_KEY = "tool_results"

# Anomaly kinds (the `kind` label of sidecar_tool_result_anomalies_total).
UNKNOWN_CALL = "unknown_call"  # answers no call the model made in this conversation
DUPLICATE_RESULT = "duplicate_result"  # a second result for the same call in one request
TOOL_NAME_MISMATCH = "tool_name_mismatch"  # the result names another tool than its call
CALL_ID_REUSED = "call_id_reused"  # the model delivered a known call id with other arguments

# A result whose JSON says one of these is the tool reporting failure, not success.
ERROR_STATUSES = frozenset({"error", "invalid_arguments", "failed"})
PARTIAL_STATUSES = frozenset({"partial", "incomplete", "truncated"})
# Results above this size are not parsed for a status (the cost would be paid on every turn).
_MAX_STATUS_PARSE = 1024 * 1024


@dataclass(slots=True)
class ToolResultRecord:
    """One tool result as the policy's `tool_result` phase sees it.

    `outcome` is ok, error or partial (partial counts as `ok` in the ok/error metric: the tool
    ran and returned). `known`: matched to a delivered call in the ledger. `resent`: the
    ledger already had this call's result (an agent retrying a request): not counted again.
    """

    call_id: str
    tool: str | None
    is_error: bool
    bytes: int
    latency_s: float | None
    anomalies: list[str] = field(default_factory=list)
    outcome: str = "ok"
    known: bool = False
    resent: bool = False


def result_text(content: Any) -> str:
    """The result as one string: text blocks joined, anything else as compact JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(b, dict) and b.get("type") in ("text", "input_text", "output_text") for b in content
    ):
        return "".join(str(b.get("text", "")) for b in content)
    return compact(content)


def json_status(text: str) -> str | None:
    """`status` of a JSON object result, lower-cased; None when there is none."""
    if len(text) > _MAX_STATUS_PARSE or not text.lstrip().startswith("{"):
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    status = value.get("status") if isinstance(value, dict) else None
    return status.lower() if isinstance(status, str) else None


def outcome_of(result: ToolResult, text: str) -> str:
    """error (`is_error`, or a JSON status saying so), partial, or ok."""
    if result.is_error:
        return "error"
    status = json_status(text)
    if status in ERROR_STATUSES:
        return "error"
    if status in PARTIAL_STATUSES:
        return "partial"
    return "ok"


class ResultMatcher(Addon):
    """On each agent request: match its tool results, feed metrics, remember results."""

    name = "results"

    def __init__(self, store: StateStore, metrics: Metrics, clock: Callable[[], float] | None = None) -> None:
        self.store = store
        self.metrics = metrics
        self.clock = clock or store.limits.clock

    def _state_error(self, exc: StateUnavailable) -> None:
        self.metrics.state_error(self.store.name)
        log.warning("state backend unavailable while matching tool results: %s", exc)

    async def request(self, exchange: Exchange) -> None:
        view = exchange.view
        if not view.results:
            return
        # When the request arrived (wall clock), not when this hook runs.
        arrived = self.clock() - (time.perf_counter() - exchange.started)
        echoed = {c.call_id: c.name for c in view.echoed_calls}
        # With `previous_response_id` the calls live at the provider: absence proves nothing.
        history_complete = not (view.previous_response_id and exchange.dialect.server_side_state)
        records: list[ToolResultRecord] = []
        seen: set[str] = set()
        for result in view.results:
            records.append(await self._match(exchange, result, echoed, history_complete, seen, arrived))
        exchange.scratch[SCRATCH_KEY] = records

    async def _match(
        self,
        exchange: Exchange,
        result: ToolResult,
        echoed: dict[str, str],
        history_complete: bool,
        seen: set[str],
        arrived: float,
    ) -> ToolResultRecord:
        anomalies: list[str] = []
        duplicate = result.call_id in seen
        seen.add(result.call_id)
        if duplicate:
            anomalies.append(DUPLICATE_RESULT)
        called_as = echoed.get(result.call_id)
        if called_as is None and history_complete:
            anomalies.append(UNKNOWN_CALL)
        text = result_text(result.content)
        outcome = outcome_of(result, text)
        call = None
        if not duplicate:
            try:
                call = await self.store.get_call(exchange.session, result.call_id)
            except StateUnavailable as exc:
                self._state_error(exc)
        tool = call.tool if call is not None else called_as or result.tool_name
        expected = called_as or (call.tool if call is not None else None)
        if result.tool_name and expected and result.tool_name != expected:
            anomalies.append(TOOL_NAME_MISMATCH)
        resent = call is not None and call.result_at is not None
        latency = max(0.0, arrived - call.delivered_at) if call is not None and not resent else None
        if not duplicate and not resent:
            self.metrics.tool_result(tool or "", "error" if outcome == "error" else "ok", latency)
            if call is not None:
                try:
                    await self.store.record_result(exchange.session, result.call_id, text, outcome == "error", arrived)
                except StateUnavailable as exc:
                    self._state_error(exc)
        for kind in anomalies:
            self.metrics.tool_result_anomaly(kind)
        return ToolResultRecord(
            call_id=result.call_id,
            tool=tool,
            is_error=outcome == "error",
            bytes=result.size,
            latency_s=latency,
            anomalies=anomalies,
            outcome=outcome,
            known=call is not None,
            resent=resent,
        )
