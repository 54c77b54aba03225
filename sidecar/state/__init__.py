"""Session ledger, replay index, approvals: one interface, three backends.

`build_store(settings.state)` picks memory (default), SQLite (one pod, survives restart) or
Redis (shared by replicas). See `base` for the semantics every backend implements.
"""

from __future__ import annotations

from sidecar.config import StateSettings
from sidecar.state.base import (
    Approval,
    ApprovalConflict,
    ApprovalNotFound,
    ApprovalStatus,
    CallRecord,
    Clock,
    Decision,
    Limits,
    StateStore,
    StateUnavailable,
    may_proceed_without_state,
)
from sidecar.state.memory import MemoryStore

__all__ = [
    "Approval",
    "ApprovalConflict",
    "ApprovalNotFound",
    "ApprovalStatus",
    "CallRecord",
    "Clock",
    "Decision",
    "Limits",
    "MemoryStore",
    "StateStore",
    "StateUnavailable",
    "build_store",
    "may_proceed_without_state",
]


def build_store(settings: StateSettings, limits: Limits | None = None) -> StateStore:
    """The backend `settings.backend` names; imports SQLite/Redis code only when used."""
    limits = limits or Limits.from_settings(settings)
    if settings.backend == "sqlite":
        from sidecar.state.sqlite import SQLiteStore

        return SQLiteStore(settings.sqlite_path, limits)
    if settings.backend == "redis":
        from sidecar.state.redis import RedisStore

        return RedisStore(settings.redis_url, limits)
    return MemoryStore(limits)
