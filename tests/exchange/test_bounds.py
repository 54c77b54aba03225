"""Bounds on everything an upstream or an agent controls. Each hostile case runs against a
sidecar in its own process, whose event-loop lag (`sidecar_event_loop_lag_seconds`, a timer
asked for every 20 ms) is read before and after: the worst lag during the case is printed.

The lag asserted is generous (a shared, noisy machine): it separates "the loop kept serving"
from the failures observed before (12.9 s for 2,000 approvals in one reply, a process growing
to 1.6 GB on a stream that never ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web

from sidecar.dialects.sse import format_event
from sidecar.policy.sources import init_directory
from sidecar.scripted import ToolCallSpec, Turn
from tests.e2e.agents import AGENTS
from tests.helpers.metrics import Scrape, scrape
from tests.helpers.process import sidecar_process
from tests.helpers.serve import serve

LAG_BOUND_S = 0.5
ANTHROPIC = {"anthropic-version": "2023-06-01", "x-api-key": "k", "content-type": "application/json"}
LAG = "sidecar_event_loop_lag_seconds"


def _buckets(m: Scrape) -> dict[float, float]:
    family = m.families[LAG]
    return {float(s.labels["le"]): float(s.value) for s in family.samples if s.name == LAG + "_bucket"}


def worst_lag(before: Scrape, after: Scrape) -> float:
    """The smallest bucket bound that holds every lag sample taken between two scrapes."""
    start, end = _buckets(before), _buckets(after)
    total = end[float("inf")] - start[float("inf")]
    assert total > 0, "the lag monitor took no sample"
    return min(bound for bound in end if end[bound] - start.get(bound, 0.0) >= total)


@contextlib.asynccontextmanager
async def lag_measured(admin_url: str) -> AsyncIterator[list[float]]:
    """Yields a list that holds the worst lag (bucket bound, seconds) once the block ends."""
    worst: list[float] = []
    before = await scrape(admin_url)
    yield worst
    await asyncio.sleep(0.1)  # one more timer tick after the case
    worst.append(worst_lag(before, await scrape(admin_url)))


@contextlib.asynccontextmanager
async def endless_tool_stream() -> AsyncIterator[tuple[str, list[int]]]:
    """An Anthropic upstream whose tool input never ends; yields (url, [bytes sent])."""
    sent = [0]
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        },
    }
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}},
    }
    piece = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": "x" * 2000},
    }
    delta = format_event(orjson.dumps(piece), "content_block_delta")

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(format_event(orjson.dumps(start), "message_start"))
        await response.write(format_event(orjson.dumps(block), "content_block_start"))
        try:
            while True:  # never ends
                await response.write(delta * 16)
                sent[0] += len(delta) * 16
                await asyncio.sleep(0)
        except (ConnectionResetError, RuntimeError):
            return response

    async with serve(handler) as url:
        yield url, sent


async def test_a_held_stream_that_never_ends_is_refused_at_its_bound(tmp_path: Path) -> None:
    limit = 256 * 1024
    body = {
        "model": "m",
        "max_tokens": 10,
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
        "tools": [{"name": "search", "input_schema": {"type": "object"}}],
    }
    env = {"SIDECAR_LIMITS__MAX_HELD_STREAM_BYTES": str(limit)}
    async with endless_tool_stream() as (url, sent), sidecar_process(url, env, tmp_path) as (proxy, admin):
        async with (
            lag_measured(admin) as lag,
            aiohttp.ClientSession() as http,
            http.post(proxy + "/v1/messages", json=body, headers=ANTHROPIC) as r,
        ):
            raw = await r.read()
        print(f"held-stream bound: worst loop lag <= {lag[0] * 1000:.0f} ms, upstream sent {sent[0]} bytes")
        assert b"event: error" in raw and b"exceeds" in raw
        assert b"toolu_1" not in raw  # the held call never reached the agent
        assert sent[0] < 64 * limit  # the upstream was cut off, not read forever
        m = await scrape(admin)
        assert m.value("sidecar_requests_refused_total", reason="limit") == 1
        assert lag[0] <= LAG_BOUND_S


async def test_a_whole_reply_above_its_bound_is_refused(tmp_path: Path) -> None:
    huge = orjson.dumps({"id": "msg", "type": "message", "content": [{"type": "text", "text": "x" * 2_000_000}]})

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=huge, content_type="application/json")

    env = {"SIDECAR_LIMITS__MAX_REPLY_BYTES": str(1024 * 1024)}
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}
    async with serve(handler) as url, sidecar_process(url, env, tmp_path) as (proxy, admin):
        async with (
            lag_measured(admin) as lag,
            aiohttp.ClientSession() as http,
            http.post(proxy + "/v1/messages", json=body, headers=ANTHROPIC) as r,
        ):
            status, answer = r.status, await r.json()
        print(f"whole-reply bound: worst loop lag <= {lag[0] * 1000:.0f} ms")
        assert status == 502 and "exceeds the sidecar limit of 1048576 bytes" in answer["error"]["message"]
        assert (await scrape(admin)).value("sidecar_requests_refused_total", reason="size") == 1
        assert lag[0] <= LAG_BOUND_S


def _big_schema(tag: int, properties: int) -> dict[str, object]:
    described = {"type": "string", "description": "d" * 60, "enum": ["a", "b"]}
    return {"type": "object", "title": f"schema {tag}", "properties": {f"p{i}": described for i in range(properties)}}


async def test_big_schemas_compile_off_the_loop(model, tmp_path: Path) -> None:
    """20 distinct ~140 KiB schemas: compiled in a worker thread (the cache's byte bound is
    tested in tests/lockdown); above `limits.max_schema_bytes` a schema is refused uncompiled."""
    env = {"SIDECAR_LIMITS__SCHEMA_CACHE_BYTES": str(1024 * 1024), "SIDECAR_LIMITS__MAX_SCHEMA_BYTES": "262144"}
    async with sidecar_process(model.url, env, tmp_path) as (proxy, admin):
        async with lag_measured(admin) as lag:
            for tag in range(20):
                agent = AGENTS["chat"](proxy, {"big": _big_schema(tag, 1200)}, {"X-Sidecar-Session": f"s{tag}"})
                model.add_turns([Turn(tool_calls=[ToolCallSpec("big", {"p0": "a"})])])
                assert (await agent.ask(False)).calls == [("big", {"p0": "a"})]
        print(f"20 big schemas: worst loop lag <= {lag[0] * 1000:.0f} ms")
        assert lag[0] <= LAG_BOUND_S

        agent = AGENTS["chat"](proxy, {"huge": _big_schema(99, 4000)}, {"X-Sidecar-Session": "huge"})
        model.add_turns([Turn(tool_calls=[ToolCallSpec("huge", {"p0": "a"})]), Turn(text="I cannot use that tool.")])
        assert (await agent.ask(False)).calls == []
        [told] = AGENTS["chat"].tool_outputs(model.model_requests[-1])
        assert "above the sidecar's limit of 262144" in told["errors"][0]["problem"]


async def test_two_thousand_approvals_in_one_reply(model, tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    init_directory(policies)
    approval = {"always": True, "group": "finance-approvers"}
    data = {"sidecar": {"tools": {"payments_refund": {"side_effects": True, "approval": approval}}}}
    (policies / "data.json").write_text(json.dumps(data))
    env = {"SIDECAR_ENFORCEMENT__MAX_REPAIR_ROUNDS": "1"}
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    calls = [ToolCallSpec("payments_refund", {"n": i}) for i in range(2000)]
    async with sidecar_process(model.url, env, tmp_path, "--policies", str(policies)) as (proxy, admin):
        model.add_turns([Turn(tool_calls=calls), Turn(text="These refunds await approval.")])
        agent = AGENTS["anthropic"](proxy, {"payments_refund": schema}, {"X-Sidecar-Session": "many"})
        async with lag_measured(admin) as lag:
            got = await agent.ask(False)
        print(f"2,000 approvals: worst loop lag <= {lag[0] * 1000:.0f} ms")
        assert got.calls == []
        assert (await scrape(admin)).value("sidecar_approvals_pending") == 2000
        assert lag[0] <= LAG_BOUND_S


async def test_huge_argument_values_are_cut_in_the_rejection_log(start_sidecar, model, tmp_path: Path) -> None:
    log = tmp_path / "rejections.jsonl"
    sidecar = await start_sidecar(rejection_log={"path": str(log), "max_value_bytes": 1024})
    schema = {"type": "object", "properties": {"q": {"type": "integer"}}, "required": ["q"]}
    model.add_turns([Turn(tool_calls=[ToolCallSpec("search", {"q": "y" * 3_000_000})]), Turn(text="ok")])
    agent = AGENTS["chat"](sidecar.proxy_url, {"search": schema}, {"X-Sidecar-Session": "huge-args"})
    assert (await agent.ask(False)).calls == []
    await sidecar.sidecar.rejections.aflush()
    [line] = log.read_text().splitlines()
    record = json.loads(line)
    assert len(line) < 64 * 1024
    assert record["arguments"]["q"].startswith("y" * 1000) and len(record["arguments"]["q"]) <= 1025
    assert record["truncated"]["arguments.q"] == 3_000_000
