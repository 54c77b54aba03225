"""The policy filter: every tool call is decided by Rego (phase `tool_call`).

Runs after argument lockdown and the replay lookup (their findings are part of the input) and
before the approval filter, which resolves the APPROVAL verdicts produced here. The pieces all
three policy phases share (engine, session counts, agent identity, time) are in `PolicyPhase`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from sidecar.config import Settings
from sidecar.exchange.filters import Filter
from sidecar.exchange.state import CallCheck, Exchange, ExchangeKey
from sidecar.filters.drift import previous_schema_hash
from sidecar.model import Verdict, VerdictKind
from sidecar.policy import Decision, PolicyEngine, apply_mode
from sidecar.policy.engine import error_decision
from sidecar.policy.inputs import Clock, SessionCounter, agent_identity, base_input
from sidecar.state import StateUnavailable
from sidecar.telemetry.logs import log_event
from sidecar.telemetry.metrics import Metrics

log = logging.getLogger("sidecar.policy")

Counts = tuple[int, dict[str, int]]
# (calls_total, calls_by_tool) of the session before this exchange; looked up once per
# exchange (nothing is delivered while it is settled), or set by a test.
SESSION_COUNTS: ExchangeKey[Counts] = ExchangeKey("policy.session_counts")
# The session those counts are of: a thread's first turn learns its session with the reply.
_COUNTED_SESSION: ExchangeKey[str] = ExchangeKey("policy.counted_session")


class PolicyPhase(Filter):
    """What every policy filter needs: the engine, metrics, session counts, agent, time."""

    def __init__(
        self, settings: Settings, engine: PolicyEngine, metrics: Metrics, state: SessionCounter | None = None
    ) -> None:
        self.engine = engine
        self.metrics = metrics
        self.state = state
        self.mode = settings.policy.mode
        self.on_error = settings.policy.on_error
        self.agent = agent_identity(settings)
        self.clock = Clock()

    async def session_counts(self, ex: Exchange) -> Counts:
        """Without a ledger (none wired, or unavailable) the counts are zero: per-session
        limits cannot apply (the replay filter refuses side-effecting calls meanwhile)."""
        cached = ex.get(SESSION_COUNTS)
        if cached is not None and ex.get(_COUNTED_SESSION) in (None, ex.session):
            return cached
        counts: Counts = (0, {})
        if self.state is not None:
            try:
                total, by_tool = await self.state.session_counts(ex.session)
                counts = (int(total), dict(by_tool))
            except StateUnavailable as exc:
                log.warning("session counts unavailable for the policy input: %s", exc)
        ex.put(SESSION_COUNTS, counts)
        ex.put(_COUNTED_SESSION, ex.session)
        return counts

    def input_base(self, ex: Exchange, phase: str, counts: Counts) -> dict[str, Any]:
        """The fields every phase carries, with the path (`model` or `mcp`) and, on the MCP
        path, which server and method (`input.mcp`)."""
        provider = ex.provider.value
        document = base_input(phase, provider, ex.view.model, self.agent, ex.session_info, counts, self.clock.now())
        document["path"] = ex.path.value
        if ex.mcp is not None:
            document["mcp"] = {"server": ex.mcp.server, "method": ex.mcp.method}
        return document


def verdict_for(decision: Decision) -> Verdict | None:
    """allow → None; require_approval → APPROVAL (the approval filter takes it from there);
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


@dataclass(slots=True)
class _Tally:
    """Calls of the current turn the policy let through, by tool (see `PolicyFilter.input_for`)."""

    round: int = -1
    by_tool: dict[str, int] = field(default_factory=dict)


_TALLY: ExchangeKey[_Tally] = ExchangeKey("policy.turn")


class PolicyFilter(PolicyPhase):
    """Builds the contract input for a call, asks the engine, applies the rollout mode.

    Critical: an engine error is decided by `policy.on_error` inside the engine; anything else
    that fails here refuses the call.
    """

    name = "policy"
    critical = True
    decides_once = True

    async def on_call(self, check: CallCheck) -> Verdict | None:
        if self.mode == "off":
            return None
        decision, seconds = await self._decide(check)
        self.metrics.policy_decision(decision.outcome, self.engine.name, seconds, check.exchange.path.value)
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
        if verdict.kind is VerdictKind.APPROVAL and not check.call.kind.runs_on_client:
            # A server call already ran at the provider: nobody can approve it first. Its
            # result is withheld like any refused server call's.
            reason = "it needs approval, but the provider already ran it, so its result is withheld"
            verdict = Verdict(VerdictKind.DENY, "denied", reasons=[*verdict.reasons, reason], guard="policy")
        elif verdict.kind is VerdictKind.APPROVAL:
            check.approval_request = decision.require_approval
        self._log(check, decision, "enforced")
        return verdict

    async def _decide(self, check: CallCheck) -> tuple[Decision, float]:
        """The engine's decision and the seconds it took. The call's own fields first: an
        engine that can answer from them alone (`quick_decision`) spares the rest of the input."""
        fields = self.call_fields(check)
        started = time.perf_counter()
        try:
            decision = self.engine.quick_decision(fields)
            if decision is None:  # `decide` tries the shortcuts again: a few dict reads, then regorus
                document = await self.input_for(check, fields)
                started = time.perf_counter()
                decision = await self.engine.decide(document)
        except Exception as exc:  # an engine bug must not break the request: on_error decides
            log.exception("policy engine raised")
            decision = error_decision(self.on_error, f"{type(exc).__name__}: {exc}")
        return decision, time.perf_counter() - started

    async def input_for(self, check: CallCheck, fields: dict[str, Any] | None = None) -> dict[str, Any]:
        """The `tool_call` input document (contract version 1) for one call (`fields`: its
        `call_fields`, when the caller has them)."""
        ex = check.exchange
        call = check.call
        total, by_tool = await self.session_counts(ex)
        tally = ex.get(_TALLY)
        if tally is not None and tally.round == check.round and call.index > 0 and tally.by_tool:
            # Earlier calls of this same turn that the policy let through count as made
            # before this one: six parallel refunds must not slip past a limit of five.
            by_tool = dict(by_tool)
            for tool, n in tally.by_tool.items():
                by_tool[tool] = by_tool.get(tool, 0) + n
            total += sum(tally.by_tool.values())
        document = self.input_base(ex, "tool_call", (total, by_tool))
        document.update(self.call_fields(check) if fields is None else fields)
        return document

    @staticmethod
    def call_fields(check: CallCheck) -> dict[str, Any]:
        """The input's fields about the call itself: `tool`, `call`, `validation`, `replay`,
        `approval`."""
        ex = check.exchange
        call = check.call
        server = not call.kind.runs_on_client
        declaration = None if server else ex.view.declarations.get(call.name)
        validation = check.validation
        document: dict[str, Any] = {}
        document["tool"] = {
            "name": call.name,
            "declared": call.name in ex.view.server_tools if server else declaration is not None,
            # function, custom, provider_defined (run by the agent) or server (run by the provider)
            "kind": (declaration.kind if declaration is not None else call.kind).value,
            "schema_hash": declaration.schema_hash if declaration is not None and declaration.has_schema else "",
            "previous_schema_hash": previous_schema_hash(ex, call.name),
        }
        if declaration is not None and declaration.annotations:
            # MCP servers' hints (readOnlyHint, destructiveHint, idempotentHint, openWorldHint).
            document["tool"]["annotations"] = declaration.annotations
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
        document["replay"] = check.replay.to_input()
        document["approval"] = check.approval.to_input()
        return document

    def _tally(self, check: CallCheck) -> None:
        """Remember an allowed call for the later calls of the same turn (see input_for)."""
        tally = check.exchange.setdefault(_TALLY, _Tally)
        if tally.round != check.round or check.call.index == 0:
            tally.round, tally.by_tool = check.round, {}
        tally.by_tool[check.call.name] = tally.by_tool.get(check.call.name, 0) + 1

    def _log(self, check: CallCheck, decision: Decision, action: str) -> None:
        ex = check.exchange
        log_event(
            "policy_decision",
            level=logging.WARNING if decision.error is not None else logging.INFO,
            log=log,
            session=ex.session,
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
