"""In-process state: the default for a single sidecar that may forget on restart.

Memory is bounded: each session keeps its calls in LRU order, and sessions themselves are kept
in LRU order, so the total bound evicts the oldest entry of the least recently active session
(an approximation of global LRU that costs no extra per-entry structure).

The ledger is the one structure here that grows with traffic (up to `max_entries_total`
calls), so an entry is kept compact: a session's calls in a plain dict (insertion order is the
LRU order; a touch re-inserts), sha256 digests as their 32 bytes instead of 64 hex characters,
and the result fields in one slot that stays empty until a result comes.
`bench/bench_sessions.py` measures what this saves; `bench/bench_state.py` what it costs.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from dataclasses import replace
from typing import TypeVar

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

# A sha256 hex digest is kept as its 32 bytes (65 bytes of memory instead of 113); any other
# string (a test's "k1", an empty hash) is kept as given. The two never compare equal.
Digest = bytes | str
# The replay index is one dict for all sessions. Replay keys are digests over the session
# (sidecar/identity.py), so their bytes alone are unique; a key that is not a digest, or a
# digest another session already holds, is qualified by its session.
ReplayIndexKey = bytes | tuple[str, str]
_V = TypeVar("_V")


def _pack(hex_digest: str) -> Digest:
    if len(hex_digest) == 64:
        try:
            raw = bytes.fromhex(hex_digest)
        except ValueError:
            return hex_digest
        if raw.hex() == hex_digest:  # lower case only: unpacking must give the same string back
            return raw
    return hex_digest


def _unpack(digest: Digest) -> str:
    return digest.hex() if isinstance(digest, bytes) else digest


def _replay_key(key: ReplayIndexKey) -> str:
    return key.hex() if isinstance(key, bytes) else key[1]


class _Answer:
    """A call's result, once the agent sent one."""

    __slots__ = ("at", "is_error", "result", "truncated")

    def __init__(self, result: str, truncated: bool, is_error: bool, at: float) -> None:
        self.result, self.truncated, self.is_error, self.at = result, truncated, is_error, at


class _Entry:
    """One delivered call: a `CallRecord` without its session (the session holds it)."""

    __slots__ = ("answer", "args_hash", "call_id", "count", "delivered_at", "replay_key", "session", "tool")

    def __init__(self, session: str, rec: CallRecord, replay_key: ReplayIndexKey) -> None:
        self.session = session  # the session's own string: one per session, not per call
        self.call_id = rec.call_id
        self.tool = sys.intern(rec.tool)
        self.args_hash = _pack(rec.args_hash)
        self.replay_key = replay_key
        self.delivered_at = rec.delivered_at
        self.answer: _Answer | None = None
        self.count = 1

    def record(self) -> CallRecord:
        """A copy for the caller: editing it never edits the ledger."""
        a = self.answer
        return CallRecord(
            self.session,
            self.call_id,
            self.tool,
            _unpack(self.args_hash),
            _replay_key(self.replay_key),
            self.delivered_at,
            result=a.result if a else None,
            result_is_error=a.is_error if a else None,
            result_at=a.at if a else None,
            result_truncated=a.truncated if a else False,
            count=self.count,
        )


class _Session:
    __slots__ = ("calls", "counts", "last_expiry", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: dict[str, _Entry] = {}  # by call id, least recently used first
        self.counts: dict[str, int] = {}
        self.last_expiry = 0.0  # when the newest call expires: the session's counts go then


def _to_end(d: dict[str, _V], key: str) -> None:
    """Move `key` to the most recently used end of an insertion-ordered dict."""
    d[key] = d.pop(key)


class MemoryStore:
    """All state in dicts; no awaits inside a method, so every method is atomic."""

    name = "memory"

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        # Least recently active first. An OrderedDict: the oldest is taken on every write, and
        # a plain dict finds its first entry by skipping the slots its deletions left (measured
        # 8 -> 34 us per record_call once the total bound evicts).
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._replays: dict[ReplayIndexKey, _Entry] = {}  # replay key -> its first live delivery
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
        for entry in s.calls.values():
            self._unindex(entry)

    def _evict(self, s: _Session, call_id: str) -> None:
        self._unindex(s.calls.pop(call_id))
        self._total -= 1

    def _unindex(self, entry: _Entry) -> None:
        if self._replays.get(entry.replay_key) is entry:
            del self._replays[entry.replay_key]

    def _indexed(self, session: str, replay_key: str) -> tuple[ReplayIndexKey, _Entry | None]:
        """Where a new delivery of this session's replay key goes in the index, and the
        entry the index holds for it now (either form), if any."""
        packed = _pack(replay_key)
        qualified = (session, replay_key)
        if isinstance(packed, bytes):
            holder = self._replays.get(packed)
            if holder is None:
                return packed, self._replays.get(qualified)
            if holder.session == session:
                return packed, holder
        return qualified, self._replays.get(qualified)

    def _touch(self, s: _Session, entry: _Entry) -> None:
        _to_end(s.calls, entry.call_id)
        self._sessions.move_to_end(s.name)

    def _live(self, entry: _Entry | None) -> _Entry | None:
        return entry if entry is not None and self.limits.alive(entry) else None

    def _replay(self, session: str, replay_key: str) -> tuple[_Session | None, _Entry | None]:
        s = self._session(session)
        if s is None:
            return None, None
        return s, self._live(self._indexed(session, replay_key)[1])

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
        if rec.call_id in s.calls:  # recorded again: the new delivery replaces the old one
            self._evict(s, rec.call_id)
        index_key, held = self._indexed(s.name, rec.replay_key)
        entry = _Entry(s.name, rec, index_key)
        first = self._live(held)
        if first is not None and first.call_id != entry.call_id:
            first.count += 1
            _to_end(s.calls, first.call_id)
        else:
            self._replays[entry.replay_key] = entry
        s.calls[entry.call_id] = entry
        self._total += 1
        self._touch(s, entry)
        s.counts[entry.tool] = s.counts.get(entry.tool, 0) + 1
        s.last_expiry = max(s.last_expiry, lim.expires_at(rec))
        while len(s.calls) > lim.max_per_session:
            self._evict(s, next(iter(s.calls)))
        while self._total > lim.max_total:
            oldest_name, oldest = next(iter(self._sessions.items()))
            if oldest.calls:
                self._evict(oldest, next(iter(oldest.calls)))
            if not oldest.calls and oldest is not s:
                self._drop_session(oldest_name)

    async def find_replay(self, session: str, replay_key: str) -> CallRecord | None:
        _, entry = self._replay(session, replay_key)
        return entry.record() if entry is not None else None

    async def note_replay(self, session: str, replay_key: str) -> int:
        s, entry = self._replay(session, replay_key)
        if s is None or entry is None:
            return 0
        entry.count += 1
        self._touch(s, entry)
        return entry.count

    async def get_call(self, session: str, call_id: str) -> CallRecord | None:
        s = self._session(session)
        entry = self._live(s.calls.get(call_id) if s is not None else None)
        return entry.record() if entry is not None else None

    async def record_result(self, session: str, call_id: str, result: str, is_error: bool, at: float) -> bool:
        s = self._session(session)
        entry = self._live(s.calls.get(call_id) if s is not None else None)
        if s is None or entry is None or entry.answer is not None:
            return False
        entry.answer = _Answer(*self.limits.truncate(result), is_error, at)
        self._touch(s, entry)
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
