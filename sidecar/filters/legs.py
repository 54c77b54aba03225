"""The model path's half of "one logical call" (`sidecar/exchange/legs.py`): every call that reached
the agent, and every call refused for good, is put where the MCP path will look for it.

Best-effort: if it fails, an MCP execution of the call is judged on its own (a second decision,
an approval of its own), never less checked.
"""

from __future__ import annotations

from sidecar.exchange.filters import Filter
from sidecar.exchange.legs import LegIndex
from sidecar.exchange.state import Action, CallCheck, EarlierLeg, Exchange
from sidecar.model import CallPath, Reply, ToolCall, VerdictKind

# Refusals an MCP execution cannot overturn. A call awaiting approval is not final (the
# approval may come), and a replay refusal means the call already ran (its execution is found).
_FINAL = frozenset({VerdictKind.REJECT, VerdictKind.DENY})


class LegsFilter(Filter):
    name = "legs"

    def __init__(self, index: LegIndex) -> None:
        self.index = index

    def _leg(self, ex: Exchange, call: ToolCall) -> EarlierLeg:
        return EarlierLeg(ex.session_info, call.id, call.name, call.args_hash, self.index.clock())

    async def on_checked(self, ex: Exchange, checks: list[CallCheck]) -> None:
        if ex.path is not CallPath.MODEL:
            return
        for check in checks:
            if check.action in (Action.REPAIR, Action.BLOCKED) and check.verdict.kind in _FINAL:
                self.index.refused(self._leg(ex, check.call), check.verdict)

    async def on_delivered(self, ex: Exchange, reply: Reply, calls: list[ToolCall]) -> None:
        if ex.path is not CallPath.MODEL:
            return
        for call in calls:
            if call.arguments is not None:
                self.index.delivered(self._leg(ex, call))
