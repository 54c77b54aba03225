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
from sidecar.model import Session

log = logging.getLogger("sidecar.policy")

INPUT_VERSION = 1


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


def base_input(
    phase: str,
    provider: str,
    model: str,
    agent: dict[str, Any],
    session: Session,
    counts: tuple[int, dict[str, int]],
    now: str,
) -> dict[str, Any]:
    """The fields every phase carries; callers add tool/call/result/tools. `session.source`
    says where the id came from; only a `derived` one may merge conversations."""
    return {
        "version": INPUT_VERSION,
        "phase": phase,
        "provider": provider,
        "model": model,
        "agent": agent,
        "session": {
            "id": session.id,
            "source": session.source.value,
            "calls_total": counts[0],
            "calls_by_tool": counts[1],
        },
        "time": now,
    }
