"""Replay detection and the ledger: the same call (session, tool, canonical arguments) runs once.

Where the decision lives: here, and nowhere else. One filter, four steps of an exchange:

- `look_up`: for every call, the replay key is looked up in the ledger; what was found goes on
  the check (`check.replay`, the policy's `input.replay`).
- `on_call`: a tool with side effects that is not `repeatable` is refused with a REPLAY verdict
  when the same call already reached the agent. The enforcer answers the model from the ledger
  in a repair round (`status: replayed`, the original call's time, id and remembered result);
  the agent never sees the duplicate. In a derived session (which may merge conversations that
  begin alike) the remembered result goes to the model only when the request's history carries
  the original call (`may_share`); otherwise the refusal stands without it. Two more
  duplicates are caught the same way: a call id already delivered in this session (a model
  reply retried at the transport level: answered even for `repeatable` tools, since it is the
  same call, not a new one), and identical side-effecting calls within one turn (the first
  runs, the others are answered as its replays). Tools without side effects, or `repeatable`,
  pass; the policy sees the count.
- `on_checked`: replays are counted by what happened (answered from the ledger, or let through).
- `on_deliver`: every call is written to the ledger *before* it reaches the agent
  (insert-then-deliver, as the seed's `applyOnce` does), so no crash or failure between the two
  can let the same call through twice.

When the store is unavailable (any backend error: see `sidecar/state/guarded.py`),
`state.on_unavailable` applies: `fail_closed` (the default) refuses side-effecting calls
(a lookup that failed is a DENY with the reason; a ledger write that failed withdraws the
turn before anything reaches the agent) and lets read-only ones through; `fail_open` lets
everything through, counted and logged once per minute. A turn's calls are written in one
step (`record_calls`: one SQLite transaction, one Redis script), so there a failed write records
none of them; under `fail_closed` the turn is withdrawn when any of them has side effects.

A legitimately repeated action passes in one of two ways: the tool is declared `repeatable`
(`data.sidecar.tools.<name>.repeatable` or `tools.<name>.repeatable` in the config), or the
call carries a distinct idempotency argument, which gives it a different replay key. The
policy cannot overrule a REPLAY refusal (it does not resolve that kind).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from sidecar.config import Settings
from sidecar.exchange.filters import Filter
from sidecar.exchange.state import Action, CallCheck, Exchange, ExchangeKey, Origin
from sidecar.identity import call_key
from sidecar.model import SessionSource, ToolCall, Verdict, VerdictKind
from sidecar.policy.traits import ToolTraits
from sidecar.state import CallRecord, StateStore, StateUnavailable, may_proceed_without_state
from sidecar.telemetry.metrics import Metrics
from sidecar.timefmt import iso_utc

log = logging.getLogger("sidecar.replay")

CALL_ID_REUSED = "call_id_reused"  # the model delivered a known call id with other arguments
_FAIL_OPEN_LOG_EVERY_S = 60.0


def call_replay_key(session: str, call: ToolCall) -> str:
    """The DESIGN.md replay key; unparseable arguments are keyed by their raw text."""
    return call_key(session, call.name, call.canonical_arguments)


def replay_verdict(call: ToolCall, first: CallRecord, why: str = "already run", shared: bool = True) -> Verdict:
    """What the model is told instead of the call running twice (DESIGN.md `replayed`).

    `shared`: the remembered result may be handed to this conversation (see `may_share`);
    otherwise the call is refused all the same, and the model is told so without anything of
    the conversation that made the first call (no result, no call id, no time).
    """
    if not shared:
        return _unshared_verdict(call, why)
    at = iso_utc(first.delivered_at)
    if first.result is None:
        told = "its result has not arrived yet"
    else:
        told = "its recorded result is in `result`" + (" (truncated)" if first.result_truncated else "")
    details: dict[str, Any] = {
        "replayed": True,
        "original_call_id": first.call_id,
        "original_call_at": at,
        "result": first.result,
    }
    if first.result_is_error is not None:
        details["result_is_error"] = first.result_is_error
    if first.result_truncated:
        details["result_truncated"] = True
    reason = (
        f"{call.name} was {why} with exactly these arguments at {at} (call {first.call_id}); "
        f"the sidecar did not run it again: {told}"
    )
    return Verdict(VerdictKind.REPLAY, "replayed", reasons=[reason], retryable=False, details=details)


def _unshared_verdict(call: ToolCall, why: str) -> Verdict:
    reason = (
        f"{call.name} was {why} with exactly these arguments in this session, by a conversation this one "
        "cannot be shown to continue (the session is only derived from how the conversation began); "
        "the sidecar did not run it again, and that conversation's result is not shared"
    )
    details = {"replayed": True, "result_shared": False}
    return Verdict(VerdictKind.REPLAY, "replayed", reasons=[reason], retryable=False, details=details)


def may_share(ex: Exchange, first: CallRecord) -> bool:
    """Whether what the ledger remembers of `first` may go to this exchange's model.

    A strong session (header, provider handle, user field) names one conversation or one
    user: yes. A derived one may merge conversations that begin alike: only when this
    request's history carries the very call (its id and tool), which proves it continues the
    conversation that made it (call ids are the provider's, minted per model turn, so no other
    conversation's history holds them). A conversation prefix would prove less and break
    whenever an SDK re-serialises its history.
    """
    if ex.session_source is not SessionSource.DERIVED:
        return True
    return any(c.call_id == first.call_id and c.name == first.tool for c in ex.view.echoed_calls)


def in_turn_verdict(call: ToolCall, first: ToolCall) -> Verdict:
    reason = (
        f"{call.name} is called twice with exactly these arguments in this turn (calls {first.id} and {call.id}); "
        "it runs once: re-issue it a single time"
    )
    details = {"replayed": True, "original_call_id": first.id, "result": None}
    return Verdict(VerdictKind.REPLAY, "replayed", reasons=[reason], retryable=False, details=details)


@dataclass(slots=True)
class _Found:
    """A call's ledger facts, between `look_up` and `on_call`."""

    key: str
    first: CallRecord | None = None
    same_id: CallRecord | None = None  # this very call id, already delivered
    unavailable: str | None = None  # the lookup failed (state unavailable)


@dataclass(slots=True)
class _Turn:
    """Per exchange: each call's facts, and the first call of each replay key per round."""

    found: dict[int, _Found] = field(default_factory=dict)  # id(check) -> facts
    firsts: dict[tuple[int, str], ToolCall] = field(default_factory=dict)  # (round, key) -> first call
    redelivered: set[str] = field(default_factory=set)  # call ids a read-back hands out again
    # Replay keys by (session, tool, canonical arguments): a call's key is hashed once, when it
    # is looked up, and read again when the call is recorded.
    keys: dict[tuple[str, str, bytes], str] = field(default_factory=dict)

    def key(self, session: str, call: ToolCall) -> str:
        """`call_replay_key`, remembered for this exchange."""
        wanted = (session, call.name, call.canonical_arguments)
        found = self.keys.get(wanted)
        if found is None:
            found = self.keys[wanted] = call_replay_key(session, call)
        return found


_TURN: ExchangeKey[_Turn] = ExchangeKey("replay")
# What a refused call became when the replay guard answered it: a repair round, a block, or
# (MCP) the caller's own refusal result.
_ANSWERED = (Action.REPAIR, Action.BLOCKED, Action.REFUSED)


class ReplayFilter(Filter):
    """The replay guard and the ledger it reads and writes. Critical: it guards "runs once"."""

    name = "replay"
    critical = True

    def __init__(self, settings: Settings, store: StateStore, traits: ToolTraits, metrics: Metrics) -> None:
        self.settings = settings
        self.store = store
        self.traits = traits
        self.metrics = metrics
        self._fail_open_logged = 0.0

    async def look_up(self, check: CallCheck) -> None:
        call, session = check.call, check.exchange.session
        if not call.kind.runs_on_client:
            return  # a server call ran at the provider: nothing to run twice
        turn = check.exchange.setdefault(_TURN, _Turn)
        found = turn.found[id(check)] = _Found(turn.key(session, call))
        try:
            found.first, found.same_id = await self.store.look_up_call(session, found.key, call.id)
        except StateUnavailable as exc:
            found.unavailable = str(exc)
            return
        first = found.first
        if first is not None and first.call_id != call.id:
            check.replay.count, check.replay.first_seen = first.count, iso_utc(first.first_seen)

    async def on_call(self, check: CallCheck) -> Verdict | None:
        call = check.call
        if not call.kind.runs_on_client:
            return None
        turn = check.exchange.setdefault(_TURN, _Turn)
        found = turn.found.get(id(check))
        if found is None:  # look_up did not run (cannot happen in a chain): judge as unavailable
            found = _Found(call_replay_key(check.exchange.session, call), unavailable="no ledger lookup")
        ex = check.exchange
        if found.unavailable is not None:
            return self._unavailable(ex, call, found.unavailable)
        side_effects = self.traits.side_effects(call.name)
        same = found.same_id
        if same is not None and same.replay_key != found.key:
            self.metrics.tool_result_anomaly(CALL_ID_REUSED, call.name)
            log.warning("model reused call id %s for a different %s call", call.id, call.name)
        elif same is not None and check.exchange.origin is Origin.RETRIEVE:
            # A stored response read back hands out the very call delivered before, not a new one.
            turn.redelivered.add(call.id)
            return None
        elif same is not None and side_effects and check.earlier is None:  # a transport retry of a delivered call
            # (An MCP execution of a delivered call carries that call's id: its own record, not a retry.)
            return replay_verdict(call, same, "already delivered under this call id", may_share(ex, same))
        guarded = side_effects and not self.traits.repeatable(call.name)
        first = found.first
        if guarded and first is not None and first.call_id != call.id:
            return replay_verdict(call, first, shared=may_share(check.exchange, first))
        earlier = turn.firsts.setdefault((check.round, found.key), call)
        if guarded and earlier is not call:
            return in_turn_verdict(call, earlier)
        return None

    def _unavailable(self, ex: Exchange, call: ToolCall, error: str) -> Verdict | None:
        side_effects = self.traits.side_effects(call.name)
        if may_proceed_without_state(self.settings.state.on_unavailable, side_effects):
            if side_effects:
                self._note_fail_open(f"could not check {call.name} for replays: {error}")
            return None
        reason = (
            f"the sidecar cannot reach its state backend ({self.store.name}) to check whether "
            f"this {call.name} call already ran; calls with side effects are refused until it is back"
        )
        return Verdict(VerdictKind.DENY, "denied", reasons=[reason], retryable=True)

    def _note_fail_open(self, what: str) -> None:
        """fail_open: counted (sidecar_state_errors_total, by the store), logged once a minute."""
        now = time.monotonic()
        if now - self._fail_open_logged >= _FAIL_OPEN_LOG_EVERY_S:
            self._fail_open_logged = now
            log.warning("state.on_unavailable=fail_open: %s; the call was let through unchecked", what)

    async def on_checked(self, ex: Exchange, checks: list[CallCheck]) -> None:
        """Count replays by what happened: answered from the ledger, or let through."""
        path = ex.path.value
        for check in checks:
            tool = check.call.name
            if check.verdict.kind is VerdictKind.REPLAY and check.action in _ANSWERED:
                self.metrics.replay(tool, "answered", path)
                found = ex.setdefault(_TURN, _Turn).found.get(id(check))
                if found is not None and found.first is not None:
                    # A count, not a guarantee: the refusal stands either way.
                    with contextlib.suppress(StateUnavailable):
                        await self.store.note_replay(ex.session, found.key)
            elif check.replay.count and check.action in (Action.ALLOWED, Action.OBSERVED):
                self.metrics.replay(tool, "allowed", path)  # its delivery adds to the count

    async def on_deliver(self, ex: Exchange, calls: list[ToolCall]) -> None:
        """Insert, then deliver: a side-effecting call the ledger cannot record never goes out.
        The turn's calls are recorded in one step (one round trip to Redis, one SQLite
        transaction, all or none)."""
        session = ex.session
        now = self.store.limits.clock()
        turn = ex.setdefault(_TURN, _Turn)
        # A call handed out again is in the ledger already (with its result, if it came); an MCP
        # execution of a call the model path delivered was recorded when it reached the agent.
        new = [call for call in calls if call.id not in turn.redelivered and call.id not in ex.earlier]
        if not new:
            return
        records = [CallRecord(session, c.id, c.name, c.args_hash, turn.key(session, c), now) for c in new]
        try:
            await self.store.record_calls(records)
        except StateUnavailable as exc:
            on_unavailable = self.settings.state.on_unavailable
            side_effecting = [call.name for call in new if self.traits.side_effects(call.name)]
            if side_effecting and not may_proceed_without_state(on_unavailable, True):
                raise  # fail closed: the chain withdraws the turn
            for name in side_effecting:
                self._note_fail_open(f"could not record {name} in the ledger: {exc}")
