"""Applies verdicts to a model turn: pass, repair round with the model, or block.

The agent receives one ordinary reply containing only allowed calls. A refused call is
answered to the model (repair round) on the agent's behalf; the calls of the same turn that
were allowed are answered `not_run` so the model re-issues the whole set together.

What the agent reads after repair rounds is one natural assistant turn (docs/enforcement.md):

- the original reply's items before its first call (its preamble; in a stream the agent
  already has them) open the turn;
- from the last round: its calls and the non-text items that go with them (thinking,
  reasoning); its text is dropped while it still calls tools, blocked or not (it was written
  in answer to errors the agent never saw, or repeats the preamble), and kept when it no
  longer does (the model gave up or answered: that text is the turn's answer);
- sidecar text (a block explanation) is its own item and starts with a blank line when it
  follows model text, so agents that join text blocks keep the two apart.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sidecar.config import Settings
from sidecar.exchange.filters import FilterChain, FilterFailed
from sidecar.exchange.state import Action, CallCheck, Exchange, Plan, RepairOutcome
from sidecar.model import NOT_RUN_PAYLOAD, ItemKind, Reply, ToolCall, VerdictKind

log = logging.getLogger("sidecar.enforce")

# Sends a repair request upstream and returns the parsed reply body (raises RepairFailed).
RepairSender = Callable[[Exchange, dict[str, Any]], Awaitable[dict[str, Any]]]

SIDECAR_PREFIX = "[sidecar]"
SEPARATOR = "\n\n"


class RepairFailed(Exception):
    """The upstream answered a repair round with an error: stop repairing."""


@dataclass(slots=True)
class Settlement:
    """The reply the agent gets, and the judged calls of its last turn."""

    reply: Reply
    changed: bool  # the agent gets the reply as written back, not the upstream's bytes
    rounds: int = 0
    delivered: list[ToolCall] = field(default_factory=list)
    checks: list[CallCheck] = field(default_factory=list)


def explanation(checks: list[CallCheck], why: str | None = None) -> str:
    lines = [f"{SIDECAR_PREFIX} These tool calls were not run" + (f" ({why})" if why else "") + ":"]
    for check in checks:
        call = check.call
        if check.action is Action.WITHDRAWN:
            lines.append(f"- {call.name} ({call.id}): not run because the sidecar could not record it")
        elif check.verdict.allowed:
            lines.append(f"- {call.name} ({call.id}): not run because another call of this turn was refused")
        else:
            lines.append(f"- {call.name} ({call.id}): {check.verdict.summary()}")
    return "\n".join(lines)


def let_through_observed(settings: Settings, check: CallCheck) -> bool:
    """A refusal under `mode: observe` is only observed: the call goes on (`Action.OBSERVED`).
    Shared by the model path's plan and the MCP path."""
    if check.verdict.allowed or settings.mode_for(check.call.name) != "observe":
        return False
    check.observed.append(check.verdict)
    check.action = Action.OBSERVED
    return True


def _in_turn_duplicates(checks: list[CallCheck]) -> list[CallCheck] | None:
    """The refused checks, if every one is a replay of an allowed call of the same turn."""
    allowed = {check.call.id for check in checks if check.verdict.allowed}
    refused = [check for check in checks if check.refused]
    if refused and all(
        check.verdict.kind is VerdictKind.REPLAY and check.verdict.details.get("original_call_id") in allowed
        for check in refused
    ):
        return refused
    return None


class Enforcer:
    def __init__(self, settings: Settings, chain: FilterChain, send: RepairSender) -> None:
        self.settings = settings
        self.chain = chain
        self.send = send

    def plan(self, checks: list[CallCheck]) -> Plan:
        """pass | repair | block, after observe-mode refusals are let through."""
        plan = Plan.PASS
        for check in checks:
            if check.verdict.allowed or let_through_observed(self.settings, check):
                continue
            mode = self.settings.mode_for(check.call.name)
            if mode == "observe":
                check.observed.append(check.verdict)
                check.action = Action.OBSERVED
                continue
            if (
                mode == "block"
                or self.settings.enforcement.max_repair_rounds == 0
                or not check.call.repairable  # a server call already ran; a computer call takes no text
                or not check.exchange.origin.repairs  # a stored or background response: no round
            ):
                return Plan.BLOCK
            plan = Plan.REPAIR
        return plan

    async def settle(self, ex: Exchange, reply: Reply, cut: int | None) -> Settlement:
        """Judge the reply's calls and apply the verdicts (repair rounds included)."""
        if not reply.calls or cut is None:
            return Settlement(reply, reply.rewritten)
        checks = await self.chain.check(ex, reply.calls)
        plan = self.plan(checks)
        if plan is Plan.PASS:
            await self.chain.checked(ex, checks)
            return Settlement(reply, reply.rewritten, delivered=reply.client_calls, checks=checks)
        if plan is Plan.BLOCK:
            duplicates = _in_turn_duplicates(checks)
            if duplicates is not None:
                return await self._drop_duplicates(ex, reply, checks, duplicates)
            await self._mark_blocked(ex, checks)
            return Settlement(self.block(ex, reply, checks), True, checks=checks)
        return await self._repair(ex, reply, cut, checks)

    async def _drop_duplicates(
        self, ex: Exchange, reply: Reply, checks: list[CallCheck], duplicates: list[CallCheck]
    ) -> Settlement:
        """Block mode, when the only refusals are repeats of another call of the same turn: that
        call runs once (it was allowed), its repeats are removed and explained."""
        for check in duplicates:
            check.action = Action.BLOCKED
        await self.chain.checked(ex, checks)
        dropped = {id(check.call) for check in duplicates}
        dialect = ex.model_dialect
        items = [item for item in reply.items if item.call is None or id(item.call) not in dropped]
        text = explanation(duplicates)
        items.append(dialect.text_item(SEPARATOR + text if dialect.has_text(items) else text))
        kept = [check.call for check in checks if id(check.call) not in dropped]
        return Settlement(Reply(reply.envelope, items, reply.complete), True, delivered=kept, checks=checks)

    async def _repair(self, ex: Exchange, first: Reply, cut: int, checks: list[CallCheck]) -> Settlement:
        dialect = ex.model_dialect
        request = ex.request
        current = first
        spent: list[Reply] = []
        refused_tools: set[str] = set()
        for round_number in range(1, self.settings.enforcement.max_repair_rounds + 1):
            outputs = []
            for check in checks:
                refused = check.refused
                check.action = Action.REPAIR if refused else Action.NOT_RUN
                if refused:
                    refused_tools.add(check.call.name)
                if check.call.kind.runs_on_client:  # the provider answered its own calls
                    outputs.append((check.call, check.verdict.model_payload() if refused else NOT_RUN_PAYLOAD))
            await self.chain.checked(ex, checks)  # each check is reported once, as its round begins
            request = dialect.repair_request(request, current, outputs)
            try:
                body = await self.send(ex, request)
            except RepairFailed as exc:
                log.warning("repair round %d failed upstream: %s", round_number, exc)
                return await self._exhausted(ex, first, cut, current, spent, checks, reported=True)
            ex.repair_rounds = round_number
            current = dialect.read_reply(body)
            await self.chain.reply(ex, current)
            spent.append(current)
            if not current.calls:
                # The model stopped calling tools: its text is the turn's answer.
                await self.chain.repaired(ex, RepairOutcome.ABANDONED)
                return Settlement(self._merge(ex, first, cut, current, spent), True, round_number)
            checks = await self.chain.check(ex, current.calls, round_number)
            plan = self.plan(checks)
            if plan is Plan.PASS:
                await self.chain.checked(ex, checks)
                reissued = any(call.name in refused_tools for call in current.calls)
                await self.chain.repaired(ex, RepairOutcome.CORRECTED if reissued else RepairOutcome.ABANDONED)
                final = self._merge(ex, first, cut, current, spent)
                return Settlement(final, True, round_number, current.client_calls, checks)
            if plan is Plan.BLOCK:
                break
        return await self._exhausted(ex, first, cut, current, spent, checks, reported=False)

    async def _exhausted(
        self,
        ex: Exchange,
        first: Reply,
        cut: int,
        current: Reply,
        spent: list[Reply],
        checks: list[CallCheck],
        reported: bool,
    ) -> Settlement:
        """No round left (or the round failed upstream): the last turn's calls are blocked.

        `reported`: these checks were reported when their (failed) repair round began; each
        check reaches the filters once.
        """
        await self.chain.repaired(ex, RepairOutcome.EXHAUSTED)
        if not reported:
            await self._mark_blocked(ex, checks)
        else:
            self._set_blocked(checks)
        if spent:
            # A repair round's text still answers errors the agent never saw: only its
            # non-text items go with the explanation (see the module docstring).
            current = Reply(
                current.envelope, [i for i in current.items if i.kind is not ItemKind.TEXT], current.complete
            )
        blocked = self.block(ex, current, checks)
        final = self._merge(ex, first, cut, blocked, spent) if spent else blocked
        return Settlement(final, True, ex.repair_rounds, checks=checks)

    @staticmethod
    def _set_blocked(checks: list[CallCheck]) -> None:
        for check in checks:
            if check.action is not Action.OBSERVED:
                check.action = Action.BLOCKED if not check.verdict.allowed else Action.NOT_RUN

    async def _mark_blocked(self, ex: Exchange, checks: list[CallCheck]) -> None:
        self._set_blocked(checks)
        await self.chain.checked(ex, checks)

    def block(self, ex: Exchange, reply: Reply, checks: list[CallCheck], why: str | None = None) -> Reply:
        """Remove every call of the turn and say why in text: no half-refused set.

        A refused server call already ran at the provider: its call, its results and all the
        model wrote after it are withheld (they were written from that result)."""
        dialect = ex.model_dialect
        refused_server = {id(c.call) for c in checks if c.refused and not c.call.kind.runs_on_client}
        end = next((n for n, item in enumerate(reply.items) if id(item.call) in refused_server), len(reply.items))
        items = [item for item in reply.items[:end] if item.kind is not ItemKind.CALL]
        text = explanation(checks, why)
        items.append(dialect.text_item(SEPARATOR + text if dialect.has_text(items) else text))
        return Reply(reply.envelope, items, reply.complete)

    async def withdraw(self, ex: Exchange, settlement: Settlement, failure: FilterFailed) -> Settlement:
        """The delivery could not be committed (a critical filter failed in `on_deliver`):
        nothing of the turn reaches the agent; it is told why (fail closed)."""
        for check in settlement.checks:
            if check.action in (Action.ALLOWED, Action.OBSERVED):
                check.action = Action.WITHDRAWN
        await self.chain.checked(ex, settlement.checks)
        why = f"the sidecar could not record them: {failure.filter_name} failed"
        blocked = self.block(ex, settlement.reply, settlement.checks, why)
        return Settlement(blocked, True, settlement.rounds, [], settlement.checks)

    @staticmethod
    def _merge(ex: Exchange, first: Reply, cut: int, last: Reply, spent: list[Reply]) -> Reply:
        """One assistant turn: the original preamble, then the last round (see the module
        docstring), usage summed over every round."""
        dialect = ex.model_dialect
        envelope = dialect.merge_envelopes(first.envelope, last.envelope)
        if "usage" in envelope:
            for extra in spent:
                dialect.add_usage(envelope, extra.envelope)
        opening = first.items[:cut]
        tail = last.items
        if any(item.kind is ItemKind.CALL for item in tail):
            tail = [item for item in tail if item.kind is not ItemKind.TEXT]
        elif dialect.has_text(opening):
            tail = [dialect.prefix_text(item, SEPARATOR) if item.kind is ItemKind.TEXT else item for item in tail]
        return Reply(envelope, opening + tail, last.complete)
