"""In-process state: the default for a single sidecar that may forget on restart.

Memory is bounded: each session keeps its calls in LRU order, and sessions themselves are kept
in LRU order, so the total bound evicts the oldest entry of the least recently active session
(an approximation of global LRU that costs no extra per-entry structure). Over either bound, a
session's expired calls leave before its live ones.

The ledger is the one structure here that grows with traffic (up to `max_entries_total`
calls), so it is kept compact:

- a call is one small object and one bytes record (`_Entry.record`): when it was delivered,
  whether it holds its replay key, and its call id, replay key and arguments hash (sha256
  digests as their 32 bytes); its result takes a slot that stays empty until the result comes;
- a session of up to `_SMALL` calls keeps them in a list and scans it (a few comparisons of
  bytes, no allocation); a larger one gets a dict by call id and one by replay key, whose
  keys its entries share (their records keep only the rest). So a session's replay lookups
  never cost an index entry while it is small, and never a scan longer than `_SMALL` once it
  is not;
- a session's per-tool counts are counted from its calls until one of them leaves while the
  session lives on (or it outgrows `_SMALL`); from then they are kept.

`bench/bench_sessions.py` measures what this holds (RSS after 100,000 sessions of two calls);
`bench/bench_state.py` what it costs per operation.
"""

from __future__ import annotations

import math
import struct
import sys
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

from sidecar.memo import ShortMemo
from sidecar.state.base import (
    Approval,
    CallFacts,
    CallRecord,
    Decision,
    HeldState,
    Limits,
    approval_retention,
    check_decidable,
    consumable,
    decided,
    matches,
    one_session,
)

_SMALL = 8  # calls a session keeps in a list it scans; past this, it gets dicts
_HEAD = struct.Struct("<dB")  # delivered_at, whether the call holds its replay key
_HOLDS_AT = _HEAD.size - 1  # where that flag is
_LENGTH = struct.Struct("<I")
_DIGEST, _TEXT = 0, 1  # a field's first byte: 32 raw bytes follow, or a length and UTF-8
_DIGEST_MARK, _TEXT_MARK = bytes((_DIGEST,)), bytes((_TEXT,))


# Fields made lately, by their text: a call's id and replay key are each made into a field
# when the call is looked up and again when it is recorded (about 4.7 k instructions for a
# digest, a dict lookup when remembered). Only short texts (digests are 64 characters, provider
# call ids about 30): a call id is whatever the model or the agent wrote. Emptied when full; at
# most about 1,024 x 0.5 KB.
_FIELDS_MAX = 1024
_FIELD_TEXT_MAX = 128
_fields: ShortMemo[str, bytes] = ShortMemo(_FIELDS_MAX, _FIELD_TEXT_MAX)


def _field(text: str) -> bytes:
    """One string as a record field. A lower-case sha256 hex digest is kept as its 32 bytes;
    any other string (a call id, a test's "k1") as its UTF-8 after its length. The encoding is
    prefix-free, so `record.startswith(field, offset)` is an exact comparison."""
    made = _fields.get(text)
    if made is None:
        made = _fields.keep(text, _make_field(text), len(text))
    return made


def _make_field(text: str) -> bytes:
    if len(text) == 64:
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            raw = b""
        if raw and raw.hex() == text:  # lower case only: decoding must give the same string back
            return _DIGEST_MARK + raw
    data = text.encode("utf-8", "surrogatepass")
    return _TEXT_MARK + _LENGTH.pack(len(data)) + data


def _field_end(record: bytes, at: int) -> int:
    if record[at] == _DIGEST:
        return at + 33
    return at + 5 + int(_LENGTH.unpack_from(record, at + 1)[0])


def _read_field(record: bytes, at: int) -> tuple[str, int]:
    """The string of the field at `at`, and where the next one starts (`_field_end`, inlined:
    a lookup reads three fields)."""
    if record[at] == _DIGEST:
        return record[at + 1 : at + 33].hex(), at + 33
    end = at + 5 + _LENGTH.unpack_from(record, at + 1)[0]
    return record[at + 5 : end].decode("utf-8", "surrogatepass"), end


def _copy(entry: _Entry | None, session: str) -> CallRecord | None:
    """What a lookup answers: a copy of the live entry found (editing it never edits the ledger)."""
    return entry.to_record(session) if entry is not None else None


class _Answer:
    """A call's result, once the agent sent one."""

    __slots__ = ("at", "is_error", "result", "truncated")

    def __init__(self, result: str, truncated: bool, is_error: bool, at: float) -> None:
        self.result, self.truncated, self.is_error, self.at = result, truncated, is_error, at


def _head(rec: CallRecord, holds_key: bool) -> bytes:
    return _HEAD.pack(rec.delivered_at, holds_key)


class _Entry:
    """One delivered call: a `CallRecord` without its session (the session holds it).

    `record` starts with the head (`_HEAD`); what follows is the form's own (`_ListedEntry`,
    `_IndexedEntry`). It never changes; the count and the answer do."""

    __slots__ = ("answer", "count", "record", "tool")

    def __init__(self, record: bytes, tool: str) -> None:
        self.record = record
        self.tool = sys.intern(tool)
        self.answer: _Answer | None = None
        self.count = 1

    @property
    def delivered_at(self) -> float:
        return float(_HEAD.unpack_from(self.record)[0])

    @property
    def holds_key(self) -> bool:
        """Whether this delivery holds its replay key: no live one held it when it came."""
        return self.record[_HOLDS_AT] == 1

    @property
    def call_id(self) -> str:
        return self.fields()[0]

    def fields(self) -> tuple[str, str, str]:
        """Call id, replay key, arguments hash."""
        raise NotImplementedError

    def to_record(self, session: str) -> CallRecord:
        """A copy for the caller: editing it never edits the ledger."""
        call_id, replay_key, args_hash = self.fields()
        a = self.answer
        return CallRecord(
            session,
            call_id,
            self.tool,
            args_hash,
            replay_key,
            self.delivered_at,
            result=a.result if a else None,
            result_is_error=a.is_error if a else None,
            result_at=a.at if a else None,
            result_truncated=a.truncated if a else False,
            count=self.count,
        )


class _ListedEntry(_Entry):
    """A call of a small session: after the head, three fields (`_field`): call id, replay
    key, arguments hash. The list scans them in place."""

    __slots__ = ()

    @classmethod
    def new(cls, rec: CallRecord, call: bytes, key: bytes, holds_key: bool) -> _ListedEntry:
        """`call` and `key`: the record's call id and replay key as fields (`_field`)."""
        return cls(_head(rec, holds_key) + call + key + _field(rec.args_hash), rec.tool)

    @property
    def call_id(self) -> str:
        return _read_field(self.record, _HEAD.size)[0]

    def _key_at(self) -> int:
        return _field_end(self.record, _HEAD.size)

    def is_call(self, call: bytes) -> bool:
        return self.record.startswith(call, _HEAD.size)

    def holds(self, key: bytes) -> bool:
        return self.holds_key and self.record.startswith(key, self._key_at())

    def fields(self) -> tuple[str, str, str]:
        call_id, at = _read_field(self.record, _HEAD.size)
        replay_key, at = _read_field(self.record, at)
        return call_id, replay_key, _read_field(self.record, at)[0]


class _IndexedEntry(_Entry):
    """A call of a large session. Its call id and replay key are the index's keys already,
    so the entry holds those objects and its record keeps only the head and the arguments hash."""

    __slots__ = ("call", "key")

    def __init__(self, record: bytes, tool: str, call_id: str, key: bytes) -> None:
        super().__init__(record, tool)
        self.call, self.key = call_id, key

    @classmethod
    def new(cls, rec: CallRecord, key: bytes, holds_key: bool) -> _IndexedEntry:
        return cls(_head(rec, holds_key) + _field(rec.args_hash), rec.tool, rec.call_id, key)

    @classmethod
    def moved(cls, listed: _ListedEntry) -> _IndexedEntry:
        """A small session's entry, as its session outgrows the list."""
        record, head = listed.record, _HEAD.size
        key_at = _field_end(record, head)
        args_at = _field_end(record, key_at)
        entry = cls(record[:head] + record[args_at:], listed.tool, listed.call_id, record[key_at:args_at])
        entry.answer, entry.count = listed.answer, listed.count
        return entry

    @property
    def call_id(self) -> str:
        return self.call

    def fields(self) -> tuple[str, str, str]:
        return self.call, _read_field(self.key, 0)[0], _read_field(self.record, _HEAD.size)[0]


class _Listed(list[_ListedEntry]):
    """A small session's calls, least recently used first, scanned (a few comparisons of
    bytes, no allocation). A list with no slots of its own: no bigger than a list."""

    __slots__ = ()

    def get(self, call_id: str, call: bytes | None = None) -> _Entry | None:
        wanted = _field(call_id) if call is None else call
        for entry in self:
            if entry.is_call(wanted):
                return entry
        return None

    def holder(self, key: bytes) -> _Entry | None:
        """The newest delivery holding the key. An older holder of the same key has expired: a
        new one is made only when none is live."""
        for entry in reversed(self):
            if entry.holds(key):
                return entry
        return None

    def add(self, rec: CallRecord, call: bytes, key: bytes, holds_key: bool) -> None:
        self.append(_ListedEntry.new(rec, call, key, holds_key))

    def drop(self, entry: _Entry) -> _ListedEntry:
        for i, listed in enumerate(self):
            if listed is entry:
                return self.pop(i)
        raise ValueError("not a call of this session")

    def touch(self, entry: _Entry) -> None:
        self.append(self.drop(entry))


class _Index:
    """A large session's calls: by call id (least recently used first) and by replay key."""

    __slots__ = ("by_id", "holders")

    def __init__(self, entries: Iterable[_ListedEntry]) -> None:
        self.by_id: dict[str, _IndexedEntry] = {}
        self.holders: dict[bytes, _IndexedEntry] = {}
        for entry in entries:
            self._put(_IndexedEntry.moved(entry))

    def __len__(self) -> int:
        return len(self.by_id)

    def __iter__(self) -> Iterator[_Entry]:
        return iter(self.by_id.values())

    def get(self, call_id: str, call: bytes | None = None) -> _Entry | None:
        return self.by_id.get(call_id)

    def holder(self, key: bytes) -> _Entry | None:
        return self.holders.get(key)

    def add(self, rec: CallRecord, call: bytes, key: bytes, holds_key: bool) -> None:
        self._put(_IndexedEntry.new(rec, key, holds_key))

    def _put(self, entry: _IndexedEntry) -> None:
        self.by_id[entry.call] = entry
        if entry.holds_key:
            self.holders[entry.key] = entry

    def drop(self, entry: _Entry) -> _IndexedEntry:
        indexed = self.by_id.pop(entry.call_id)
        if self.holders.get(indexed.key) is indexed:
            del self.holders[indexed.key]
        return indexed

    def touch(self, entry: _Entry) -> None:
        call_id = entry.call_id
        self.by_id[call_id] = self.by_id.pop(call_id)


class _Session:
    """One session's calls, least recently used first: a `_Listed` while small, else an `_Index`."""

    __slots__ = ("calls", "first_expiry", "last_expiry", "name", "tally")

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: _Listed | _Index = _Listed()
        self.tally: dict[str, int] | None = None  # kept per-tool counts; None: count the calls
        self.last_expiry = 0.0  # when the newest call expires: the session's counts go then
        # No call of the session expires before this (a lower bound: a call that left may
        # have set it); until then none can be expired and holding a place of a live one.
        self.first_expiry = math.inf

    def __len__(self) -> int:
        return len(self.calls)

    def oldest(self) -> _Entry:
        return next(iter(self.calls))

    def add(self, rec: CallRecord, call: bytes, key: bytes, holds_key: bool) -> None:
        """A new delivery, at the most recently used end. `call`, `key`: its fields."""
        if self.tally is not None:
            self.tally[rec.tool] = self.tally.get(rec.tool, 0) + 1
        self.calls.add(rec, call, key, holds_key)
        if len(self.calls) > _SMALL and isinstance(self.calls, _Listed):
            self._keep_counts()
            self.calls = _Index(self.calls)

    def remove(self, entry: _Entry) -> None:
        """The entry leaves; the session's counts still count it."""
        self._keep_counts()
        self.calls.drop(entry)

    def _keep_counts(self) -> None:
        if self.tally is None:
            self.tally = self.counts()

    def counts(self) -> dict[str, int]:
        if self.tally is not None:
            return dict(self.tally)
        counts: dict[str, int] = {}
        for entry in self.calls:
            counts[entry.tool] = counts.get(entry.tool, 0) + 1
        return counts


class MemoryStore:
    """All state in dicts; no awaits inside a method, so every method is atomic."""

    name = "memory"

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        # Least recently active first. An OrderedDict: the oldest is taken on every write, and
        # a plain dict finds its first entry by skipping the slots its deletions left (measured
        # 8 -> 34 us per record_call once the total bound evicts).
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
        self._total -= len(self._sessions.pop(session))

    def _evict(self, s: _Session, entry: _Entry) -> None:
        s.remove(entry)
        self._total -= 1

    def _touch(self, s: _Session, entry: _Entry) -> None:
        s.calls.touch(entry)
        self._sessions.move_to_end(s.name)

    def _live(self, entry: _Entry | None) -> _Entry | None:
        return entry if entry is not None and self.limits.alive(entry) else None

    def _call(self, session: str, call_id: str) -> tuple[_Session | None, _Entry | None]:
        s = self._session(session)
        return s, self._live(s.calls.get(call_id) if s is not None else None)

    def _replay(self, session: str, replay_key: str) -> tuple[_Session | None, _Entry | None]:
        s = self._session(session)
        return s, self._live(s.calls.holder(_field(replay_key)) if s is not None else None)

    async def record_call(self, rec: CallRecord) -> None:
        self._record_call(rec)

    async def record_calls(self, records: Sequence[CallRecord]) -> None:
        if not records:
            return
        one_session(records)
        for rec in records:
            self._record_call(rec)

    def _record_call(self, rec: CallRecord) -> None:
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
        call, key = _field(rec.call_id), _field(rec.replay_key)
        again = s.calls.get(rec.call_id, call)
        if again is not None:  # recorded again: the new delivery replaces the old one
            self._evict(s, again)
        first = self._live(s.calls.holder(key))
        if first is not None:  # a replay: counted on the delivery that holds the key
            first.count += 1
            s.calls.touch(first)
        s.add(rec, call, key, holds_key=first is None)
        self._total += 1
        self._sessions.move_to_end(s.name)
        expiry = lim.expires_at(rec)
        s.last_expiry = max(s.last_expiry, expiry)
        s.first_expiry = min(s.first_expiry, expiry)
        if len(s) > lim.max_per_session and now >= s.first_expiry:
            self._drop_expired(s, now)
        while len(s) > lim.max_per_session:
            self._evict(s, s.oldest())
        while self._total > lim.max_total:
            oldest_name, oldest = next(iter(self._sessions.items()))
            if len(oldest) and now >= oldest.first_expiry:
                self._drop_expired(oldest, now)  # its expired calls first (then first_expiry > now)
            elif len(oldest):
                self._evict(oldest, oldest.oldest())
            if not len(oldest) and oldest is not s:
                self._drop_session(oldest_name)

    def _drop_expired(self, s: _Session, now: float) -> None:
        """A full session's expired calls leave before the least recently used live one: an
        expired call is forgotten already (no lookup finds it), and evicting a live call in its
        place would forget that one early, a replay let through (SQLite and Redis drop expired
        calls first too). A session's calls can be touched after they expire (a result, a
        replay), so expired ones are not only at its least recently used end. The scan runs
        only once a call may have expired (`first_expiry`), and leaves `first_expiry` at the
        earliest live call's: about once per call that expires in a full session."""
        lim = self.limits
        for entry in [e for e in s.calls if not lim.alive(e, now)]:
            self._evict(s, entry)
        s.first_expiry = min((lim.expires_at(e) for e in s.calls), default=math.inf)

    async def find_replay(self, session: str, replay_key: str) -> CallRecord | None:
        _, entry = self._replay(session, replay_key)
        return _copy(entry, session)

    async def note_replay(self, session: str, replay_key: str) -> int:
        s, entry = self._replay(session, replay_key)
        if s is None or entry is None:
            return 0
        entry.count += 1
        self._touch(s, entry)
        return entry.count

    async def get_call(self, session: str, call_id: str) -> CallRecord | None:
        _, entry = self._call(session, call_id)
        return _copy(entry, session)

    async def get_calls(self, session: str, call_ids: Sequence[str]) -> dict[str, CallRecord]:
        found = (_copy(self._call(session, call_id)[1], session) for call_id in call_ids)
        return {rec.call_id: rec for rec in found if rec is not None}

    async def look_up_call(self, session: str, replay_key: str, call_id: str) -> CallFacts:
        s = self._session(session)
        if s is None:
            return CallFacts(None, None)
        first = self._live(s.calls.holder(_field(replay_key)))
        same = self._live(s.calls.get(call_id))
        copied = _copy(first, session)
        # The same delivery (a call id seen again, with its arguments) is copied once: both
        # facts are the same record, read-only to the caller like any copy.
        return CallFacts(copied, copied if same is first else _copy(same, session))

    async def record_result(self, session: str, call_id: str, result: str, is_error: bool, at: float) -> bool:
        s, entry = self._call(session, call_id)
        if s is None or entry is None or entry.answer is not None:
            return False
        entry.answer = _Answer(*self.limits.truncate(result), is_error, at)
        self._touch(s, entry)
        return True

    async def session_counts(self, session: str) -> tuple[int, dict[str, int]]:
        s = self._session(session)
        counts = s.counts() if s else {}
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
