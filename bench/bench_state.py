"""State backend cost: µs per ledger operation, and memory per remembered call.

    .venv/bin/python bench/bench_state.py [--calls 100000] [--io-calls 5000]

Memory is measured with tracemalloc over the memory backend holding `--calls` calls spread
over sessions of 100 (realistic 64-hex hashes, ~30-char call ids). SQLite and Redis timings
are sequential awaits from one coroutine (a latency view, not a throughput one); Redis runs a
throwaway local redis-server (tests/helpers/redis_server.py).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sidecar.model import sha256_hex
from sidecar.state import CallRecord, Limits, MemoryStore, StateStore
from sidecar.state.redis import RedisStore
from sidecar.state.sqlite import SQLiteStore
from tests.helpers.redis_server import run_redis_server


def records(n: int) -> list[CallRecord]:
    now = time.time()
    out = []
    for i in range(n):
        session = f"session-{i // 100:06d}"
        args_hash = sha256_hex(f"args{i}".encode())
        key = sha256_hex(f"{session}|tool{i % 7}|{i}".encode())
        out.append(CallRecord(session, f"toolu_{i:024d}", f"tool{i % 7}", args_hash, key, now))
    return out


async def memory_per_call(n: int) -> float:
    store = MemoryStore(Limits(max_total=n, max_per_session=1000))
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    # build the records under tracing: the strings a caller hands over (ids, hashes) stay
    # alive in the store, so they are part of what a remembered call costs
    for rec in records(n):
        await store.record_call(rec)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / n


async def timings(store: StateStore, n: int) -> tuple[float, ...]:
    """µs per record_call, find_replay; per 2-call turn recorded call by call and in one
    record_calls; per call looked up by find_replay + get_call and by one look_up_call (what
    the replay guard asks about each call); per 2 results' calls read by get_call each and by
    one get_calls (what the result matcher asks for a request's results)."""
    recs = records(n)
    half = n // 2
    clock = time.perf_counter
    t0 = clock()
    for rec in recs[:half]:
        await store.record_call(rec)
    t1 = clock()
    for rec in recs[:half]:
        assert await store.find_replay(rec.session, rec.replay_key) is not None
    t2 = clock()
    turns = [recs[i : i + 2] for i in range(half, n - 1, 2)]
    for turn in turns[: len(turns) // 2]:
        for rec in turn:
            await store.record_call(rec)
    t3 = clock()
    for turn in turns[len(turns) // 2 :]:
        await store.record_calls(turn)
    t4 = clock()
    for rec in recs[:half]:
        assert await store.find_replay(rec.session, rec.replay_key) is not None
        assert await store.get_call(rec.session, rec.call_id) is not None
    t5 = clock()
    for rec in recs[:half]:
        facts = await store.look_up_call(rec.session, rec.replay_key, rec.call_id)
        assert facts.first is not None and facts.same_id is not None
    t6 = clock()
    pairs = [recs[i : i + 2] for i in range(0, half - 1, 2)]
    for pair in pairs:
        for rec in pair:
            assert await store.get_call(rec.session, rec.call_id) is not None
    t7 = clock()
    for pair in pairs:
        assert len(await store.get_calls(pair[0].session, [rec.call_id for rec in pair])) == len(pair)
    t8 = clock()
    await store.close()
    per_turn = len(turns) // 2
    return (
        (t1 - t0) / half * 1e6,
        (t2 - t1) / half * 1e6,
        (t3 - t2) / per_turn * 1e6,
        (t4 - t3) / (len(turns) - per_turn) * 1e6,
        (t5 - t4) / half * 1e6,
        (t6 - t5) / half * 1e6,
        (t7 - t6) / len(pairs) * 1e6,
        (t8 - t7) / len(pairs) * 1e6,
    )


async def evicting(n: int) -> float:
    """µs per record_call once the total bound evicts on every write (the steady state of a
    busy sidecar): `n` calls into a store bounded at a quarter of them, the last half timed."""
    store = MemoryStore(Limits(max_total=n // 4, max_per_session=1000))
    recs = records(n)
    for rec in recs[: n // 2]:
        await store.record_call(rec)
    t0 = time.perf_counter()
    for rec in recs[n // 2 :]:
        await store.record_call(rec)
    return (time.perf_counter() - t0) / (n - n // 2) * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--io-calls", type=int, default=5_000)
    opts = parser.parse_args()

    per_call = await memory_per_call(opts.calls)
    print(
        f"memory: {per_call:,.0f} bytes per remembered call at {opts.calls:,} calls "
        f"({per_call * opts.calls / 2**20:,.1f} MiB)"
    )

    rows = [("memory", opts.calls, await timings(MemoryStore(Limits()), opts.calls))]
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = SQLiteStore(str(Path(tmp) / "bench.db"))
        rows.append(("sqlite", opts.io_calls, await timings(sqlite, opts.io_calls)))
    with run_redis_server() as url:
        rows.append(("redis", opts.io_calls, await timings(RedisStore(url), opts.io_calls)))

    heads: tuple[str, ...] = ("record_call", "find_replay", "turn: 2 calls", "record_calls", "find+get", "look_up_call")
    heads += ("2 get_call", "get_calls")
    print(f"{'backend':8} {'calls':>8} " + " ".join(f"{h:>13}" for h in heads) + "  (µs)")
    for name, n, columns in rows:
        print(f"{name:8} {n:>8,} " + " ".join(f"{c:>13.1f}" for c in columns))
    print(f"memory, evicting on every write: {await evicting(opts.calls * 2):.1f} µs per record_call")


if __name__ == "__main__":
    asyncio.run(main())
