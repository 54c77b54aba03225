"""The benchmark's pre-flight refuses to measure a target that changes the model's tool calls
or sends more than one upstream request per client request (a repair round)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from proxybench.forwarder import Forwarder
from proxybench.mock import MockProvider
from proxybench.preflight import PreflightError, check_target, refusals
from proxybench.serve import start_server


@pytest.fixture
async def mock_url() -> AsyncIterator[str]:
    runner, url = await start_server(MockProvider().handle)
    yield url
    await runner.cleanup()


async def test_an_unchanged_forwarder_passes(mock_url: str) -> None:
    forwarder = Forwarder(mock_url)
    runner, url = await start_server(forwarder.handle)
    try:
        async with aiohttp.ClientSession() as session:
            lines = await check_target(session, "forwarder", url, mock_url)
    finally:
        await runner.cleanup()
        await forwarder.close()
    assert len(lines) == 4 and all("2 tool calls intact, 1 upstream request" in line for line in lines)


async def test_changed_arguments_abort(mock_url: str) -> None:
    async with aiohttp.ClientSession() as upstream:

        async def tamper(request: web.BaseRequest) -> web.StreamResponse:
            async with upstream.post(mock_url + request.path, data=await request.read()) as answer:
                changed = (await answer.read()).replace(b"grammar.py", b"grammer.py")
                return web.Response(body=changed, content_type=answer.content_type)

        runner, url = await start_server(tamper)
        try:
            with pytest.raises(PreflightError, match="tool calls differ"):
                await check_target(upstream, "tamper", url, mock_url)
        finally:
            await runner.cleanup()


async def test_a_second_upstream_request_aborts(mock_url: str) -> None:
    async with aiohttp.ClientSession() as upstream:

        async def twice(request: web.BaseRequest) -> web.StreamResponse:
            body = await request.read()
            async with upstream.post(mock_url + request.path, data=body) as first:
                await first.read()
            async with upstream.post(mock_url + request.path, data=body) as answer:
                return web.Response(body=await answer.read(), content_type=answer.content_type)

        runner, url = await start_server(twice)
        try:
            with pytest.raises(PreflightError, match="2 upstream requests"):
                await check_target(upstream, "repairs", url, mock_url)
        finally:
            await runner.cleanup()


def test_sidecar_counters_that_mean_refusal() -> None:
    clean = 'sidecar_tool_calls_total{tool="grep",provider="anthropic",verdict="allow"} 8.0\n'
    assert refusals(clean) == []
    rejected = clean + 'sidecar_tool_calls_total{tool="grep",provider="anthropic",verdict="replay"} 1.0\n'
    assert refusals(rejected) == ["1 calls with verdict replay"]
    assert refusals("") == ["only 0 calls counted as allowed (expected 8)"]
