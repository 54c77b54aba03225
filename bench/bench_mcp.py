"""MCP path overhead: a `tools/call` through the sidecar versus straight to the MCP server, next to
the model path's added latency measured in the same run (the issue's target: the MCP path adds
no more than the model path does).

One run, one process: the scripted MCP server (official SDK, JSON and SSE replies), the
scripted model, one sidecar in front of both (tracing off). Requests are interleaved (direct,
sidecar, direct, …) so drift affects both alike. Each `tools/call` is a checked, allowed,
read-only call (declared tool, lockdown, replay lookup, policy, ledger insert, result matched);
each model request carries one tool call. Added latency = sidecar - direct (p50 and p95).

Run: .venv/bin/python bench/bench_mcp.py [--n 300]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from typing import Any

import aiohttp
import orjson

from sidecar.app import Running, start
from sidecar.config import load_settings
from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn
from sidecar.scripted.mcp import ScriptedMcpServer

VERSION = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": VERSION, "io.modelcontextprotocol/clientCapabilities": {}}
ARGS = {"query": "refund", "status": "OPEN", "limit": 5}
MODEL_HEADERS = {"x-api-key": "sk-bench", "anthropic-version": "2023-06-01", "content-type": "application/json"}
SEARCH_SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
TURN = Turn(tool_calls=[ToolCallSpec("support_tickets_search", {"query": "refund"})])


def _headers(method: str, name: str | None = None) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": method,
    }
    if name:
        headers["Mcp-Name"] = name
    return headers


def _call(n: int) -> bytes:
    params = {"name": "support_tickets_search", "arguments": ARGS, "_meta": META}
    return orjson.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params})


async def _mcp_once(http: aiohttp.ClientSession, url: str, n: int) -> float:
    started = time.perf_counter()
    async with http.post(url, data=_call(n), headers=_headers("tools/call", "support_tickets_search")) as r:
        body = await r.read()
        assert r.status == 200 and b'"isError":true' not in body, body[:300]
    return time.perf_counter() - started


async def _model_once(http: aiohttp.ClientSession, base: str) -> float:
    body = orjson.dumps(
        {
            "model": "claude-test",
            "max_tokens": 256,
            "tools": [{"name": "support_tickets_search", "description": "Search", "input_schema": SEARCH_SCHEMA}],
            "messages": [{"role": "user", "content": "Find refund tickets."}],
        }
    )
    started = time.perf_counter()
    async with http.post(f"{base}/v1/messages", data=body, headers=MODEL_HEADERS) as r:
        await r.read()
        assert r.status == 200, r.status
    return time.perf_counter() - started


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def _report(title: str, direct: list[float], through: list[float]) -> float:
    d50, d95, s50, s95 = _ms(direct, 0.5), _ms(direct, 0.95), _ms(through, 0.5), _ms(through, 0.95)
    print(f"\n{title} ({len(direct)} requests each)")
    print(f"  direct   p50 {d50:8.3f} ms   p95 {d95:8.3f} ms")
    print(f"  sidecar  p50 {s50:8.3f} ms   p95 {s95:8.3f} ms")
    print(f"  added    p50 {s50 - d50:8.3f} ms   p95 {s95 - d95:8.3f} ms")
    return s50 - d50


async def _sidecar(model: ScriptedModel, servers: dict[str, str], tmp: str) -> Running:
    # Read-only tools (the search is side-effect free in example:support), enforce mode.
    flags: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "admin_listen": "127.0.0.1:0",
        "anthropic_upstream": model.url,
        "openai_upstream": model.url,
        "policies": "example:support",
        "rejection_log": {"path": f"{tmp}/rejections.jsonl"},
        "mcp": {"servers": servers},
    }
    return await start(load_settings(flags=flags, environ={}))


async def _interleaved(n: int, first: Any, second: Any) -> tuple[list[float], list[float]]:
    for _ in range(20):  # warm-up: connections, caches, the sidecar's first listing
        await first()
        await second()
    a: list[float] = []
    b: list[float] = []
    for _ in range(n):
        a.append(await first())
        b.append(await second())
    return a, b


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as tmp:
        async with (
            ScriptedModel([]) as model,
            ScriptedMcpServer(json_response=True) as json_server,
            ScriptedMcpServer(json_response=False) as sse_server,
        ):
            sidecar = await _sidecar(model, {"json": json_server.url, "sse": sse_server.url}, tmp)
            counter = iter(range(10**9))
            try:
                async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4)) as http:
                    added: dict[str, float] = {}
                    for name, server in (("json", json_server), ("sse", sse_server)):
                        via = f"{sidecar.proxy_url}/mcp/{name}"
                        direct, through = await _interleaved(
                            n,
                            lambda url=server.url: _mcp_once(http, url, next(counter)),
                            lambda url=via: _mcp_once(http, url, next(counter)),
                        )
                        added[name] = _report(f"MCP tools/call, {name} replies", direct, through)
                    model.add_turns([TURN] * (2 * n + 40))
                    direct, through = await _interleaved(
                        n, lambda: _model_once(http, model.url), lambda: _model_once(http, sidecar.proxy_url)
                    )
                    added["model"] = _report("model path, one tool call per reply (non-streaming)", direct, through)
            finally:
                await sidecar.stop()
    print("\nadded latency (p50): " + ", ".join(f"{k} {v:.3f} ms" for k, v in added.items()))
    worst = max(added["json"], added["sse"])
    verdict = "within" if worst <= added["model"] else "above"
    print(f"MCP path vs model path: {worst:.3f} ms vs {added['model']:.3f} ms ({verdict} the model path's)")
    print("  reproduce: .venv/bin/python bench/bench_mcp.py")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=300, help="requests per target and series")
    asyncio.run(main(parser.parse_args().n))
