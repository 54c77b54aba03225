"""Proxy overhead: requests through the sidecar (tracing off, tracing on) versus direct.

One run, one process: a scripted model, a sidecar without tracing and a sidecar exporting
OTLP to a loopback receiver. Requests are interleaved (direct, off, on, direct, …) so drift
affects all three alike. Each model answer carries one tool call, so guards run on every
request. Added latency = sidecar latency - direct latency (medians / p95 of each series).

Run: .venv/bin/python bench/bench_overhead.py [--n 300] [--stream-n 100] [--single-n 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from proxybench import sink
from proxybench.forwarder import Forwarder
from proxybench.load import quantile_ms
from proxybench.serve import start_server

from sidecar.app import Running, start
from sidecar.config import load_settings
from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn

SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 100}},
    "required": ["query"],
}
HEADERS = {"x-api-key": "sk-bench", "anthropic-version": "2023-06-01", "content-type": "application/json"}
TURN = Turn(text="Searching.", tool_calls=[ToolCallSpec("search_tickets", {"query": "refund", "limit": 10})])


def _body(stream: bool) -> bytes:
    return orjson.dumps(
        {
            "model": "claude-test",
            "max_tokens": 256,
            "stream": stream,
            "tools": [{"name": "search_tickets", "description": "Search", "input_schema": SCHEMA}],
            "messages": [{"role": "user", "content": "Find refund tickets."}],
        }
    )


async def _otlp_sink() -> tuple[web.BaseRunner, str]:
    """A loopback OTLP/HTTP receiver that accepts and drops everything."""
    return await start_server(sink.accept)


async def _bare_forwarder(upstream: str) -> tuple[web.BaseRunner, Forwarder, str]:
    """The floor: an aiohttp proxy that only forwards (one more loopback hop, no parsing)."""
    forwarder = Forwarder(upstream)
    runner, url = await start_server(forwarder.handle)
    return runner, forwarder, url


async def _sidecar(model: ScriptedModel, tmp: str, **telemetry: Any) -> Running:
    return await start(
        load_settings(
            flags={
                "listen": "127.0.0.1:0",
                "admin_listen": "127.0.0.1:0",
                "anthropic_upstream": model.url,
                "openai_upstream": model.url,
                "rejection_log": {"path": f"{tmp}/rejections-{len(telemetry)}.jsonl"},
                "telemetry": telemetry,
            },
            environ={},
        )
    )


async def _once(session: aiohttp.ClientSession, base: str, body: bytes) -> float:
    started = time.perf_counter()
    async with session.post(f"{base}/v1/messages", data=body, headers=HEADERS) as response:
        await response.read()
        assert response.status == 200, response.status
    return time.perf_counter() - started


async def _series(
    session: aiohttp.ClientSession, targets: dict[str, str], n: int, stream: bool, model: ScriptedModel
) -> dict[str, list[float]]:
    body = _body(stream)
    model.add_turns([TURN] * (n * len(targets) + 10 * len(targets)))
    for base in targets.values():  # warm-up: connections, caches, first-request imports
        for _ in range(10):
            await _once(session, base, body)
    out: dict[str, list[float]] = {name: [] for name in targets}
    for _ in range(n):
        for name, base in targets.items():
            out[name].append(await _once(session, base, body))
    return out


def _report(title: str, series: dict[str, list[float]]) -> dict[str, float]:
    direct50, direct95 = quantile_ms(series["direct"], 0.5), quantile_ms(series["direct"], 0.95)
    print(f"\n{title} ({len(series['direct'])} requests each)")
    print(f"  {'target':<16}{'p50 ms':>9}{'p95 ms':>9}{'added p50':>11}{'added p95':>11}")
    added: dict[str, float] = {}
    for name, values in series.items():
        p50, p95 = quantile_ms(values, 0.5), quantile_ms(values, 0.95)
        added[name] = p50 - direct50
        extra = "" if name == "direct" else f"{p50 - direct50:>11.3f}{p95 - direct95:>11.3f}"
        print(f"  {name:<16}{p50:>9.3f}{p95:>9.3f}{extra}")
    print(f"  sidecar minus bare proxy (its own work, p50): {added['sidecar'] - added['bare proxy']:.3f} ms")
    off, on = added["sidecar"], added["sidecar+tracing"]
    ratio = on / off if off > 0 else float("nan")
    print(f"  tracing on / off added latency (p50): {ratio:.2f}x ({on - off:+.3f} ms per request)")
    return added


async def main(n: int, stream_n: int, single_n: int) -> None:
    import tempfile

    sink, sink_url = await _otlp_sink()
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        async with ScriptedModel([]) as model:
            plain = await _sidecar(model, tmp)
            traced = await _sidecar(model, tmp, otlp_endpoint=sink_url, otlp_metrics=True)
            bare, forwarder, bare_url = await _bare_forwarder(model.url)
            targets = {
                "direct": model.url,
                "bare proxy": bare_url,
                "sidecar": plain.proxy_url,
                "sidecar+tracing": traced.proxy_url,
            }
            try:
                async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4)) as session:
                    _report("non-streaming", await _series(session, targets, n, False, model))
                    _report("streaming", await _series(session, targets, stream_n, True, model))
                    # Closing note of the transparent-proxy issue: one request, median of many runs.
                    one = {"direct": model.url, "sidecar": plain.proxy_url}
                    whole = await _series(session, one, single_n, False, model)
                    streamed = await _series(session, one, single_n, True, model)
            finally:
                await plain.stop()
                await traced.stop()
                await bare.cleanup()
                await forwarder.close()
    await sink.cleanup()
    w = statistics.median(whole["sidecar"]) - statistics.median(whole["direct"])
    s = statistics.median(streamed["sidecar"]) - statistics.median(streamed["direct"])
    print(f"\nadded latency through the sidecar vs direct (median of {single_n} runs, tracing off):")
    print(f"  one non-streaming request: {w * 1000:.3f} ms")
    print(f"  one streaming request:     {s * 1000:.3f} ms")
    print("  reproduce: .venv/bin/python bench/bench_overhead.py")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=300, help="non-streaming requests per target")
    parser.add_argument("--stream-n", type=int, default=100, help="streaming requests per target")
    parser.add_argument("--single-n", type=int, default=200, help="runs for the single-request medians")
    args = parser.parse_args()
    asyncio.run(main(args.n, args.stream_n, args.single_n))
