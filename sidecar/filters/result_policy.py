"""Result decisions (phase `tool_result`): what the policy says about a tool result once it
is matched to its call.

The results filter matches each tool result of the agent's request to its call
(`ex.results`); this filter asks `data.sidecar.result_decision` for each (`on_result`), then
logs and counts the answer. It does not rewrite the request: withholding a result is not
implemented here, so a "withhold" decision is logged with `applied: false`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sidecar.exchange.state import Exchange, ExchangeKey, ToolResultRecord
from sidecar.filters.policy import PolicyPhase
from sidecar.policy.engine import Decision
from sidecar.telemetry.logs import log_event

log = logging.getLogger("sidecar.policy")

_DECIDED: ExchangeKey[dict[str, Decision]] = ExchangeKey("policy.result_decisions")


class ResultPolicy(PolicyPhase):
    name = "policy_results"

    async def on_result(self, ex: Exchange, record: ToolResultRecord) -> None:
        await self.evaluate(ex, record)

    async def evaluate(self, ex: Exchange, record: ToolResultRecord) -> Decision | None:
        """Decide one matched result (once per exchange and call; resent results are not)."""
        decided = ex.setdefault(_DECIDED, dict)
        if self.mode == "off" or record.call_id in decided or record.resent:
            return decided.get(record.call_id)
        document = await self.input_for(ex, record)
        started = time.perf_counter()
        try:
            decision = await self.engine.result_decision(document)
        except Exception as exc:  # never break the request over a result verdict
            log.exception("policy engine raised on a result")
            decision = Decision(True, [], error=f"{type(exc).__name__}: {exc}")
        seconds = time.perf_counter() - started
        if decision is None:  # nothing to say: not a decision, only timed
            self.metrics.policy_evaluation.labels(self.engine.name).observe(seconds)
            decided[record.call_id] = Decision(True)
            return decided[record.call_id]
        decided[record.call_id] = decision
        self.metrics.policy_decision(decision.outcome, self.engine.name, seconds, ex.path.value)
        log_event(
            "policy_result_decision",
            level=logging.INFO if decision.allow and decision.error is None else logging.WARNING,
            log=log,
            session=ex.session,
            tool=document["tool"]["name"],
            call_id=record.call_id,
            decision=decision.outcome,
            reasons=decision.reasons,
            error=decision.error,
            mode=self.mode,
            applied=False,
        )
        return decision

    async def input_for(self, ex: Exchange, record: ToolResultRecord) -> dict[str, Any]:
        """The `tool_result` input: the call's part of the contract plus `result`."""
        tool = record.tool or ""
        declaration = ex.view.declarations.get(tool)
        document = self.input_base(ex, "tool_result", await self.session_counts(ex))
        document["tool"] = {
            "name": tool,
            "declared": declaration is not None,
            "schema_hash": declaration.schema_hash if declaration is not None else "",
        }
        document["call"] = {"id": record.call_id, "args": {}, "args_hash": record.args_hash, "index": 0, "parallel": 1}
        document["result"] = {
            "is_error": record.is_error,
            "bytes": record.bytes,
            "anomalies": list(record.anomalies),
            "latency_s": record.latency_s,
        }
        return document
