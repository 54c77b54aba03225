"""Tool-result inspection cost: the inspector on typical and hostile results, and the result
policy filter on a request whose history re-sends many results.

Prints, per case, the median time per call and the throughput over the bytes inspected.
Run: .venv/bin/python bench/bench_inspection.py [--n 200]
Nothing is asserted: the numbers are for the lead's benchmark runs (docs/policies.md "Cost").
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import string
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import orjson
from multidict import CIMultiDict
from yarl import URL

from sidecar.config import load_settings
from sidecar.dialects import ANTHROPIC
from sidecar.exchange.state import Exchange
from sidecar.filters.result_policy import ResultPolicy, result_rules
from sidecar.inspection import MarkerSet, ResultInspector, ToolProfile
from sidecar.model import Provider
from sidecar.policy import build_engine
from sidecar.telemetry.metrics import Metrics


def _tickets(n: int, rng: random.Random) -> str:
    rows = [
        {
            "id": f"T-{i}",
            "uuid": "".join(rng.choices("0123456789abcdef", k=32)),
            "subject": "Refund request for order",
            "body": "Hello, my order arrived damaged. " * 3,
            "updated_at": "2026-11-30T10:00:00Z",
        }
        for i in range(n)
    ]
    return orjson.dumps({"tickets": rows, "next_page_token": "CiAKGjBpNDd2Nmp2"}).decode()


def cases() -> dict[str, tuple[Any, ToolProfile]]:
    rng = random.Random(1)
    words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "refund", "order"]) for _ in range(200_000))
    trusted, untrusted = ToolProfile(), ToolProfile(untrusted=True)
    return {
        "json 1 KiB": (_tickets(4, rng), trusted),
        "json 64 KiB": (_tickets(280, rng), trusted),
        "json 64 KiB, untrusted (markers)": (_tickets(280, rng), untrusted),
        "text 1 MiB (the read limit)": (words[: 1024 * 1024], untrusted),
        "secrets in 4 KiB": ('{"password": "hunter2", "aws": "AKIAIOSFODNN7EXAMPLE"} ' * 60, trusted),
        "random tokens 64 KiB": (
            " ".join("".join(rng.choices(string.ascii_letters, k=24)) for _ in range(2600)),
            trusted,
        ),
        "hostile eyJ- x 250k (1 MiB)": ("eyJ-" * 250_000, untrusted),
        "hostile password= x 100k": ("password=" * 100_000, trusted),
    }


def timed(fn: Callable[[], Any], n: int) -> float:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def bench_inspector(n: int) -> None:
    inspector = ResultInspector()
    markers = MarkerSet.from_data(None)
    print(f"{'inspector':40} {'median':>12} {'MB/s':>8} {'anomalies'}")
    for name, (content, profile) in cases().items():
        size = len(content.encode())
        found = inspector.inspect(content, size, profile, markers)
        seconds = timed(partial(inspector.inspect, content, size, profile, markers), n)
        rate = found.inspected_bytes / seconds / 1e6 if seconds else 0.0
        print(f"{name:40} {seconds * 1e6:10.1f}us {rate:8.1f} {[k.value for k in found.anomalies]}")
    content = '{"password": "hunter2", "aws": "AKIAIOSFODNN7EXAMPLE"} ' * 60
    found = inspector.inspect(content, len(content), ToolProfile(), markers)
    seconds = timed(lambda: inspector.redact(content, found), n)
    print(f"{'redact 120 spans in 4 KiB':40} {seconds * 1e6:10.1f}us")


def _history_body(results: int) -> dict[str, Any]:
    messages: list[Any] = [{"role": "user", "content": "go"}]
    rng = random.Random(2)
    for i in range(results):
        messages.append(
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "search", "input": {}}]}
        )
        content = _tickets(8, rng) if i % 10 else '{"password": "hunter2"}'
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": content}]}
        )
    return {"model": "claude-test", "max_tokens": 64, "messages": messages}


async def bench_filter(n: int, results: int = 50) -> None:
    settings = load_settings(flags={}, environ={})
    engine = build_engine(settings.policy, settings.policies)
    body = _history_body(results)
    view = ANTHROPIC.read_request(body)
    filt = ResultPolicy(settings, engine, Metrics(), rules=result_rules(settings, engine))

    def exchange() -> Exchange:
        return Exchange("x", Provider.ANTHROPIC, ANTHROPIC, "s", view, body, URL("http://u"), CIMultiDict())

    async def fresh() -> None:
        filt.memo = type(filt.memo)(10_000, 600.0)
        await filt.on_request(exchange())

    async def remembered() -> None:
        await filt.on_request(exchange())

    size = len(orjson.dumps(body))
    print(f"\nresult policy filter, a request re-sending {results} results ({size // 1024} KiB)")
    for name, step in (("every result decided afresh", fresh), ("decisions remembered", remembered)):
        await step()
        samples = []
        for _ in range(n):
            started = time.perf_counter()
            await step()
            samples.append(time.perf_counter() - started)
        print(f"{name:40} {statistics.median(samples) * 1e3:10.2f}ms")
    await engine.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()
    bench_inspector(args.n)
    asyncio.run(bench_filter(max(1, args.n // 10)))


if __name__ == "__main__":
    main()
