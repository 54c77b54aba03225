"""Extra latency of a repair round beyond the model's own time.

Runs in one process, interleaved, so machine noise hits every variant alike:
  direct1   one request straight to the scripted model (the model's own time)
  clean     one request through the sidecar, nothing refused
  repaired  one request through the sidecar whose call is refused once and corrected

extra(repair) = repaired - clean - direct1: what the sidecar adds for holding the round
(validation, building the repair request, parsing the reply, splicing), excluding the model.

    .venv/bin/python bench/bench_repair.py [--runs 300] [--stream]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import aiohttp

from sidecar.app import start
from sidecar.config import load_settings
from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn

TOOL = {
    "name": "support_tickets_search",
    "description": "Search tickets",
    "input_schema": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 100}},
        "required": ["query"],
    },
}
GOOD = Turn(text="Searching.", tool_calls=[ToolCallSpec("support_tickets_search", {"query": "refund", "limit": 10})])
BAD = Turn(text="Searching.", tool_calls=[ToolCallSpec("support_tickets_search", {"query": "refund", "limit": "10"})])
HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "bench"}


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> float:
    started = time.perf_counter()
    async with session.post(url + "/v1/messages", json=body, headers=HEADERS) as response:
        await response.read()
        assert response.status == 200, response.status
    return time.perf_counter() - started


async def main(runs: int, stream: bool) -> None:
    body = {
        "model": "bench",
        "max_tokens": 256,
        "stream": stream,
        "tools": [TOOL],
        "messages": [{"role": "user", "content": "refund tickets"}],
    }
    async with ScriptedModel([]) as model:
        settings = load_settings(
            flags={
                "listen": "127.0.0.1:0",
                "admin_listen": "127.0.0.1:0",
                "anthropic_upstream": model.url,
                "openai_upstream": model.url,
                "rejection_log": {"path": "/dev/null"},
            },
            environ={},
        )
        running = await start(settings)
        samples: dict[str, list[float]] = {"direct1": [], "clean": [], "repaired": []}
        try:
            async with aiohttp.ClientSession() as session:
                for i in range(runs + 20):
                    model.reset()
                    model.add_turns([GOOD])
                    direct = await _post(session, model.url, body)
                    model.add_turns([GOOD])
                    clean = await _post(session, running.proxy_url, body)
                    model.add_turns([BAD, GOOD])
                    repaired = await _post(session, running.proxy_url, body)
                    if i >= 20:  # warm-up excluded
                        samples["direct1"].append(direct)
                        samples["clean"].append(clean)
                        samples["repaired"].append(repaired)
        finally:
            await running.stop()

    def ms(values: list[float], q: float) -> float:
        return statistics.quantiles(values, n=100)[int(q) - 1] * 1000 if q < 100 else max(values) * 1000

    print(f"runs: {runs}, stream: {stream}")
    for name, values in samples.items():
        print(f"  {name:9s} median {statistics.median(values) * 1000:7.3f} ms   p95 {ms(values, 95):7.3f} ms")
    extra = [r - c - d for r, c, d in zip(samples["repaired"], samples["clean"], samples["direct1"], strict=True)]
    median_extra = statistics.median(extra) * 1000
    print(f"  extra latency of one repair round beyond the model's time: median {median_extra:.3f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--stream", action="store_true")
    options = parser.parse_args()
    asyncio.run(main(options.runs, options.stream))
