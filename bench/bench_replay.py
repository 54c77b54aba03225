"""Replay guard cost per call on the memory backend: what the guard and the ledger add.

    .venv/bin/python bench/bench_replay.py [--calls 20000]

Times, in µs per call, sequential awaits from one coroutine:
- guard, miss:      ReplayGuard.on_call for a call never seen (key hash + find_replay)
- guard, replay:    the same for a side-effecting repeat (adds the REPLAY verdict)
- guard, read-only: a repeat of a read-only tool (allowed, check.replay filled)
- delivered:        ReplayLedger.delivered for one call (get_call + record_call)
- result:           ResultMatcher.request for one JSON result (get_call + record_result)
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
from sidecar.guards.replay import ReplayGuard, ReplayLedger, ToolTraits
from sidecar.guards.results import ResultMatcher
from sidecar.model import Provider, RequestView, ToolCall, ToolResult
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
    guard = ReplayGuard(settings, store, ToolTraits(settings), metrics)
    ledger = ReplayLedger(store, metrics)
    matcher = ResultMatcher(store, metrics)
    ex = exchange("bench-session")
    sends, reads = calls(n, "send"), calls(n, "read")

    miss = await per_call(n, lambda i: guard.on_call(CallCheck(sends[i], ex, 1)))
    delivered = await per_call(n, lambda i: ledger.delivered(ex, [sends[i]]))
    await ledger.delivered(ex, reads)
    views = [
        exchange("bench-session", RequestView(results=[ToolResult(c.id, '{"status": "sent"}', size=18)])) for c in sends
    ]
    result = await per_call(n, lambda i: matcher.request(views[i]))
    again = [ToolCall(c.id + "r", c.name, c.arguments, "") for c in sends]
    replay = await per_call(n, lambda i: guard.on_call(CallCheck(again[i], ex, 1)))
    read_again = [ToolCall(c.id + "r", c.name, c.arguments, "") for c in reads]
    read_only = await per_call(n, lambda i: guard.on_call(CallCheck(read_again[i], ex, 1)))
    baseline = await per_call(n, lambda i: _noop())

    print(f"memory backend, {n:,} calls in one session (µs per call; empty await {baseline:.2f})")
    for label, value in (
        ("guard, miss", miss),
        ("guard, replay", replay),
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
