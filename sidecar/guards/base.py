"""The guard protocol and the chain that runs guards in order."""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.context import CallCheck, Exchange
from sidecar.model import ToolCall, Verdict


class Guard:
    """One concern. Return a refusal Verdict, or None to let the next guard look."""

    name = "guard"

    async def on_call(self, check: CallCheck) -> Verdict | None:
        return None


class GuardChain:
    def __init__(self, guards: Sequence[Guard]) -> None:
        self.guards = list(guards)

    async def check(self, exchange: Exchange, calls: Sequence[ToolCall], round: int = 0) -> list[CallCheck]:
        checks = [CallCheck(call, exchange, len(calls), round) for call in calls]
        for check in checks:
            for guard in self.guards:
                verdict = await guard.on_call(check)
                if verdict is not None and not verdict.allowed:
                    verdict.guard = verdict.guard or guard.name
                    check.verdict = verdict
                    break
        return checks
