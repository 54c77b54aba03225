"""The parts of the policy input document (DESIGN.md "Rego policy contract", version 1) that
every phase shares: agent identity, session counts, time.

Built as plain dicts on the hot path (no models, no copies): the embedded engine decides in
~60-90 µs and the Python around it should stay a few µs.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import Any, Protocol

from sidecar.config import Settings
from sidecar.exchange.state import Exchange

log = logging.getLogger("sidecar.policy")

INPUT_VERSION = 1
# Scratch key another addon (session ledger) may fill: (calls_total, calls_by_tool) or
# {"calls_total": int, "calls_by_tool": {tool: int}}.
SESSION_COUNTS_KEY = "session_counts"
_CACHE_KEY = "policy.session_counts"


class SessionCounter(Protocol):
    """What the policy needs from the state store (`StateStore.session_counts`)."""

    async def session_counts(self, session: str) -> tuple[int, dict[str, int]]: ...


def agent_identity(settings: Settings, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """`input.agent`: settings first, then the pod's Downward API variables."""
    env = os.environ if environ is None else environ
    return {
        "id": settings.agent_id or env.get("POD_NAME") or "",
        "namespace": settings.agent_namespace or env.get("POD_NAMESPACE") or "",
        "labels": dict(settings.agent_labels),
    }


class Clock:
    """RFC 3339 UTC time, formatted at most once a second (policies see second precision)."""

    def __init__(self) -> None:
        self._second = -1
        self._text = ""

    def now(self) -> str:
        second = int(time.time())
        if second != self._second:
            self._text = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))
            self._second = second
        return self._text


def _normalise(counts: Any) -> tuple[int, dict[str, int]] | None:
    if isinstance(counts, tuple) and len(counts) == 2:
        return int(counts[0]), dict(counts[1])
    if isinstance(counts, Mapping):
        return int(counts.get("calls_total", 0)), dict(counts.get("calls_by_tool") or {})
    return None


async def session_counts(exchange: Exchange, store: SessionCounter | None) -> tuple[int, dict[str, int]]:
    """(calls_total, calls_by_tool) delivered in this session before this exchange.

    Looked up once per exchange: nothing is delivered while an exchange is being settled,
    so the parallel calls and repair rounds of one exchange share the lookup. Without a
    ledger (no state store wired) the counts are zero: per-session limits cannot apply.
    """
    scratch = exchange.scratch
    found = _normalise(scratch.get(SESSION_COUNTS_KEY))
    if found is not None:
        return found
    cached: tuple[int, dict[str, int]] | None = scratch.get(_CACHE_KEY)
    if cached is not None:
        return cached
    counts: tuple[int, dict[str, int]] = (0, {})
    if store is not None:
        try:
            counts = _normalise(await store.session_counts(exchange.session)) or counts
        except Exception as exc:  # StateUnavailable and friends: decide without the ledger
            log.warning("session counts unavailable for the policy input: %s", exc)
    scratch[_CACHE_KEY] = counts
    return counts


def base_input(
    exchange: Exchange,
    phase: str,
    agent: dict[str, Any],
    counts: tuple[int, dict[str, int]],
    now: str,
) -> dict[str, Any]:
    """The fields every phase carries; callers add tool/call/result/tools."""
    return {
        "version": INPUT_VERSION,
        "phase": phase,
        "provider": exchange.provider.value,
        "model": exchange.view.model,
        "agent": agent,
        "session": {"id": exchange.session, "calls_total": counts[0], "calls_by_tool": counts[1]},
        "time": now,
    }
