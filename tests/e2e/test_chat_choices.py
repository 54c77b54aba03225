"""Chat Completions with `n=2` end to end, through the official SDK: choice 0's calls are
enforced, the calls of choice 1 never reach the agent, and an n=2 reply without such calls
is byte-identical to the upstream's.

The scripted model has no `n`, so a small upstream here answers with recorded-shape n=2
completions (tests/dialects/test_chat_choices.py builds them).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from sidecar.app import Running
from tests.conftest import StartSidecar
from tests.dialects.test_chat_choices import OTHER_CHOICE_NOTE, PARIS, USAGE, completion, stream
from tests.e2e.clients import WEATHER_TOOL_CHAT, openai_client
from tests.helpers.serve import serve, sse_response

MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
TOOLS: list[Any] = [WEATHER_TOOL_CHAT, {"type": "function", "function": {"name": "list_cities"}}]
BAD = '{"city":"Paris","days":"3"}'  # days must be an integer: lockdown refuses it
FIXED = '{"city":"Paris","days":3}'


@dataclass
class Upstream:
    """Answers with n=2 bodies; a repair request (it carries tool results) gets one choice."""

    url: str = ""
    first_call: str | None = PARIS
    other_calls: bool = True
    requests: list[dict[str, Any]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        if any(m.get("role") == "tool" for m in body["messages"]):
            repaired = json.loads(completion(first_call=FIXED))
            repaired["choices"] = repaired["choices"][:1]
            return web.json_response(repaired)
        if not body.get("stream"):
            data = completion(self.first_call, self.other_calls)
            return web.Response(body=data, content_type="application/json")
        return await sse_response(request, stream(self.first_call, self.other_calls))


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    served = Upstream()
    async with serve(served.handle) as served.url:
        yield served


@pytest.fixture
async def proxy(upstream: Upstream, start_sidecar: StartSidecar) -> Running:
    return await start_sidecar(openai_upstream=upstream.url, anthropic_upstream=upstream.url)


async def ask(base: str, stream: bool) -> Any:
    async with openai_client(base) as client:
        args: dict[str, Any] = {"model": "gpt-test", "messages": MESSAGES, "tools": TOOLS, "n": 2}
        if not stream:
            return await client.chat.completions.create(**args)
        async with client.chat.completions.stream(**args, stream_options={"include_usage": True}) as events:
            chunks = [event.chunk async for event in events if event.type == "chunk"]
            final = await events.get_final_completion()
        for chunk in chunks:  # not even a fragment of choice 1's calls arrived
            assert all(not c.delta.tool_calls for c in chunk.choices if c.index != 0)
        return final


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "stream"])
async def test_choice_one_calls_never_reach_the_agent(proxy: Running, streaming: bool) -> None:
    final = await ask(proxy.proxy_url, streaming)
    first, other = final.choices
    assert [(c.id, c.function.name, c.function.arguments) for c in first.message.tool_calls or []] == [
        ("call_a0", "get_weather", PARIS)
    ]
    assert first.finish_reason == "tool_calls"
    assert other.message.tool_calls is None
    assert other.message.content == "Let me check.\n\n" + OTHER_CHOICE_NOTE
    assert other.finish_reason == "stop"
    assert final.usage is not None and final.usage.total_tokens == USAGE["total_tokens"]


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "stream"])
async def test_choice_zero_is_repaired_and_choice_one_kept(proxy: Running, upstream: Upstream, streaming: bool) -> None:
    upstream.first_call = BAD
    final = await ask(proxy.proxy_url, streaming)
    first, other = final.choices
    assert [c.function.arguments for c in first.message.tool_calls or []] == [FIXED]
    assert first.finish_reason == "tool_calls"
    assert other.message.tool_calls is None
    assert other.message.content == "Let me check.\n\n" + OTHER_CHOICE_NOTE
    assert other.finish_reason == "stop"
    repair = upstream.requests[1]
    assert "n" not in repair  # a repair round continues choice 0's conversation only
    assert [m["role"] for m in repair["messages"]] == ["user", "assistant", "tool"]
    assert [c["id"] for c in repair["messages"][1]["tool_calls"]] == ["call_a0"]


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "stream"])
async def test_n2_without_other_choice_calls_is_byte_identical(
    proxy: Running, upstream: Upstream, streaming: bool
) -> None:
    upstream.other_calls = False
    body = {"model": "gpt-test", "messages": MESSAGES, "tools": TOOLS, "n": 2, "stream": streaming}
    seen = []
    async with aiohttp.ClientSession() as session:
        for base in (upstream.url, proxy.proxy_url):
            async with session.post(f"{base}/v1/chat/completions", json=body) as response:
                assert response.status == 200
                seen.append(await response.read())
    direct, proxied = seen
    assert proxied == direct
    assert b'"index": 1' in direct or b'"index":1' in direct
