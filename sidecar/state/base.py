"""The state interface shared by the memory, SQLite and Redis backends.

Everything a backend does not have to do differently lives here: the records, the errors,
the ledger limits (TTL, truncation) and the approval state machine. A backend only decides
how to store and how to make the compare-and-set steps atomic.

Ledger semantics, identical in every backend:

- A call is remembered from `record_call` until `delivered_at + ledger_ttl_s` (the replay
  window counts from the original delivery; touching an entry does not extend it).
- Entries are bounded per session and in total. Writes (`record_call`, `note_replay`,
  `record_result`) mark an entry as recently used; reads do not. Over a bound, expired
  entries go first (a late write may have touched them), then the least recently used.
- The replay index points at the *first* delivery of a replay key; its `count` is the
  number of times that key was seen: each `record_call` with the key (delivered) and each
  `note_replay` (answered or refused without reaching the agent) adds one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

import orjson

from sidecar.config import StateSettings

ApprovalStatus = Literal["pending", "approved", "denied", "expired", "consumed"]
Decision = Literal["approved", "denied"]
Clock = Callable[[], float]


class StateUnavailable(Exception):
    """The backend cannot be reached; the caller applies `state.on_unavailable`."""


class ApprovalNotFound(KeyError):
    """No approval with this id (never created, or forgotten after its retention)."""


class ApprovalConflict(Exception):
    """The approval is no longer pending; `status` says what it is instead."""

    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.status = status


@dataclass(slots=True)
class CallRecord:
    """A tool call that reached the agent, and later the result the agent sent back."""

    session: str
    call_id: str
    tool: str
    args_hash: str
    replay_key: str
    delivered_at: float
    result: str | None = None
    result_is_error: bool | None = None
    result_at: float | None = None
    result_truncated: bool = False
    count: int = 1

    @property
    def first_seen(self) -> float:
        return self.delivered_at


class CallFacts(NamedTuple):
    """What the ledger knows of one call about to be judged, asked in one step
    (`StateStore.look_up_call`): one round trip to Redis, one hop to SQLite's thread."""

    first: CallRecord | None  # the live delivery holding the call's replay key (`find_replay`)
    same_id: CallRecord | None  # the live delivery under the call's own id (`get_call`)


def one_session(records: Sequence[CallRecord]) -> str:
    """The session all of `records` belong to (`StateStore.record_calls` takes one turn's)."""
    sessions = {rec.session for rec in records}
    if len(sessions) != 1:
        raise ValueError(f"record_calls takes the calls of one session, got {len(sessions)}")
    return sessions.pop()


@dataclass(slots=True)
class Approval:
    """A human approval for one exact call (session, tool, arguments).

    `arguments` are already redacted by the caller. `expires` bounds both the wait for a
    human and the time an approved call may be re-issued and consumed.
    """

    id: str
    session: str
    tool: str
    arguments: dict[str, Any]
    args_hash: str
    group: str
    reasons: list[str]
    created: float
    expires: float
    status: ApprovalStatus = "pending"
    decided_by: str | None = None
    comment: str | None = None
    decided_at: float | None = None

    def effective(self, now: float) -> Approval:
        """A pending approval past `expires` reads as expired (lazily, without a write)."""
        if self.status == "pending" and now >= self.expires:
            return replace(self, status="expired")
        return self

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, data: bytes | str) -> Approval:
        return cls(**orjson.loads(data))


def check_decidable(a: Approval | None, approval_id: str, now: float) -> Approval:
    """The precondition of `decide_approval`, shared so every backend raises the same way."""
    if a is None:
        raise ApprovalNotFound(approval_id)
    status = a.effective(now).status
    if status != "pending":
        raise ApprovalConflict(status)
    return a


def decided(a: Approval, status: Decision, decided_by: str, comment: str | None, now: float) -> Approval:
    return replace(a, status=status, decided_by=decided_by, comment=comment, decided_at=now)


def consumable(a: Approval | None, now: float) -> bool:
    return a is not None and a.status == "approved" and now < a.expires


def matches(a: Approval, status: str | None, group: str | None, tool: str | None, session: str | None) -> bool:
    return (
        (status is None or a.status == status)
        and (group is None or a.group == group)
        and (tool is None or a.tool == tool)
        and (session is None or a.session == session)
    )


class Delivered(Protocol):
    """What the TTL is counted from: a `CallRecord`, or a backend's own form of one."""

    @property
    def delivered_at(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Limits:
    """The ledger bounds from `StateSettings`, plus the clock (injectable for tests)."""

    ttl_s: float = 24 * 3600
    max_per_session: int = 1000
    max_total: int = 100_000
    max_result_bytes: int = 4096
    clock: Clock = field(default=time.time, compare=False)

    @classmethod
    def from_settings(cls, s: StateSettings, clock: Clock = time.time) -> Limits:
        return cls(s.ledger_ttl_s, s.max_entries_per_session, s.max_entries_total, s.max_result_bytes, clock)

    def expires_at(self, rec: Delivered) -> float:
        return rec.delivered_at + self.ttl_s

    def alive(self, rec: Delivered, now: float | None = None) -> bool:
        return (self.clock() if now is None else now) < self.expires_at(rec)

    def truncate(self, result: str) -> tuple[str, bool]:
        """Cut to `max_result_bytes` of UTF-8 without splitting a character."""
        raw = result.encode()
        if len(raw) <= self.max_result_bytes:
            return result, False
        return raw[: self.max_result_bytes].decode("utf-8", "ignore"), True


@dataclass(slots=True)
class HeldCall:
    """A call delivered in a turn the provider holds: what the sidecar needs to carry it over
    into the conversation's session (its replay key is rebuilt from the canonical arguments)."""

    id: str
    tool: str
    arguments: str  # canonical JSON of the arguments (raw text when they were not an object)


@dataclass(slots=True)
class HeldState:
    """What a provider holds under one key that the agent's next turn must agree with.

    Keys (`sidecar/state/continuations.py`): `turn:<response or message id>` (one model turn of
    a Responses chain or a message thread), `thread:<root message id>` (what a message thread
    was created with), `conversation:<id>` (an OpenAI conversation). Every field is optional;
    each kind of key uses the ones it needs.
    """

    root: str | None = None  # the conversation handle this turn belongs to (thread / chain root id)
    continue_from: str | None = None  # the id the provider continues from instead (a repair round's)
    withheld: dict[str, str] = field(default_factory=dict)  # call id -> output the agent never gave
    calls: list[HeldCall] = field(default_factory=list)  # calls delivered in this turn
    session: str | None = None  # a chain root's turn: the session its calls were recorded under
    tools: list[dict[str, Any]] | None = None  # a thread: the tools it was created with, as sent
    system: Any = None  # a thread: the system prompt it was created with

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, data: bytes | str) -> HeldState:
        raw = orjson.loads(data)
        raw["calls"] = [HeldCall(**c) for c in raw.get("calls") or []]
        return cls(**raw)


def approval_retention(a: Approval, limits: Limits) -> float:
    """When a stored approval may be forgotten: one ledger TTL after it could last be used."""
    return a.expires + limits.ttl_s


@runtime_checkable
class StateStore(Protocol):
    """Session ledger, replay index, approvals and what providers hold (threads, chains,
    conversations).

    Every method may raise StateUnavailable (only Redis does in practice).
    """

    name: str
    limits: Limits

    # Ledger
    async def record_call(self, rec: CallRecord) -> None:
        """A call reached the agent."""
        ...

    async def record_calls(self, records: Sequence[CallRecord]) -> None:
        """Calls of one session (a model turn's) reached the agent: `record_call` for each, in
        order, as one step: one round trip to Redis, one transaction in SQLite (all or none).
        ValueError when they are not of one session."""
        ...

    async def find_replay(self, session: str, replay_key: str) -> CallRecord | None:
        """The first live delivery of this replay key, with its count."""
        ...

    async def note_replay(self, session: str, replay_key: str) -> int:
        """A replay seen but not delivered: add one to the key's count (0 if unknown)."""
        ...

    async def get_call(self, session: str, call_id: str) -> CallRecord | None:
        """The call a result answers."""
        ...

    async def look_up_call(self, session: str, replay_key: str, call_id: str) -> CallFacts:
        """`find_replay` and `get_call` of one call, answered together."""
        ...

    async def get_calls(self, session: str, call_ids: Sequence[str]) -> dict[str, CallRecord]:
        """`get_call` for each id, answered together (one round trip, one thread hop): the live
        calls found, by id. The calls a request's results answer."""
        ...

    async def record_result(self, session: str, call_id: str, result: str, is_error: bool, at: float) -> bool:
        """Remember a call's result; False if the call is unknown or already has one."""
        ...

    async def session_counts(self, session: str) -> tuple[int, dict[str, int]]:
        """(calls_total, calls_by_tool) delivered in the session within the TTL."""
        ...

    # Approvals
    async def create_approval(self, a: Approval) -> None: ...

    async def get_approval(self, approval_id: str) -> Approval | None: ...

    async def list_approvals(
        self,
        status: str | None = "pending",
        group: str | None = None,
        tool: str | None = None,
        session: str | None = None,
    ) -> list[Approval]:
        """Oldest first; statuses as `get_approval` reports them (lazy expiry)."""
        ...

    async def decide_approval(
        self, approval_id: str, status: Decision, decided_by: str, comment: str | None, now: float
    ) -> Approval:
        """Atomic pending → approved/denied; ApprovalConflict or ApprovalNotFound otherwise."""
        ...

    async def find_approval(self, session: str, tool: str, args_hash: str) -> Approval | None:
        """The newest approval for this exact call."""
        ...

    async def consume_approval(self, approval_id: str, now: float) -> bool:
        """Atomic approved → consumed, so one approval lets exactly one call through."""
        ...

    async def expire_approvals(self, now: float) -> list[Approval]:
        """Pending past `expires` → expired; each is returned by exactly one caller."""
        ...

    # What providers hold (message threads, Responses chains, conversations): one record per
    # key, replaced whole, kept for the ledger's TTL and bounded by `max_entries_total`.
    async def remember_held(self, key: str, state: HeldState) -> None: ...

    async def held(self, key: str) -> HeldState | None:
        """The live record under `key`, or None (never written, expired or evicted)."""
        ...

    async def forget_held(self, key: str) -> None: ...

    async def healthy(self) -> bool: ...

    async def close(self) -> None: ...


def may_proceed_without_state(on_unavailable: str, side_effects: bool) -> bool:
    """What the caller does when the store raised StateUnavailable.

    `fail_open` lets every call through unchecked; `fail_closed` still lets tools without
    side effects through (a missed replay of a read is harmless) and refuses the rest.
    """
    return on_unavailable == "fail_open" or not side_effects
