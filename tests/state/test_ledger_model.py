"""The in-memory ledger against the SQLite one, over random sequences of operations.

The memory store keeps a small session's calls in a scanned list and a large one's in dicts,
and counts a session's tools from its calls until one leaves (sidecar/state/memory.py); SQLite
keeps rows and indexes. Driving both with the same operations, on the same clock, and
comparing every answer checks the compact form against the plain one: sessions that cross
the list/dict boundary, re-recorded call ids, replays of a held key, results, per-session
eviction and calls that expire while their session lives on. (The total bound is left out:
memory evicts from the least recently active session, SQLite the least recently used call.)
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from sidecar.model import sha256_hex
from sidecar.state import CallRecord, Limits, MemoryStore, StateStore
from sidecar.state.sqlite import SQLiteStore

TOOLS = ("read_file", "grep", "transfer")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def key(session: str, n: int) -> str:
    return sha256_hex(f"{session}|{n}".encode())


Op = tuple[str, str, int, str]


def draw(rng: random.Random) -> Op:
    """One operation: its name, session, argument set (few: replays are common) and call id."""
    op = rng.choice(
        [
            "record",
            "record",
            "record",
            "record",
            "turn",
            "find",
            "note",
            "get",
            "gets",
            "look_up",
            "result",
            "counts",
            "tick",
        ]
    )
    return op, f"s{rng.randrange(3)}", rng.randrange(6), f"toolu_{rng.randrange(40):02d}"


async def apply(store: StateStore, at: float, op: Op) -> object:
    """What the store answers to `op`, in a comparable form."""
    name, session, n, call_id = op
    replay_key = "k-not-a-digest" if n == 4 else key(session, n)  # not every key is a digest
    if name == "record":
        args_hash = "" if n == 5 else sha256_hex(str(n).encode())
        await store.record_call(CallRecord(session, call_id, TOOLS[n % 3], args_hash, replay_key, at))
        return None
    if name == "turn":  # a model turn of two calls, recorded in one step
        args_hash = sha256_hex(str(n).encode())
        other = key(session, (n + 1) % 6)
        await store.record_calls(
            [
                CallRecord(session, call_id, TOOLS[n % 3], args_hash, replay_key, at),
                CallRecord(session, call_id + "b", TOOLS[(n + 1) % 3], args_hash, other, at),
            ]
        )
        return None
    if name == "find":
        return await store.find_replay(session, replay_key)
    if name == "note":
        return await store.note_replay(session, replay_key)
    if name == "get":
        return await store.get_call(session, call_id)
    if name == "gets":  # a request's results: several calls read at once
        ids = [call_id, f"toolu_{(n * 7) % 40:02d}", call_id + "b"]
        found = await store.get_calls(session, ids)
        assert found == {i: rec for i in ids if (rec := await store.get_call(session, i)) is not None}
        return found
    if name == "look_up":  # the two questions above, answered at once
        facts = await store.look_up_call(session, replay_key, call_id)
        assert facts == (await store.find_replay(session, replay_key), await store.get_call(session, call_id))
        return facts
    if name == "result":
        return await store.record_result(session, call_id, f"result {n} " * n, n == 3, at)
    return await store.session_counts(session)


@pytest.mark.parametrize("seed", range(12))
async def test_memory_answers_as_sqlite_does(seed: int, tmp_path: Path) -> None:
    clock = Clock()
    limits = Limits(ttl_s=100.0, max_per_session=14, max_total=10_000, max_result_bytes=16, clock=clock)
    memory, sqlite = MemoryStore(limits), SQLiteStore(str(tmp_path / "state.db"), limits)
    rng = random.Random(seed)
    largest = 0
    try:
        for i in range(600):
            op = draw(rng)
            if op[0] == "tick":
                clock.now += rng.choice([1.0, 1.0, 30.0, 70.0])
                continue
            assert await apply(memory, clock.now, op) == await apply(sqlite, clock.now, op), f"seed {seed}, step {i}"
            largest = max(largest, (await memory.session_counts(op[1]))[0])
    finally:
        await sqlite.close()
    assert largest > 14  # a session outgrew the list form and the per-session bound
