"""Replay guard cost per call on the memory backend: what the guard and the ledger add.

    .venv/bin/python bench/bench_replay.py [--calls 20000]

Times, in µs per call, sequential awaits from one coroutine:
- guard, miss:      ReplayFilter.look_up + on_call for a call never seen (key hash + find_replay + get_call)
- guard, replay:    the same for a side-effecting repeat (adds the REPLAY verdict)
- guard, read-only: a repeat of a read-only tool (allowed, check.replay filled)
- delivered:        ReplayFilter.on_deliver for one call (record_call)
- result:           ResultMatcher.on_request for one JSON result (get_call + record_result)
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from multidict import CIMultiDict
from yarl import URL

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sidecar.config import Settings
from sidecar.dialects import ANTHROPIC
from sidecar.exchange.state import CallCheck, Exchange
from sidecar.filters.replay import ReplayFilter
from sidecar.filters.results import ResultMatcher
from sidecar.model import Provider, RequestView, ToolCall, ToolResult
from sidecar.policy.traits import ToolTraits
from sidecar.state import Limits, MemoryStore
from sidecar.telemetry.metrics import Metrics


def exchange(session: str, view: RequestView | None = None) -> Exchange:
    return Exchange(
        "x", Provider.ANTHROPIC, ANTHROPIC, session, view or RequestView(), {}, URL("http://x"), CIMultiDict()
    )


def calls(n: int, tool: str) -> list[ToolCall]:
    return [
        ToolCall(f"toolu_{tool}_{i:020d}", tool, {"ticket_id": f"T-{i}", "body": "Hello there", "n": i}, "")
        for i in range(n)
    ]


async def per_call(n: int, step: Callable[[int], Awaitable[object]]) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        await step(i)
    return (time.perf_counter() - t0) / n * 1e6


async def main(n: int) -> None:
    settings = Settings.model_validate({"tools": {"send": {"side_effects": True}, "read": {"side_effects": False}}})
    metrics = Metrics()
    for name in ("send", "read"):
        metrics.declare_tool(name)
    store = MemoryStore(Limits(max_total=4 * n, max_per_session=4 * n))
    replay = ReplayFilter(settings, store, ToolTraits(settings), metrics)
    matcher = ResultMatcher(store)
    ex = exchange("bench-session")
    sends, reads = calls(n, "send"), calls(n, "read")

    async def check(call: ToolCall) -> object:
        one = CallCheck(call, ex, 1)
        await replay.look_up(one)
        return await replay.on_call(one)

    miss = await per_call(n, lambda i: check(sends[i]))
    delivered = await per_call(n, lambda i: replay.on_deliver(ex, [sends[i]]))
    await replay.on_deliver(ex, reads)
    views = [
        exchange("bench-session", RequestView(results=[ToolResult(c.id, '{"status": "sent"}', size=18)])) for c in sends
    ]
    result = await per_call(n, lambda i: matcher.on_request(views[i]))
    again = [ToolCall(c.id + "r", c.name, c.arguments, "") for c in sends]
    replayed = await per_call(n, lambda i: check(again[i]))
    read_again = [ToolCall(c.id + "r", c.name, c.arguments, "") for c in reads]
    read_only = await per_call(n, lambda i: check(read_again[i]))
    baseline = await per_call(n, lambda i: _noop())

    print(f"memory backend, {n:,} calls in one session (µs per call; empty await {baseline:.2f})")
    for label, value in (
        ("guard, miss", miss),
        ("guard, replay", replayed),
        ("guard, read-only", read_only),
        ("delivered", delivered),
        ("result", result),
    ):
        print(f"  {label:<17} {value:7.2f}")
    print(f"  per delivered call, guard + ledger + result: {miss + delivered + result:.2f}")


async def _noop() -> None:
    return None


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20_000)
    asyncio.run(main(parser.parse_args().calls))
