"""Replay detection: the same call (session, tool, canonical arguments) made twice.

Where the decision lives: here, in `ReplayGuard`, and nowhere else. It runs after argument
lockdown and before policy. For every call it looks the replay key up in the state store and
puts what it found on the check (`check.replay = {"count", "first_seen"}`), which the policy
guard copies into its input. Then:

- tool with side effects, not `repeatable`: refused with a REPLAY verdict. The enforcer
  answers the model from the ledger in a repair round (`status: replayed`, the original
  call's time, id and remembered result); the agent never sees the duplicate.
- tool without side effects, or declared `repeatable`: allowed; later guards (policy) see
  the replay count and may still deny it (e.g. a per-session limit).

A legitimately repeated action therefore passes in one of two ways: the tool is declared
`repeatable` (`policies/data.json` `sidecar.tools.<name>.repeatable`, or `tools.<name>.
repeatable` in the config), or the call carries a distinct idempotency argument, which gives
it a different replay key. The policy cannot overrule a REPLAY refusal (it does not
`resolve` that kind): one place decides, and `repeatable` is the switch.

Side effects of a tool: config `tools.<name>.side_effects`, else data.json
`sidecar.tools.<name>.side_effects`, else data.json `sidecar.unlisted_tool.side_effects`
(the shipped policies say **true**: a tool nobody described is treated as a write), else,
with no declaration anywhere, **false**. The last case is a sidecar running without policy
data: it stays transparent (repeats are counted, never answered from a ledger that may be
hours old and, with a derived session id, may come from another conversation that began the
same way). Declare side-effecting tools, or ship `unlisted_tool`, to get replay protection.

When the store is unavailable, `state.on_unavailable` applies (`may_proceed_without_state`):
fail_closed refuses side-effecting calls (deny, with the reason) and lets read-only ones
through; fail_open lets everything through. Either way `sidecar_state_errors_total` counts it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from sidecar.addons import Addon
from sidecar.config import Settings
from sidecar.context import CallCheck, Exchange
from sidecar.guards.base import Guard
from sidecar.guards.results import CALL_ID_REUSED
from sidecar.identity import call_key
from sidecar.model import ToolCall, Verdict, VerdictKind
from sidecar.state import CallRecord, StateStore, StateUnavailable, may_proceed_without_state
from sidecar.telemetry.metrics import Metrics

log = logging.getLogger("sidecar.replay")


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def call_replay_key(session: str, call: ToolCall) -> str:
    """The DESIGN.md replay key; unparseable arguments are keyed by their raw text."""
    return call_key(session, call.name, call.canonical_arguments)


class ToolTraits:
    """Per-tool `side_effects` and `repeatable`: config, then data.json, then defaults."""

    def __init__(self, settings: Settings, data: Mapping[str, Any] | None = None) -> None:
        self.settings = settings
        self._tools: Mapping[str, Any] = {}
        self._unlisted: Mapping[str, Any] = {}
        self.update(data or {})

    @classmethod
    def from_settings(cls, settings: Settings) -> ToolTraits:
        """Reads the policy data of `settings.policies` (unset: the packaged default) once, at startup."""
        data: dict[str, Any] = {}
        from sidecar.policy.loader import PolicyLoadError, read_bundle

        try:
            data = read_bundle(settings.policies).data
        except PolicyLoadError as exc:
            log.warning("tool traits: cannot read %s (%s); using config and defaults", settings.policies, exc)
        return cls(settings, data)

    def update(self, data: Mapping[str, Any]) -> None:
        """New policy data (the whole `data` document), e.g. after a policy reload."""
        found = data.get("sidecar")
        sidecar: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        tools = sidecar.get("tools")
        unlisted = sidecar.get("unlisted_tool")
        self._tools = tools if isinstance(tools, Mapping) else {}
        self._unlisted = unlisted if isinstance(unlisted, Mapping) else {}

    def _data(self, tool: str, key: str, default: bool) -> bool:
        entry = self._tools.get(tool)
        source = entry if isinstance(entry, Mapping) and key in entry else self._unlisted
        value = source.get(key, default)
        return value if isinstance(value, bool) else default

    def side_effects(self, tool: str) -> bool:
        configured = self.settings.tool(tool).side_effects
        return configured if configured is not None else self._data(tool, "side_effects", False)

    def repeatable(self, tool: str) -> bool:
        configured = self.settings.tool(tool).repeatable
        return configured if configured is not None else self._data(tool, "repeatable", False)


def replay_verdict(call: ToolCall, first: CallRecord) -> Verdict:
    """What the model is told instead of the call running twice (DESIGN.md `replayed`)."""
    at = rfc3339(first.delivered_at)
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
        f"{call.name} was already run with exactly these arguments at {at} (call {first.call_id}); "
        f"the sidecar did not run it again: {told}"
    )
    return Verdict(VerdictKind.REPLAY, "replayed", reasons=[reason], retryable=False, details=details)


class ReplayGuard(Guard):
    """Finds earlier deliveries of the same call; refuses side-effecting repeats."""

    name = "replay"

    def __init__(self, settings: Settings, store: StateStore, traits: ToolTraits, metrics: Metrics) -> None:
        self.settings = settings
        self.store = store
        self.traits = traits
        self.metrics = metrics

    async def on_call(self, check: CallCheck) -> Verdict | None:
        call = check.call
        session = check.exchange.session
        side_effects = self.traits.side_effects(call.name)
        try:
            first = await self.store.find_replay(session, call_replay_key(session, call))
        except StateUnavailable as exc:
            self.metrics.state_error(self.store.name)
            log.warning("state backend unavailable checking %s for replays: %s", call.name, exc)
            if may_proceed_without_state(self.settings.state.on_unavailable, side_effects):
                return None
            reason = (
                f"the sidecar cannot reach its state backend ({self.store.name}) to check whether "
                f"this {call.name} call already ran; calls with side effects are refused until it is back"
            )
            return Verdict(VerdictKind.DENY, "denied", reasons=[reason], retryable=True)
        if first is None or first.call_id == call.id:  # the same call delivered again is no replay
            return None
        check.replay = {"count": first.count, "first_seen": rfc3339(first.first_seen)}
        if not side_effects or self.traits.repeatable(call.name):
            return None
        return replay_verdict(call, first)


class ReplayLedger(Addon):
    """Writes the ledger: every delivered call, and what became of each replay."""

    name = "replay"

    def __init__(self, store: StateStore, metrics: Metrics) -> None:
        self.store = store
        self.metrics = metrics

    def _state_error(self, what: str, exc: StateUnavailable) -> None:
        self.metrics.state_error(self.store.name)
        log.warning("state backend unavailable (%s): %s", what, exc)

    async def checked(self, exchange: Exchange, checks: list[CallCheck]) -> None:
        """Count replays by what happened: answered from the ledger, or let through."""
        for check in checks:
            if not check.replay.get("count"):
                continue
            tool = check.call.name
            if check.verdict.kind is VerdictKind.REPLAY and check.action in ("repair", "blocked"):
                self.metrics.replay(tool, "answered")
                try:
                    await self.store.note_replay(exchange.session, call_replay_key(exchange.session, check.call))
                except StateUnavailable as exc:
                    self._state_error("note_replay", exc)
            elif check.action in ("allowed", "observed"):
                self.metrics.replay(tool, "allowed")  # its delivery adds to the count

    async def delivered(self, exchange: Exchange, calls: list[ToolCall]) -> None:
        session = exchange.session
        now = self.store.limits.clock()
        for call in calls:
            key = call_replay_key(session, call)
            try:
                known = await self.store.get_call(session, call.id)
                if known is not None and known.replay_key != key:
                    self.metrics.tool_result_anomaly(CALL_ID_REUSED)
                    log.warning("model reused call id %s for a different %s call", call.id, call.name)
                await self.store.record_call(CallRecord(session, call.id, call.name, call.args_hash, key, now))
            except StateUnavailable as exc:
                self._state_error("record_call", exc)


def store_health(store: StateStore) -> Callable[[], Awaitable[dict[str, Any]]]:
    """A /readyz check naming the backend: replicas without their ledger are not ready."""

    async def check() -> dict[str, Any]:
        ok = await store.healthy()
        report: dict[str, Any] = {"ok": ok, "backend": store.name}
        if not ok:
            report["error"] = f"state backend {store.name} is unavailable"
        return report

    return check
