"""Result decisions (phase `tool_result`): what the policy says about a tool result once it
is matched to its call.

Result matching (another addon) leaves one record per matched result on
`exchange.scratch["tool_results"]`: call_id, tool, is_error, bytes, latency_s, anomalies
(dicts or objects with those attributes). This addon asks `data.sidecar.result_decision`
for each, then logs and counts the answer. It does not rewrite the request: withholding a
result needs a dialect method to replace a result's content (not there yet), so a
"withhold" decision is logged with `applied: false`.

It looks on the `request` event and again on `upstream`, so it works whichever order the
addons are registered in; each result is evaluated once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from sidecar.exchange.state import Exchange
from sidecar.policy.addon import PolicyAddon
from sidecar.policy.engine import Decision
from sidecar.policy.inputs import base_input, session_counts
from sidecar.telemetry.logs import log_event

log = logging.getLogger("sidecar.policy")

RESULTS_KEY = "tool_results"
DECISIONS_KEY = "policy.result_decisions"


def _field(record: Any, name: str, default: Any = None) -> Any:
    if isinstance(record, Mapping):
        return record.get(name, default)
    return getattr(record, name, default)


class ResultPolicy(PolicyAddon):
    name = "policy_results"

    async def request(self, exchange: Exchange) -> None:
        await self.evaluate(exchange)

    async def upstream(self, exchange: Exchange, status: int | None, seconds: float) -> None:
        await self.evaluate(exchange)

    async def evaluate(self, exchange: Exchange) -> dict[str, Decision]:
        """Decide every matched result not decided yet; returns {call_id: decision} so far."""
        decided: dict[str, Decision] = exchange.scratch.setdefault(DECISIONS_KEY, {})
        records = exchange.scratch.get(RESULTS_KEY)
        if self.mode == "off" or not records:
            return decided
        for record in records:
            call_id = str(_field(record, "call_id", ""))
            if call_id in decided or _field(record, "resent", False):
                continue  # decided already (here, or when the agent first sent it)
            document = await self.input_for(exchange, record)
            started = time.perf_counter()
            try:
                decision = await self.engine.result_decision(document)
            except Exception as exc:  # never break the request over a result verdict
                log.exception("policy engine raised on a result")
                decision = Decision(True, [], error=f"{type(exc).__name__}: {exc}")
            seconds = time.perf_counter() - started
            if decision is None:  # nothing to say: not a decision, only timed
                self.metrics.policy_evaluation.labels(self.engine.name).observe(seconds)
                decided[call_id] = Decision(True)
                continue
            decided[call_id] = decision
            self.metrics.policy_decision(decision.outcome, self.engine.name, seconds)
            log_event(
                "policy_result_decision",
                level=logging.INFO if decision.allow and decision.error is None else logging.WARNING,
                log=log,
                session=exchange.session,
                tool=document["tool"]["name"],
                call_id=call_id,
                decision=decision.outcome,
                reasons=decision.reasons,
                error=decision.error,
                mode=self.mode,
                applied=False,
            )
        return decided

    async def input_for(self, exchange: Exchange, record: Any) -> dict[str, Any]:
        """The `tool_result` input: the call's part of the contract plus `result`."""
        tool = str(_field(record, "tool", "") or "")
        declaration = exchange.view.declarations.get(tool)
        document = base_input(
            exchange, "tool_result", self.agent, await session_counts(exchange, self.state), self.clock.now()
        )
        args = _field(record, "args")
        document["tool"] = {
            "name": tool,
            "declared": declaration is not None,
            "schema_hash": declaration.schema_hash if declaration is not None else "",
        }
        document["call"] = {
            "id": str(_field(record, "call_id", "")),
            "args": args if isinstance(args, dict) else {},
            "args_hash": str(_field(record, "args_hash", "") or ""),
            "index": 0,
            "parallel": 1,
        }
        document["result"] = {
            "is_error": bool(_field(record, "is_error", False)),
            "bytes": int(_field(record, "bytes", 0) or 0),
            "anomalies": list(_field(record, "anomalies", None) or []),
            "latency_s": _field(record, "latency_s"),
        }
        return document
