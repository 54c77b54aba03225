"""One logical call across both paths: the model asks for a tool, the agent executes it through an
MCP server behind the same sidecar (docs/mcp.md, "One logical call").

The model path records every call it delivered to the agent, and every call it refused for
good, here (`sidecar/filters/legs.py`); the MCP path looks a `tools/call` up by tool and
canonical arguments before judging it (`sidecar/mcp/runner.py`):

- `Execute`: the agent executes a call the model path delivered and nothing executed yet. The
  MCP call takes that call's id and session: the decision taken there is reused (policy and
  approval are not asked again, `Filter.decides_once`), the ledger keeps its one record, the
  metrics count it once, and the result answers it.
- `Repeat`: that call was already executed once. The MCP call is judged afresh, in the same
  session, so the replay guard sees the earlier execution.
- `FinalRefusal`: the model path refused the call (denied, invalid arguments, unknown tool): the
  refusal is final, the MCP call gets the same structured error. A call that only awaits an
  approval is not final; it is judged afresh in its session, where the approval is found.

Candidates are the entries younger than `mcp.correlation_window_s`. When the MCP request names
its session (`X-Sidecar-Session`), only that session's calls match. Otherwise a match is made
only when every candidate belongs to one session; calls of two sessions that look alike
(`Ambiguous`), or no candidate, leave the MCP call to be judged on its own, in its own session:
never less checked than a call with no model-path history.

In memory, per process, bounded: the sidecar runs next to the agent, so both legs of a call go
through the same process. Not shared through the state backend.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from sidecar.exchange.state import EarlierLeg
from sidecar.model import Verdict


@dataclass(slots=True)
class _Entry:
    leg: EarlierLeg
    verdict: Verdict | None = None  # set for a refused call
    claimed: bool = False  # an MCP execution has claimed (or executed) it


@dataclass(frozen=True, slots=True)
class Execute:
    leg: EarlierLeg
    entry: _Entry = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Repeat:
    leg: EarlierLeg  # the call already executed: the repeat is judged in its session


@dataclass(frozen=True, slots=True)
class FinalRefusal:
    leg: EarlierLeg
    verdict: Verdict


@dataclass(frozen=True, slots=True)
class Ambiguous:
    sessions: int


Match = Execute | Repeat | FinalRefusal | Ambiguous | None


class LegIndex:
    """Delivered and refused model-path calls by (tool, args_hash), newest last, bounded."""

    def __init__(self, window_s: float, max_entries: int = 10_000, clock: Callable[[], float] = time.time) -> None:
        self.window_s = window_s
        self.max_entries = max_entries
        self.clock = clock
        self._entries: OrderedDict[tuple[str, str], list[_Entry]] = OrderedDict()
        self._count = 0

    def delivered(self, leg: EarlierLeg) -> None:
        self._add(_Entry(leg))

    def refused(self, leg: EarlierLeg, verdict: Verdict) -> None:
        self._add(_Entry(leg, verdict))

    def _add(self, entry: _Entry) -> None:
        key = (entry.leg.tool, entry.leg.args_hash)
        self._entries.setdefault(key, []).append(entry)
        self._entries.move_to_end(key)
        self._count += 1
        while self._count > self.max_entries and self._entries:
            _, oldest = self._entries.popitem(last=False)
            self._count -= len(oldest)

    def _live(self, key: tuple[str, str]) -> list[_Entry]:
        entries = self._entries.get(key)
        if not entries:
            return []
        horizon = self.clock() - self.window_s
        alive = [e for e in entries if e.leg.delivered_at >= horizon]
        self._count -= len(entries) - len(alive)
        if alive:
            self._entries[key] = alive
        else:
            del self._entries[key]
        return alive

    def match(self, tool: str, args_hash: str, session: str | None) -> Match:
        """The earlier leg an MCP `tools/call` continues (see the module docstring). An
        `Execute` claims its entry at once: two concurrent executions never share one call."""
        if not args_hash:
            return None
        candidates = self._live((tool, args_hash))
        if session is not None:
            candidates = [e for e in candidates if e.leg.session.id == session]
        if not candidates:
            return None
        sessions = {e.leg.session.id for e in candidates}
        if len(sessions) > 1:
            return Ambiguous(len(sessions))
        open_ = [e for e in candidates if e.verdict is None and not e.claimed]
        if open_:
            entry = open_[0]
            entry.claimed = True
            return Execute(entry.leg, entry)
        executed = [e for e in candidates if e.verdict is None]
        if executed:
            return Repeat(executed[0].leg)
        refused = candidates[-1]
        assert refused.verdict is not None
        return FinalRefusal(refused.leg, refused.verdict)

    @staticmethod
    def release(found: Execute) -> None:
        """The claimed call was not executed after all (refused on the MCP leg, or the server
        could not be reached): a later execution may claim it."""
        found.entry.claimed = False

    def __len__(self) -> int:
        return self._count
