"""Every state backend behind one guard: any error is "state unavailable", counted, and seen.

A backend can fail in many ways besides a lost connection: Redis answers `OOM command not
allowed` or `READONLY`, SQLite's disk is full or its file read-only, a bug raises. For the
filters whose promises depend on the store (the replay ledger, approvals) every one of those
means the same thing: the state is unavailable, so they fail closed (`state.on_unavailable`).
`GuardedStore` wraps a backend so that:

- every exception a method raises becomes `StateUnavailable` (naming the backend and the
  operation; the original is chained), and is counted in `sidecar_state_errors_total`;
- the write path is tracked: after a failed write and until a write succeeds again, the store
  is not healthy, so `/readyz` reports a failing write path, not only a failing read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from sidecar.state.base import (
    Approval,
    ApprovalConflict,
    ApprovalNotFound,
    CallFacts,
    CallRecord,
    Decision,
    HeldState,
    Limits,
    StateStore,
    StateUnavailable,
)
from sidecar.telemetry.redact import redact_text

log = logging.getLogger("sidecar.state")

T = TypeVar("T")

# Raised on purpose by a backend: part of the interface, not a failure of the store.
_EXPECTED = (ApprovalConflict, ApprovalNotFound)


class GuardedStore:
    """A StateStore that only ever fails with StateUnavailable, and reports its health."""

    def __init__(self, backend: StateStore, on_error: Callable[[str], None] | None = None) -> None:
        self.backend = backend
        self.name = backend.name
        self._on_error = on_error
        self.write_failed_at: float | None = None
        self.last_error: str | None = None

    @property
    def limits(self) -> Limits:
        """The backend's ledger limits and clock (one object: setting it sets the backend's)."""
        return self.backend.limits

    @limits.setter
    def limits(self, value: Limits) -> None:
        self.backend.limits = value

    def _failed(self, operation: str, exc: BaseException, write: bool) -> StateUnavailable:
        # A backend error can quote its URL with the password (redis://:PASSWORD@host).
        message = redact_text(f"{self.name} {operation}: {type(exc).__name__}: {exc}")
        self.last_error = message
        if write and self.write_failed_at is None:
            self.write_failed_at = time.time()
        if self._on_error is not None:
            self._on_error(self.name)
        log.warning("state backend error: %s", message)
        return StateUnavailable(message)

    async def _call(self, operation: str, write: bool, step: Awaitable[T]) -> T:
        try:
            result = await step
        except _EXPECTED:
            raise
        except StateUnavailable as exc:
            raise self._failed(operation, exc.__cause__ or exc, write) from exc
        except Exception as exc:
            raise self._failed(operation, exc, write) from exc
        if write:
            self.write_failed_at = None
        return result

    # -- ledger --------------------------------------------------------------------------------

    async def record_call(self, rec: CallRecord) -> None:
        await self._call("record_call", True, self.backend.record_call(rec))

    async def record_calls(self, records: Sequence[CallRecord]) -> None:
        await self._call("record_calls", True, self.backend.record_calls(records))

    async def find_replay(self, session: str, replay_key: str) -> CallRecord | None:
        return await self._call("find_replay", False, self.backend.find_replay(session, replay_key))

    async def note_replay(self, session: str, replay_key: str) -> int:
        return await self._call("note_replay", True, self.backend.note_replay(session, replay_key))

    async def get_call(self, session: str, call_id: str) -> CallRecord | None:
        return await self._call("get_call", False, self.backend.get_call(session, call_id))

    async def get_calls(self, session: str, call_ids: Sequence[str]) -> dict[str, CallRecord]:
        return await self._call("get_calls", False, self.backend.get_calls(session, call_ids))

    async def look_up_call(self, session: str, replay_key: str, call_id: str) -> CallFacts:
        return await self._call("look_up_call", False, self.backend.look_up_call(session, replay_key, call_id))

    async def record_result(self, session: str, call_id: str, result: str, is_error: bool, at: float) -> bool:
        step = self.backend.record_result(session, call_id, result, is_error, at)
        return await self._call("record_result", True, step)

    async def session_counts(self, session: str) -> tuple[int, dict[str, int]]:
        return await self._call("session_counts", False, self.backend.session_counts(session))

    # -- approvals -----------------------------------------------------------------------------

    async def create_approval(self, a: Approval) -> None:
        await self._call("create_approval", True, self.backend.create_approval(a))

    async def get_approval(self, approval_id: str) -> Approval | None:
        return await self._call("get_approval", False, self.backend.get_approval(approval_id))

    async def list_approvals(
        self,
        status: str | None = "pending",
        group: str | None = None,
        tool: str | None = None,
        session: str | None = None,
    ) -> list[Approval]:
        step = self.backend.list_approvals(status, group, tool, session)
        return await self._call("list_approvals", False, step)

    async def decide_approval(
        self, approval_id: str, status: Decision, decided_by: str, comment: str | None, now: float
    ) -> Approval:
        step = self.backend.decide_approval(approval_id, status, decided_by, comment, now)
        return await self._call("decide_approval", True, step)

    async def find_approval(self, session: str, tool: str, args_hash: str) -> Approval | None:
        return await self._call("find_approval", False, self.backend.find_approval(session, tool, args_hash))

    async def consume_approval(self, approval_id: str, now: float) -> bool:
        return await self._call("consume_approval", True, self.backend.consume_approval(approval_id, now))

    async def expire_approvals(self, now: float) -> list[Approval]:
        return await self._call("expire_approvals", True, self.backend.expire_approvals(now))

    # -- provider-held conversations -------------------------------------------------------------

    async def remember_held(self, key: str, state: HeldState) -> None:
        await self._call("remember_held", True, self.backend.remember_held(key, state))

    async def held(self, key: str) -> HeldState | None:
        return await self._call("held", False, self.backend.held(key))

    async def forget_held(self, key: str) -> None:
        await self._call("forget_held", True, self.backend.forget_held(key))

    # -- health --------------------------------------------------------------------------------

    async def healthy(self) -> bool:
        try:
            reachable = await self.backend.healthy()
        except Exception as exc:
            self.last_error = redact_text(f"{self.name} health check: {type(exc).__name__}: {exc}")
            return False
        return reachable and self.write_failed_at is None

    def health(self) -> dict[str, Any]:
        """The write path's state, for /readyz and /v1/status."""
        return {
            "write_path_ok": self.write_failed_at is None,
            "write_failing_since": self.write_failed_at,
            "last_error": self.last_error,
        }

    async def close(self) -> None:
        await self.backend.close()


def guard(backend: StateStore, on_error: Callable[[str], None] | None = None) -> GuardedStore:
    return backend if isinstance(backend, GuardedStore) else GuardedStore(backend, on_error)


__all__ = ["GuardedStore", "guard"]
