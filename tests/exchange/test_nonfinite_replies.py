"""Arguments with NaN or an infinity in a reply that orjson cannot read (the stdlib fallback
reads it) are still refused by the lockdown: only calls of replies orjson read wholly are
vouched free of such numbers (`ToolCall.read_by_orjson`), and skip the walk for them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest
from aiohttp import web

from sidecar.dialects.base import read_json
from sidecar.model import ToolCall
from tests.exchange.test_malformed_upstream import A_END, A_START, JSON, SSE, sse
from tests.helpers.raw import post
from tests.helpers.serve import serve

FREE = {"type": "object"}


def _anthropic_block(value: str) -> bytes:
    return b'{"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo", "days": %s}}' % (
        value.encode()
    )


def _anthropic_whole(value: str) -> bytes:
    return b'{"type": "message", "role": "assistant", "content": [%s], "stop_reason": "tool_use"}' % _anthropic_block(
        value
    )


def _anthropic_streamed(value: str) -> bytes:
    """The call's input given whole in `content_block_start`, no deltas (the sidecar reads it)."""
    start = b'{"type": "content_block_start", "index": 0, "content_block": %s}' % _anthropic_block(value)
    stop = {"type": "content_block_stop", "index": 0}
    return sse(A_START, ("content_block_start", start), ("content_block_stop", stop), *A_END)


def _responses_whole(value: str) -> bytes:
    """A function call whose arguments are an object, not a string (the sidecar reads both)."""
    item = b'{"type": "function_call", "call_id": "c1", "name": "weather", "arguments": {"days": %s}}' % value.encode()
    return b'{"id": "resp_1", "object": "response", "status": "completed", "output": [%s]}' % item


REQUESTS = {
    "/v1/messages": {
        "model": "m",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "weather", "input_schema": FREE}],
    },
    "/v1/responses": {
        "model": "m",
        "input": "hi",
        "store": False,
        "tools": [{"type": "function", "name": "weather", "parameters": FREE}],
    },
}
# (path, stream, content type, reply with a value in place of the number)
CASES = [
    ("/v1/messages", False, JSON, _anthropic_whole),
    ("/v1/messages", True, SSE, _anthropic_streamed),
    ("/v1/responses", False, JSON, _responses_whole),
]


class RecordingUpstream:
    """Answers every request with `reply`, and keeps the bodies it was sent."""

    def __init__(self) -> None:
        self.reply: tuple[str, bytes] = (JSON, b"{}")
        self.bodies: list[bytes] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.read())
        content_type, body = self.reply
        return web.Response(body=body, headers={"Content-Type": content_type})


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[RecordingUpstream, str]]:
    stub = RecordingUpstream()
    async with serve(stub.handle) as url:
        yield stub, url


@pytest.mark.parametrize(("path", "stream", "content_type", "reply"), CASES)
@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
async def test_a_number_only_the_fallback_reads_is_refused(
    path, stream, content_type, reply, number, upstream, start_sidecar
):
    stub, url = upstream
    running = await start_sidecar(anthropic_upstream=url, openai_upstream=url)
    stub.reply = (content_type, reply(number))
    async with aiohttp.ClientSession() as session:
        await post(session, running.proxy_url, path, {**REQUESTS[path], "stream": stream})
    # The call was refused: the model got the lockdown's error in a repair round.
    assert len(stub.bodies) >= 2, "no repair round: the call was not refused"
    assert b"not a finite number" in stub.bodies[1] or b"non-finite" in stub.bodies[1]


@pytest.mark.parametrize(("path", "stream", "content_type", "reply"), CASES)
async def test_the_same_reply_with_a_finite_number_is_allowed(
    path, stream, content_type, reply, upstream, start_sidecar
):
    """The control: the replies above differ from an allowed one by the number alone."""
    stub, url = upstream
    running = await start_sidecar(anthropic_upstream=url, openai_upstream=url)
    stub.reply = (content_type, reply("3"))
    async with aiohttp.ClientSession() as session:
        status, _, raw = await post(session, running.proxy_url, path, {**REQUESTS[path], "stream": stream})
    assert status == 200
    assert len(stub.bodies) == 1
    assert b"weather" in raw


def test_read_json_says_which_parser_read_the_text() -> None:
    assert read_json(b'{"a": 1.5, "b": [1e300]}') == ({"a": 1.5, "b": [1e300]}, True)
    for text in (b'{"a": NaN}', b'{"a": Infinity}', b'{"a": 1e400}'):
        assert read_json(text)[1] is False, text


def test_a_call_is_vouched_for_the_arguments_it_had_only() -> None:
    call = ToolCall("c", "t", orjson.loads(b'{"a": 1}'), '{"a": 1}')
    assert not call.finite_arguments
    call.read_by_orjson()
    assert call.finite_arguments
    call.arguments = {"a": float("nan")}  # set afterwards: walked again
    assert not call.finite_arguments
    unparsed = ToolCall("c", "t", None, "{", parse_error="bad")
    unparsed.read_by_orjson()
    assert not unparsed.finite_arguments
