"""In-process state: the default for a single sidecar that may forget on restart.

Memory is bounded: each session is an OrderedDict in LRU order, and sessions themselves are
kept in LRU order, so the total bound evicts the oldest entry of the least recently active
session (an approximation of global LRU that costs no extra per-entry structure).
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from dataclasses import replace

from sidecar.state.base import (
    Approval,
    CallRecord,
    Decision,
    HeldState,
    Limits,
    approval_retention,
    check_decidable,
    consumable,
    decided,
    matches,
)


class _Session:
    __slots__ = ("calls", "counts", "last_expiry", "name", "replays")

    def __init__(self, name: str) -> None:
        self.name = name  # one string shared by all the session's records (memory per call)
        self.calls: OrderedDict[str, CallRecord] = OrderedDict()
        self.replays: dict[str, str] = {}  # replay key -> call id of its first delivery
        self.counts: dict[str, int] = {}
        self.last_expiry = 0.0  # when the newest call expires: the session's counts go then


class MemoryStore:
    """All state in dicts; no awaits inside a method, so every method is atomic."""

    name = "memory"

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._total = 0
        self._approvals: dict[str, Approval] = {}
        self._newest_approval: dict[tuple[str, str, str], str] = {}
        self._held: OrderedDict[str, tuple[float, bytes]] = OrderedDict()  # key -> (expires, record)

    # -- ledger ------------------------------------------------------------------------------

    def _session(self, session: str) -> _Session | None:
        s = self._sessions.get(session)
        if s is not None and self.limits.clock() >= s.last_expiry:
            self._drop_session(session)
            return None
        return s

    def _drop_session(self, session: str) -> None:
        s = self._sessions.pop(session)
        self._total -= len(s.calls)

    def _evict_one(self, s: _Session) -> None:
        self._evict(s, next(iter(s.calls)))

    def _evict(self, s: _Session, call_id: str) -> None:
        rec = s.calls.pop(call_id)
        if s.replays.get(rec.replay_key) == rec.call_id:
            del s.replays[rec.replay_key]
        self._total -= 1

    def _touch(self, session: str, s: _Session, rec: CallRecord) -> None:
        s.calls.move_to_end(rec.call_id)
        self._sessions.move_to_end(session)

    def _live(self, s: _Session | None, call_id: str | None) -> CallRecord | None:
        rec = s.calls.get(call_id) if s is not None and call_id is not None else None
        return rec if rec is not None and self.limits.alive(rec) else None

    async def record_call(self, rec: CallRecord) -> None:
        lim = self.limits
        now = lim.clock()
        while self._sessions:  # sessions idle past their TTL leave from the LRU end
            name, idle = next(iter(self._sessions.items()))
            if now < idle.last_expiry:
                break
            self._drop_session(name)
        s = self._session(rec.session)
        if s is None:
            s = self._sessions[rec.session] = _Session(rec.session)
        rec = replace(rec, session=s.name, tool=sys.intern(rec.tool), count=1)
        if rec.call_id in s.calls:  # recorded again: the new delivery replaces the old one
            self._evict(s, rec.call_id)
        first = self._live(s, s.replays.get(rec.replay_key))
        if first is not None and first.call_id != rec.call_id:
            first.count += 1
            s.calls.move_to_end(first.call_id)
        else:
            s.replays[rec.replay_key] = rec.call_id
        s.calls[rec.call_id] = rec
        self._total += 1
        self._touch(rec.session, s, rec)
        s.counts[rec.tool] = s.counts.get(rec.tool, 0) + 1
        s.last_expiry = max(s.last_expiry, lim.expires_at(rec))
        while len(s.calls) > lim.max_per_session:
            self._evict_one(s)
        while self._total > lim.max_total:
            oldest_name, oldest = next(iter(self._sessions.items()))
            if oldest.calls:
                self._evict_one(oldest)
            if not oldest.calls and oldest is not s:
                self._drop_session(oldest_name)

    async def find_replay(self, session: str, replay_key: str) -> CallRecord | None:
        s = self._session(session)
        rec = self._live(s, s.replays.get(replay_key) if s else None)
        return replace(rec) if rec else None

    async def note_replay(self, session: str, replay_key: str) -> int:
        s = self._session(session)
        rec = self._live(s, s.replays.get(replay_key) if s else None)
        if s is None or rec is None:
            return 0
        rec.count += 1
        self._touch(session, s, rec)
        return rec.count

    async def get_call(self, session: str, call_id: str) -> CallRecord | None:
        rec = self._live(self._session(session), call_id)
        return replace(rec) if rec else None

    async def record_result(self, session: str, call_id: str, result: str, is_error: bool, at: float) -> bool:
        s = self._session(session)
        rec = self._live(s, call_id)
        if s is None or rec is None or rec.result_at is not None:
            return False
        rec.result, rec.result_truncated = self.limits.truncate(result)
        rec.result_is_error, rec.result_at = is_error, at
        self._touch(session, s, rec)
        return True

    async def session_counts(self, session: str) -> tuple[int, dict[str, int]]:
        s = self._session(session)
        counts = dict(s.counts) if s else {}
        return sum(counts.values()), counts

    # -- approvals ---------------------------------------------------------------------------

    async def create_approval(self, a: Approval) -> None:
        self._approvals[a.id] = replace(a)
        self._newest_approval[(a.session, a.tool, a.args_hash)] = a.id

    async def get_approval(self, approval_id: str) -> Approval | None:
        a = self._approvals.get(approval_id)
        return replace(a).effective(self.limits.clock()) if a else None  # a copy: no aliasing

    async def list_approvals(
        self,
        status: str | None = "pending",
        group: str | None = None,
        tool: str | None = None,
        session: str | None = None,
    ) -> list[Approval]:
        now = self.limits.clock()
        seen = (a.effective(now) for a in self._approvals.values())
        found = [replace(a) for a in seen if matches(a, status, group, tool, session)]
        return sorted(found, key=lambda a: a.created)

    async def decide_approval(
        self, approval_id: str, status: Decision, decided_by: str, comment: str | None, now: float
    ) -> Approval:
        a = check_decidable(self._approvals.get(approval_id), approval_id, now)
        self._approvals[approval_id] = d = decided(a, status, decided_by, comment, now)
        return replace(d)

    async def find_approval(self, session: str, tool: str, args_hash: str) -> Approval | None:
        approval_id = self._newest_approval.get((session, tool, args_hash))
        return await self.get_approval(approval_id) if approval_id else None

    async def consume_approval(self, approval_id: str, now: float) -> bool:
        a = self._approvals.get(approval_id)
        if a is None or not consumable(a, now):
            return False
        a.status = "consumed"
        return True

    async def expire_approvals(self, now: float) -> list[Approval]:
        expired: list[Approval] = []
        for approval_id, a in list(self._approvals.items()):
            if a.status == "pending" and now >= a.expires:
                a.status = "expired"
                expired.append(replace(a))
            if now >= approval_retention(a, self.limits):
                del self._approvals[approval_id]
                key = (a.session, a.tool, a.args_hash)
                if self._newest_approval.get(key) == approval_id:
                    del self._newest_approval[key]
        return expired

    # -- what providers hold ------------------------------------------------------------------

    async def remember_held(self, key: str, state: HeldState) -> None:
        # Kept serialised: a caller editing its record never edits the stored one.
        self._held[key] = (self.limits.clock() + self.limits.ttl_s, state.to_json())
        self._held.move_to_end(key)
        while len(self._held) > self.limits.max_total:
            self._held.popitem(last=False)

    async def held(self, key: str) -> HeldState | None:
        entry = self._held.get(key)
        if entry is None:
            return None
        if self.limits.clock() >= entry[0]:
            del self._held[key]
            return None
        return HeldState.from_json(entry[1])

    async def forget_held(self, key: str) -> None:
        self._held.pop(key, None)

    async def healthy(self) -> bool:
        return True

    async def close(self) -> None:
        return None
