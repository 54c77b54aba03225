"""Tool results matched to the calls they answer: latency, outcome, size and anomalies.

Each result in an agent's request (only those after the latest model turn, see
`RequestView.results`) is looked up in the state store by call id. The ledger knows when the
call reached the agent, so the request's arrival gives the tool's latency; the result is then
remembered there, so a later replay of the call can be answered from it.

A result the ledger does not know (after a restart, an expired entry, a replica with memory
state) has no latency: that is not an error. Structural oddities are anomalies. The records go
on the exchange (`ex.results`): every filter then hears each one (`on_result`: metrics,
traces, the policy's `tool_result` phase). Best-effort: a result the ledger cannot remember
weakens a later replay answer (no result to quote), never a guarantee.

A result is remembered when the chain hears it (`on_result`, after every `on_request`): by
then the result policy may have withheld or redacted it, and the ledger remembers what the
model got (`record.forwarded`), so a replay answer never quotes what was withheld.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from sidecar.dialects.base import compact
from sidecar.exchange.filters import Filter
from sidecar.exchange.state import Exchange, ExchangeKey, ToolResultRecord
from sidecar.filters.replay import CALL_ID_REUSED
from sidecar.model import ToolResult
from sidecar.state import CallRecord, StateStore, StateUnavailable

log = logging.getLogger("sidecar.results")

# Anomaly kinds (the `kind` label of sidecar_tool_result_anomalies_total).
UNKNOWN_CALL = "unknown_call"  # answers no call the model made in this conversation
DUPLICATE_RESULT = "duplicate_result"  # a second result for the same call in one request
TOOL_NAME_MISMATCH = "tool_name_mismatch"  # the result names another tool than its call
__all__ = ["CALL_ID_REUSED", "DUPLICATE_RESULT", "TOOL_NAME_MISMATCH", "UNKNOWN_CALL", "ResultMatcher"]

# A result whose JSON says one of these is the tool reporting failure, not success.
ERROR_STATUSES = frozenset({"error", "invalid_arguments", "failed"})
PARTIAL_STATUSES = frozenset({"partial", "incomplete", "truncated"})
# Results above this size are not parsed for a status (the cost would be paid on every turn).
_MAX_STATUS_PARSE = 1024 * 1024


@dataclass(slots=True)
class _Remember:
    """A matched result the ledger is to remember once the chain has heard it."""

    session: str
    text: str
    at: float


# By id() of the record (records live as long as the exchange).
_TO_REMEMBER: ExchangeKey[dict[int, _Remember]] = ExchangeKey("results.to_remember")


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


class ResultMatcher(Filter):
    """On each agent request: match its tool results to their calls, remember the results."""

    name = "results"

    def __init__(self, store: StateStore, clock: Callable[[], float] | None = None) -> None:
        self.store = store
        self.clock = clock or store.limits.clock

    async def on_request(self, exchange: Exchange) -> None:
        if exchange.view.results:
            # When the request arrived (wall clock), not when this hook runs.
            await self._match_all(exchange, self.clock() - (time.perf_counter() - exchange.started))

    async def on_answered(self, exchange: Exchange) -> None:
        """An MCP server's `tools/call` result: matched to its call as it arrives."""
        if exchange.view.results:
            await self._match_all(exchange, self.clock())

    async def _match_all(self, exchange: Exchange, arrived: float) -> None:
        view = exchange.view
        echoed = {c.call_id: c.name for c in view.echoed_calls}
        # With `previous_response_id` or a conversation the calls live at the provider: absence
        # proves nothing. (A thread continuation's previous calls are restored as echoed calls.)
        held = view.previous_response_id or view.conversation
        history_complete = not (held and exchange.dialect.server_side_state)
        calls: dict[str, CallRecord] = {}
        with contextlib.suppress(StateUnavailable):  # counted by the store; matched by history alone
            # One read for every result (one round trip to Redis, one SQLite thread hop).
            calls = await self.store.get_calls(exchange.session, list(dict.fromkeys(r.call_id for r in view.results)))
        records: list[ToolResultRecord] = []
        seen: set[str] = set()
        for result in view.results:
            records.append(self._match(exchange, result, echoed, history_complete, seen, arrived, calls))
        exchange.results = records

    def _match(
        self,
        exchange: Exchange,
        result: ToolResult,
        echoed: dict[str, str],
        history_complete: bool,
        seen: set[str],
        arrived: float,
        calls: dict[str, CallRecord],
    ) -> ToolResultRecord:
        anomalies: list[str] = list(result.anomalies)
        duplicate = result.call_id in seen
        seen.add(result.call_id)
        if duplicate:
            anomalies.append(DUPLICATE_RESULT)
        called_as = echoed.get(result.call_id)
        if called_as is None and history_complete:
            anomalies.append(UNKNOWN_CALL)
        text = result_text(result.content)
        outcome = outcome_of(result, text)
        call = None if duplicate else calls.get(result.call_id)
        tool = call.tool if call is not None else called_as or result.tool_name
        expected = called_as or (call.tool if call is not None else None)
        if result.tool_name and expected and result.tool_name != expected:
            anomalies.append(TOOL_NAME_MISMATCH)
        resent = call is not None and call.result_at is not None
        latency = max(0.0, arrived - call.delivered_at) if call is not None and not resent else None
        record = ToolResultRecord(
            call_id=result.call_id,
            tool=tool,
            is_error=outcome == "error",
            bytes=result.size,
            latency_s=latency,
            anomalies=anomalies,
            outcome=outcome,
            known=call is not None,
            resent=resent,
            args_hash=call.args_hash if call is not None else "",
        )
        if not duplicate and not resent and call is not None:
            exchange.setdefault(_TO_REMEMBER, dict)[id(record)] = _Remember(exchange.session, text, arrived)
        return record

    async def on_result(self, exchange: Exchange, record: ToolResultRecord) -> None:
        pending = exchange.get(_TO_REMEMBER)
        remember = pending.pop(id(record), None) if pending else None
        if remember is None:
            return
        text = remember.text if record.forwarded is None else record.forwarded
        with contextlib.suppress(StateUnavailable):  # counted by the store; a replay answer then quotes none
            await self.store.record_result(remember.session, record.call_id, text, record.is_error, remember.at)
