"""Session ledger, replay index, approvals: one interface, three backends.

`build_store(settings.state)` picks memory (default), SQLite (one pod, survives restart) or
Redis (shared by replicas). See `base` for the semantics every backend implements.
"""

from __future__ import annotations

from collections.abc import Callable

from sidecar.config import StateSettings
from sidecar.state.base import (
    Approval,
    ApprovalConflict,
    ApprovalNotFound,
    ApprovalStatus,
    CallFacts,
    CallRecord,
    Clock,
    Decision,
    HeldCall,
    HeldState,
    Limits,
    StateStore,
    StateUnavailable,
    may_proceed_without_state,
)
from sidecar.state.guarded import GuardedStore
from sidecar.state.memory import MemoryStore

__all__ = [
    "Approval",
    "ApprovalConflict",
    "ApprovalNotFound",
    "ApprovalStatus",
    "CallFacts",
    "CallRecord",
    "Clock",
    "Decision",
    "GuardedStore",
    "HeldCall",
    "HeldState",
    "Limits",
    "MemoryStore",
    "StateStore",
    "StateUnavailable",
    "build_store",
    "may_proceed_without_state",
]


def build_store(
    settings: StateSettings, limits: Limits | None = None, on_error: Callable[[str], None] | None = None
) -> GuardedStore:
    """The backend `settings.backend` names, behind the guard that turns every backend error
    into StateUnavailable (see `guarded`); imports SQLite/Redis code only when used."""
    limits = limits or Limits.from_settings(settings)
    backend: StateStore
    if settings.backend == "sqlite":
        from sidecar.state.sqlite import SQLiteStore

        backend = SQLiteStore(settings.sqlite_path, limits)
    elif settings.backend == "redis":
        from sidecar.state.redis import RedisStore

        backend = RedisStore(settings.redis_url, limits)
    else:
        backend = MemoryStore(limits)
    return GuardedStore(backend, on_error)
