"""Per-request context shared by guards, enforcement and addons."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from multidict import CIMultiDict
from yarl import URL

from sidecar.dialects.base import Dialect
from sidecar.model import Provider, RequestView, ToolCall, Verdict


@dataclass(slots=True)
class Exchange:
    """One agent request to a parsed endpoint, and everything done on its behalf."""

    id: str
    provider: Provider
    dialect: Dialect
    session: str
    view: RequestView
    request: dict[str, Any]
    url: URL
    headers: CIMultiDict[str]
    started: float = field(default_factory=time.perf_counter)
    repair_rounds: int = 0
    upstream_seconds: float = 0.0
    hidden_tools: list[str] = field(default_factory=list)
    # Free-form per-exchange data for addons (e.g. spans), keyed by addon name.
    scratch: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class CallCheck:
    """What the guards learnt about one call; the policy input is built from it."""

    call: ToolCall
    exchange: Exchange
    parallel: int
    round: int = 0
    verdict: Verdict = field(default_factory=Verdict.allow)
    validation: Verdict | None = None
    replay: dict[str, Any] = field(default_factory=lambda: {"count": 0, "first_seen": None})
    approval: dict[str, Any] = field(default_factory=lambda: {"status": "none", "id": None, "approved_by": None})
    # Set by the policy guard when a human must approve; the approval guard acts on it.
    approval_request: dict[str, Any] | None = None
    policy_reasons: list[str] = field(default_factory=list)
    # Refusals a guard decided but did not enforce (observe / shadow rollouts).
    observed: list[Verdict] = field(default_factory=list)
    action: str = "allowed"
