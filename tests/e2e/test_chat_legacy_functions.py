"""Legacy function calling (`functions=[...]`) end to end, through the official SDK: a valid
call arrives byte-identical, an invalid one is repaired in a legacy-shaped round, block mode
answers the explanation with `finish_reason: "stop"`.

The scripted model speaks tool calls only, so a small upstream here answers legacy-shaped
replies (tests/dialects/test_chat_legacy_functions.py builds them) and records each request.
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
from tests.dialects.test_chat_legacy_functions import BAD, FUNCTIONS, GOOD, completion, stream
from tests.e2e.clients import openai_client
from tests.helpers.serve import serve, sse_response

MESSAGES = [{"role": "user", "content": "Any refund tickets?"}]
STREAMING = pytest.mark.parametrize("streaming", [False, True], ids=["whole", "stream"])


@dataclass
class Upstream:
    """Answers with a legacy call (`arguments`); a repair round (it carries a `role:
    "function"` result) gets the corrected call, always as a whole completion."""

    url: str = ""
    arguments: str = GOOD
    requests: list[dict[str, Any]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        if any(m.get("role") == "function" for m in body["messages"]):
            data = completion(GOOD, response_id=f"chatcmpl-round{len(self.requests) - 1}")
            return web.Response(body=data, content_type="application/json")
        if not body.get("stream"):
            return web.Response(body=completion(self.arguments), content_type="application/json")
        return await sse_response(request, stream(self.arguments, text="Let me look."))


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    served = Upstream()
    async with serve(served.handle) as served.url:
        yield served


@pytest.fixture
async def start(upstream: Upstream, start_sidecar: StartSidecar) -> StartSidecar:
    async def _start(**overrides: Any) -> Running:
        return await start_sidecar(openai_upstream=upstream.url, anthropic_upstream=upstream.url, **overrides)

    return _start


@dataclass
class Received:
    """What the agent made of the answer: the legacy call, the text, the finish reason."""

    call: tuple[str, str] | None
    text: str
    finish: str | None
    fragments: list[str] = field(default_factory=list)  # every argument piece that arrived


async def ask(base: str, streaming: bool) -> Received:
    functions: Any = FUNCTIONS  # the SDK types both as TypedDicts
    messages: Any = MESSAGES
    async with openai_client(base) as client:
        if not streaming:
            answer = await client.chat.completions.create(model="gpt-test", messages=messages, functions=functions)
            choice = answer.choices[0]
            call = choice.message.function_call
            return Received(
                (call.name, call.arguments) if call else None, choice.message.content or "", choice.finish_reason
            )
        name, arguments, text, finish, pieces = "", "", "", None, []
        chunks = await client.chat.completions.create(
            model="gpt-test", messages=messages, functions=functions, stream=True
        )
        async for chunk in chunks:
            for piece in chunk.choices:
                delta = piece.delta
                text += delta.content or ""
                if delta.function_call is not None:
                    name += delta.function_call.name or ""
                    arguments += delta.function_call.arguments or ""
                    pieces.append(delta.function_call.arguments or "")
                finish = piece.finish_reason or finish
        return Received((name, arguments) if name else None, text, finish, pieces)


@STREAMING
async def test_valid_call_arrives_unchanged(start: StartSidecar, upstream: Upstream, streaming: bool) -> None:
    proxy = await start()
    received = await ask(proxy.proxy_url, streaming)
    assert received.call == ("search", GOOD)
    assert received.finish == "function_call"
    assert len(upstream.requests) == 1
    assert upstream.requests[0]["functions"] == FUNCTIONS


@STREAMING
async def test_valid_call_is_byte_identical(start: StartSidecar, upstream: Upstream, streaming: bool) -> None:
    proxy = await start()
    body = {"model": "gpt-test", "messages": MESSAGES, "functions": FUNCTIONS, "stream": streaming}
    seen = []
    async with aiohttp.ClientSession() as session:
        for base in (upstream.url, proxy.proxy_url):
            async with session.post(f"{base}/v1/chat/completions", json=body) as response:
                assert response.status == 200
                seen.append(await response.read())
    direct, proxied = seen
    assert proxied == direct
    assert b'"function_call"' in direct


@STREAMING
async def test_invalid_call_is_repaired_in_legacy_shape(
    start: StartSidecar, upstream: Upstream, streaming: bool
) -> None:
    upstream.arguments = BAD
    proxy = await start()
    received = await ask(proxy.proxy_url, streaming)
    assert received.call == ("search", GOOD)  # only the corrected call reaches the agent
    assert received.finish == "function_call"
    assert BAD not in "".join(received.fragments)

    assert len(upstream.requests) == 2
    repair = upstream.requests[1]
    assert repair["stream"] is False and repair["functions"] == FUNCTIONS
    assert [m["role"] for m in repair["messages"]] == ["user", "assistant", "function"]
    assistant, result = repair["messages"][1:]
    assert assistant["function_call"] == {"name": "search", "arguments": BAD}
    assert "tool_calls" not in assistant
    assert result["name"] == "search" and "tool_call_id" not in result
    assert json.loads(result["content"]) == {
        "status": "invalid_arguments",
        "errors": [
            {"field": "limit", "problem": 'expected integer, got string "10"', "expected": "integer at least 1"}
        ],
        "retryable": True,
    }


@STREAMING
async def test_block_mode_answers_the_explanation(start: StartSidecar, upstream: Upstream, streaming: bool) -> None:
    upstream.arguments = BAD
    proxy = await start(enforcement={"mode": "block"})
    received = await ask(proxy.proxy_url, streaming)
    assert received.call is None
    assert "[sidecar] These tool calls were not run" in received.text
    assert "search (function_call:chatcmpl-" in received.text and "limit" in received.text
    assert received.finish == "stop"
    assert len(upstream.requests) == 1
