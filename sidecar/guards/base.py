"""The guard protocol and the chain that runs guards in order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from sidecar.exchange.state import CallCheck, Exchange
from sidecar.model import ToolCall, Verdict, VerdictKind


class Guard:
    """One concern. Return a refusal Verdict, or None to let the next guard look.

    Once a call is refused, later guards are skipped, except those that `resolve` that kind
    of refusal (the approval guard turns a policy's "needs approval" into a request, a
    decision already taken, or an allowed call).
    """

    name = "guard"
    resolves: ClassVar[frozenset[VerdictKind]] = frozenset()

    async def on_call(self, check: CallCheck) -> Verdict | None:
        return None


class GuardChain:
    def __init__(self, guards: Sequence[Guard]) -> None:
        self.guards = list(guards)

    async def check(self, exchange: Exchange, calls: Sequence[ToolCall], round: int = 0) -> list[CallCheck]:
        checks = [CallCheck(call, exchange, len(calls), round) for call in calls]
        for check in checks:
            for guard in self.guards:
                if not check.verdict.allowed and check.verdict.kind not in guard.resolves:
                    continue
                verdict = await guard.on_call(check)
                if verdict is not None:
                    if not verdict.allowed:
                        verdict.guard = verdict.guard or guard.name
                    check.verdict = verdict
        return checks
