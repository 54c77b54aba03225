"""The policy guard: every tool call is decided by Rego (phase `tool_call`).

Runs after the argument lockdown and the replay guard (their findings are part of the
input) and before the approval guard, which resolves the APPROVAL verdicts produced here.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sidecar.config import Settings
from sidecar.context import CallCheck
from sidecar.guards.base import Guard
from sidecar.model import Verdict, VerdictKind
from sidecar.policy import Decision, PolicyEngine, apply_mode
from sidecar.policy.engine import error_decision
from sidecar.policy.inputs import Clock, SessionCounter, agent_identity, base_input, session_counts
from sidecar.telemetry.logs import log_event
from sidecar.telemetry.metrics import Metrics

log = logging.getLogger("sidecar.policy")

_TURN_KEY = "policy.turn"


def verdict_for(decision: Decision) -> Verdict | None:
    """allow → None; require_approval → APPROVAL (the approval guard takes it from there);
    any other refusal → DENY. The reasons are what the model reads in the repair round."""
    if decision.allow:
        return None
    if decision.require_approval:
        return Verdict(
            VerdictKind.APPROVAL,
            "approval_required",
            reasons=list(decision.reasons),
            retryable=decision.retryable,
            details={"approval": dict(decision.require_approval)},
            guard="policy",
        )
    return Verdict(
        VerdictKind.DENY, "denied", reasons=list(decision.reasons), retryable=decision.retryable, guard="policy"
    )


class PolicyGuard(Guard):
    """Builds the contract input for a call, asks the engine, applies the rollout mode."""

    name = "policy"

    def __init__(
        self,
        settings: Settings,
        engine: PolicyEngine,
        metrics: Metrics,
        state: SessionCounter | None = None,
    ) -> None:
        self.engine = engine
        self.metrics = metrics
        # Hook for the session ledger: anything with `async session_counts(session)`.
        self.state = state
        self.mode = settings.policy.mode
        self.on_error = settings.policy.on_error
        self.agent = agent_identity(settings)
        self.clock = Clock()

    async def on_call(self, check: CallCheck) -> Verdict | None:
        if self.mode == "off":
            return None
        document = await self.input_for(check)
        started = time.perf_counter()
        try:
            decision = await self.engine.decide(document)
        except Exception as exc:  # an engine bug must not break the request: on_error decides
            log.exception("policy engine raised")
            decision = error_decision(self.on_error, f"{type(exc).__name__}: {exc}")
        self.metrics.policy_decision(decision.outcome, self.engine.name, time.perf_counter() - started)
        check.policy_reasons = decision.reasons
        effective, shadow_refused = apply_mode(decision, self.mode)
        if shadow_refused:
            self.metrics.policy_decision_flip(check.call.name, "allow", decision.outcome)  # let through; policy differs
            would = verdict_for(decision)
            if would is not None:
                check.observed.append(would)
            self._log(check, decision, "shadow")
            self._tally(check)
            return None
        verdict = verdict_for(effective)
        if verdict is None:
            self._tally(check)
            if decision.error is not None:
                self._log(check, decision, "allowed_on_error")
            return None
        if verdict.kind is VerdictKind.APPROVAL:
            check.approval_request = decision.require_approval
        self._log(check, decision, "enforced")
        return verdict

    async def input_for(self, check: CallCheck) -> dict[str, Any]:
        """The `tool_call` input document (contract version 1) for one call."""
        exchange = check.exchange
        call = check.call
        total, by_tool = await session_counts(exchange, self.state)
        turn = exchange.scratch.get(_TURN_KEY)
        if turn is not None and turn[0] == check.round and call.index > 0 and turn[1]:
            # Earlier calls of this same turn that the policy let through count as made
            # before this one: six parallel refunds must not slip past a limit of five.
            by_tool = dict(by_tool)
            for tool, n in turn[1].items():
                by_tool[tool] = by_tool.get(tool, 0) + n
            total += sum(turn[1].values())
        declaration = exchange.view.declarations.get(call.name)
        validation = check.validation
        document = base_input(exchange, "tool_call", self.agent, (total, by_tool), self.clock.now())
        document["tool"] = {
            "name": call.name,
            "declared": declaration is not None,
            "schema_hash": declaration.schema_hash if declaration is not None else "",
        }
        document["call"] = {
            "id": call.id,
            "args": call.arguments if call.arguments is not None else {},
            "args_hash": call.args_hash,
            "index": call.index,
            "parallel": check.parallel,
        }
        document["validation"] = (
            {"valid": True, "errors": []}
            if validation is None or validation.allowed
            else {"valid": False, "errors": [e.to_json() for e in validation.errors]}
        )
        document["replay"] = check.replay
        document["approval"] = check.approval
        return document

    def _tally(self, check: CallCheck) -> None:
        """Remember an allowed call for the later calls of the same turn (see input_for)."""
        key = check.round
        scratch = check.exchange.scratch
        turn: tuple[int, dict[str, int]] | None = scratch.get(_TURN_KEY)
        if turn is None or turn[0] != key or check.call.index == 0:
            turn = (key, {})
            scratch[_TURN_KEY] = turn
        turn[1][check.call.name] = turn[1].get(check.call.name, 0) + 1

    def _log(self, check: CallCheck, decision: Decision, action: str) -> None:
        exchange = check.exchange
        log_event(
            "policy_decision",
            level=logging.WARNING if decision.error is not None else logging.INFO,
            log=log,
            session=exchange.session,
            tool=check.call.name,
            call_id=check.call.id,
            decision=decision.outcome,
            mode=self.mode,
            action=action,
            reasons=decision.reasons,
            require_approval=decision.require_approval,
            error=decision.error,
            engine=self.engine.name,
        )
