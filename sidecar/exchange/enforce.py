"""Applies verdicts to a model reply: pass, repair round with the model, or block.

The agent receives one ordinary reply containing only allowed calls. A refused call is
answered to the model (repair round) on the agent's behalf; the calls of the same turn that
were allowed are answered `not_run` so the model re-issues the whole set together.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sidecar.addons import Addons
from sidecar.config import Settings
from sidecar.dialects.base import compact
from sidecar.exchange.state import CallCheck, Exchange
from sidecar.guards.base import GuardChain
from sidecar.model import NOT_RUN_PAYLOAD, ItemKind, Reply, ToolCall
from sidecar.state.continuations import Continuations
from sidecar.telemetry.redact import redact_text

log = logging.getLogger("sidecar.exchange.enforce")

# Sends a repair request upstream and returns the parsed reply body.
RepairSender = Callable[[Exchange, dict[str, Any]], Awaitable[dict[str, Any]]]


class RepairFailed(Exception):
    """The upstream answered a repair round with an error: stop repairing."""


@dataclass(slots=True)
class Settlement:
    reply: Reply
    changed: bool  # the agent gets the reply as written back, not the upstream's bytes
    rounds: int = 0
    delivered: list[ToolCall] = field(default_factory=list)


def explanation(checks: list[CallCheck]) -> str:
    lines = ["[sidecar] These tool calls were not run:"]
    for check in checks:
        call = check.call
        if check.verdict.allowed:
            lines.append(f"- {call.name} ({call.id}): not run because another call of this turn was refused")
        else:
            lines.append(f"- {call.name} ({call.id}): {check.verdict.summary()}")
    return "\n".join(lines)


class Enforcer:
    def __init__(
        self,
        settings: Settings,
        guards: GuardChain,
        addons: Addons,
        send: RepairSender,
        continuations: Continuations | None = None,
    ) -> None:
        self.settings = settings
        self.guards = guards
        self.addons = addons
        self.send = send
        self.continuations = continuations or Continuations()

    def _plan(self, checks: list[CallCheck]) -> str:
        """pass | repair | block, after observe-mode refusals are let through."""
        plan = "pass"
        for check in checks:
            if check.verdict.allowed:
                continue
            mode = self.settings.mode_for(check.call.name)
            if mode == "observe":
                check.observed.append(check.verdict)
                check.action = "observed"
                continue
            if mode == "block" or self.settings.enforcement.max_repair_rounds == 0:
                return "block"
            plan = "repair"
        return plan

    async def settle(self, exchange: Exchange, reply: Reply, cut: int | None) -> Settlement:
        if not reply.calls or cut is None:
            return Settlement(reply, reply.rewritten)
        checks = await self.guards.check(exchange, reply.calls)
        plan = self._plan(checks)
        if plan == "pass":
            await self.addons.checked(exchange, checks)
            return Settlement(reply, reply.rewritten, delivered=reply.calls)
        if plan == "block":
            final = await self._block(exchange, reply, checks)
            return Settlement(final, True)
        return await self._repair(exchange, reply, cut, checks)

    async def _repair(self, exchange: Exchange, first: Reply, cut: int, checks: list[CallCheck]) -> Settlement:
        dialect = exchange.dialect
        request = exchange.request
        current = first
        spent: list[Reply] = []
        reported = False  # the last checks were already reported (their repair round began)
        for round_number in range(1, self.settings.enforcement.max_repair_rounds + 1):
            outputs = []
            for check in checks:
                refused = not check.verdict.allowed and check.action != "observed"
                check.action = "repair" if refused else "not_run"
                outputs.append((check.call, check.verdict.model_payload() if refused else NOT_RUN_PAYLOAD))
            await self.addons.checked(exchange, checks)
            reported = True
            request = dialect.repair_request(request, current, outputs)
            try:
                body = await self.send(exchange, request)
            except RepairFailed as exc:
                log.warning("repair round %d failed upstream: %s", round_number, redact_text(str(exc)))
                break
            reported = False
            exchange.repair_rounds = round_number
            current = dialect.read_reply(body)
            await self.addons.replied(exchange, current)
            spent.append(current)
            checks = await self.guards.check(exchange, current.calls, round_number)
            plan = self._plan(checks)
            if plan == "pass":
                await self.addons.checked(exchange, checks)
                await self.addons.repaired(exchange, "corrected")
                final = self._merge(exchange, first, cut, current, spent)
                return Settlement(final, True, round_number, current.calls)
            if plan == "block":
                break
        await self.addons.repaired(exchange, "exhausted")
        blocked = await self._block(exchange, current, checks, report=not reported)
        final = self._merge(exchange, first, cut, blocked, spent) if spent else blocked
        return Settlement(final, True, exchange.repair_rounds)

    async def _block(self, exchange: Exchange, reply: Reply, checks: list[CallCheck], report: bool = True) -> Reply:
        """Remove every call of the turn and say why in text: no half-refused set.

        `report=False`: these checks were reported when their (failed) repair round began;
        each check reaches the addons once.
        """
        for check in checks:
            if check.action not in ("observed",):
                check.action = "blocked" if not check.verdict.allowed else "not_run"
        if report:
            await self.addons.checked(exchange, checks)
        dialect = exchange.dialect
        items = [item for item in reply.items if item.kind is not ItemKind.CALL]
        items.append(dialect.text_item(explanation(checks)))
        blocked = Reply(reply.envelope, items, reply.complete)
        response_id = dialect.response_id(reply)
        if dialect.server_side_state and response_id:
            outputs = {
                c.call.id: compact(c.verdict.model_payload() if not c.verdict.allowed else NOT_RUN_PAYLOAD)
                for c in checks
            }
            await self.continuations.withhold(response_id, outputs)
        return blocked

    @staticmethod
    def _merge(exchange: Exchange, first: Reply, cut: int, last: Reply, spent: list[Reply]) -> Reply:
        """What the agent already got (items before the cut) + the last round, usage summed."""
        dialect = exchange.dialect
        envelope = dialect.merge_envelopes(first.envelope, last.envelope)
        if "usage" in envelope:
            for extra in spent:
                dialect.add_usage(envelope, extra.envelope)
        return Reply(envelope, first.items[:cut] + last.items, last.complete)
