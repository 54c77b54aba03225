"""Upstream failures reach the agent the way the provider itself would deliver them: HTTP
errors with their status and body, provider-shaped 502/504 when the sidecar cannot get an
answer, in-stream errors as the SDK's streaming error; and an agent that hangs up cancels the
upstream request."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from sidecar.app import Running
from sidecar.scripted import ScriptedModel, Turn, UpstreamError
from tests.e2e.clients import anthropic_client, openai_client
from tests.helpers.metrics import scrape
from tests.helpers.ports import free_port
from tests.helpers.serve import serve, sse_response

USER = [{"role": "user", "content": "Hello?"}]
PROTOCOLS = ["anthropic", "openai_chat", "openai_responses"]
Call = Callable[[str], Awaitable[Any]]


def _call(protocol: str, stream: bool) -> Call:
    """One model request with the official SDK; streams are read to the end."""

    async def run(base: str) -> Any:
        if protocol == "anthropic":
            async with anthropic_client(base) as client:
                if stream:
                    async with client.messages.stream(model="claude-test", max_tokens=64, messages=USER) as s:
                        return [event.type async for event in s]
                return await client.messages.create(model="claude-test", max_tokens=64, messages=USER)
        async with openai_client(base) as client:
            if protocol == "openai_chat":
                if stream:
                    chunks = await client.chat.completions.create(model="gpt-test", messages=USER, stream=True)
                    return [chunk async for chunk in chunks]
                return await client.chat.completions.create(model="gpt-test", messages=USER)
            if stream:
                events = await client.responses.create(model="gpt-test", input="Hello?", stream=True)
                return [event async for event in events]
            return await client.responses.create(model="gpt-test", input="Hello?")

    return run


async def _error_of(call: Call, base: str) -> Exception:
    try:
        await call(base)
    except (anthropic.APIError, openai.APIError) as exc:
        return exc
    raise AssertionError("the SDK raised nothing")


def _sdk_status_error(protocol: str) -> type[Exception]:
    return anthropic.APIStatusError if protocol == "anthropic" else openai.APIStatusError


# -- provider errors pass through --------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("status", [400, 429, 500, 529])
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_http_errors_pass_through(model, sidecar, protocol, status, stream):
    call = _call(protocol, stream)
    errors: list[Any] = []
    for base in (sidecar.proxy_url, model.url):
        model.reset(seed=3)
        model.add_turns(Turn(error=UpstreamError(status, headers={"retry-after": "3"})))
        errors.append(await _error_of(call, base))
    via, direct = errors
    assert isinstance(via, _sdk_status_error(protocol))
    assert type(via) is type(direct)
    assert via.status_code == direct.status_code == status
    assert via.response.text == direct.response.text  # the provider's own body, byte for byte
    assert via.response.headers["retry-after"] == "3"
    assert via.body == direct.body


# -- no answer at all: provider-shaped 502 / 504 ------------------------------------------------


def _assert_provider_shaped(protocol: str, error: Any, status: int, words: str) -> None:
    assert isinstance(error, _sdk_status_error(protocol))
    assert error.status_code == status
    if protocol == "anthropic":
        assert error.body["type"] == "error"
        assert error.body["error"]["type"] == {502: "api_error", 504: "timeout_error"}[status]
        message = error.body["error"]["message"]
    else:  # the openai SDK hands over the inner `error` object
        assert error.body["type"] == {502: "upstream_error", 504: "timeout"}[status]
        message = error.body["message"]
    assert words in message


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_unreachable_upstream_is_502(start_sidecar, protocol, stream):
    dead = f"http://127.0.0.1:{free_port()}"
    running = await start_sidecar(anthropic_upstream=dead, openai_upstream=dead)
    error = await _error_of(_call(protocol, stream), running.proxy_url)
    _assert_provider_shaped(protocol, error, 502, "unreachable")
    # Counted by cause, and never as if the upstream had answered 502.
    m = await scrape(running.admin_url)
    provider = "anthropic" if protocol == "anthropic" else "openai"
    assert m.value("sidecar_upstream_errors_total", provider=provider, cause="connect") == 1
    assert m.total("sidecar_upstream_request_duration_seconds_count", status="502") == 0


async def test_unreachable_upstream_untouched_paths(start_sidecar):
    dead = f"http://127.0.0.1:{free_port()}"
    running = await start_sidecar(anthropic_upstream=dead, openai_upstream=dead)
    async with anthropic_client(running.proxy_url) as a, openai_client(running.proxy_url) as o:
        with pytest.raises(anthropic.APIStatusError) as a_error:
            await a.models.list()
        with pytest.raises(openai.APIStatusError) as o_error:
            await o.models.list()
    _assert_provider_shaped("anthropic", a_error.value, 502, "unreachable")
    _assert_provider_shaped("openai_chat", o_error.value, 502, "unreachable")


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_upstream_timeout_is_504(model, start_sidecar, protocol, stream):
    running = await start_sidecar(upstream_timeout_s=0.5)
    model.add_turns(Turn(text="late", first_byte_delay_s=5))
    started = time.perf_counter()
    error = await _error_of(_call(protocol, stream), running.proxy_url)
    elapsed = time.perf_counter() - started
    _assert_provider_shaped(protocol, error, 504, "timed out")
    assert elapsed < 5 * 0.6  # answered by the sidecar's timeout, not the model's late reply
    # The abandoned upstream request is cancelled, not left running.
    await _wait_for(lambda: model.disconnects == 1, 4)


# -- errors inside a stream ------------------------------------------------------------------


@pytest.mark.parametrize("after", [0, 3])
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_in_stream_error_reaches_the_sdk(model, sidecar, protocol, after):
    call = _call(protocol, stream=True)
    errors: list[Any] = []
    for base in (sidecar.proxy_url, model.url):
        model.reset(seed=5)
        model.add_turns(
            Turn(
                text="a few words before it breaks",
                stream_error_after=after,
                error=UpstreamError(529 if protocol == "anthropic" else 500),
            )
        )
        errors.append(await _error_of(call, base))
    via, direct = errors
    assert type(via) is type(direct)
    assert isinstance(via, anthropic.APIStatusError if protocol == "anthropic" else openai.APIError)
    assert str(via) == str(direct)
    assert via.body == direct.body


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_stream_stalling_midway_ends_with_an_error(model, start_sidecar, protocol):
    """The upstream stops sending mid-stream: the SDK gets its streaming error, not a stream
    that merely stops (which would pass a truncated answer off as complete)."""
    running = await start_sidecar(upstream_timeout_s=0.5)
    model.add_turns(Turn(text="words that stall after the first event", delay_s=3))
    error = await _error_of(_call(protocol, stream=True), running.proxy_url)
    assert isinstance(error, anthropic.APIStatusError if protocol == "anthropic" else openai.APIError)
    assert "timed out" in str(error)
    await _wait_for(lambda: model.disconnects == 1, 4)


# -- the agent hangs up: the upstream request is cancelled -------------------------------------

BODIES = {
    "anthropic": (
        "/v1/messages",
        {"model": "claude-test", "max_tokens": 512, "messages": USER, "stream": True},
        {"anthropic-version": "2023-06-01", "x-api-key": "k"},
    ),
    "openai_chat": ("/v1/chat/completions", {"model": "gpt-test", "messages": USER, "stream": True}, {}),
    "openai_responses": ("/v1/responses", {"model": "gpt-test", "input": "Hello?", "stream": True}, {}),
}
LONG_TEXT = " ".join(f"word{i}" for i in range(60))  # at least 20 text events


async def _wait_for(condition: Callable[[], bool], within: float) -> float:
    started = time.perf_counter()
    while not condition():
        assert time.perf_counter() - started < within, "condition not reached"
        await asyncio.sleep(0.02)
    return time.perf_counter() - started


async def _works_afterwards(model: ScriptedModel, running: Running) -> None:
    model.add_turns(Turn(text="still fine"))
    async with anthropic_client(running.proxy_url) as client:
        message = await client.messages.create(model="claude-test", max_tokens=16, messages=USER)
    assert message.content[0].text == "still fine"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_client_disconnect_mid_stream_cancels_upstream(model, sidecar, protocol):
    delay = 0.2
    script_duration = delay * 20  # the model would keep streaming at least this long
    path, body, headers = BODIES[protocol]
    model.add_turns(Turn(text=LONG_TEXT, delay_s=delay))
    session = aiohttp.ClientSession()
    try:
        response = await session.post(sidecar.proxy_url + path, json=body, headers=headers)
        assert response.status == 200
        first = await response.content.readuntil(b"\n\n")  # one whole event
        assert b"data:" in first
        hung_up = time.perf_counter()
        response.close()  # drop the connection mid-stream
    finally:
        await session.close()
    noticed = await _wait_for(lambda: model.disconnects == 1, script_duration)
    noticed = max(noticed, time.perf_counter() - hung_up)
    assert noticed < script_duration * 0.5, (noticed, script_duration)
    assert model.remaining == 0 and len(model.requests) == 1
    await _works_afterwards(model, sidecar)


async def test_client_disconnect_before_first_byte_cancels_upstream(model, sidecar):
    wait = 6.0
    path, body, headers = BODIES["anthropic"]
    model.add_turns(Turn(text="too late", first_byte_delay_s=wait))
    started = time.perf_counter()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.3)) as session:
        with pytest.raises(asyncio.TimeoutError):
            await session.post(sidecar.proxy_url + path, json=body, headers=headers)
    await _wait_for(lambda: model.disconnects == 1, wait)
    assert time.perf_counter() - started < wait * 0.5
    await _works_afterwards(model, sidecar)


async def test_truncated_passthrough_body_is_not_passed_off_as_whole(start_sidecar):
    """The upstream promises 1000 bytes and hangs up after 10: the agent must see a broken
    response, never a short body that looks complete."""

    async def liar(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
        writer.write(b'{"data": [')
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(liar, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        running = await start_sidecar(openai_upstream=f"http://127.0.0.1:{port}")
        async with aiohttp.ClientSession() as session, session.get(running.proxy_url + "/v1/models") as response:
            assert response.status == 200
            with pytest.raises(aiohttp.ClientPayloadError):
                await response.read()
    finally:
        server.close()
        await server.wait_closed()


async def test_stream_cut_before_its_last_event_ends_with_an_error_event(start_sidecar):
    """The upstream closes after a held tool call began: no partial call, an SDK error."""
    from aiohttp import web

    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_cut",
                    "type": "message",
                    "role": "assistant",
                    "model": "m",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "toolu_cut", "name": "t", "input": {}},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": '{"a": 1}'},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ]

    async def cut(request: web.Request) -> web.StreamResponse:
        await request.read()
        body = b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)
        return await sse_response(request, body)  # no message_delta, no message_stop

    async with serve(cut) as upstream:
        sidecar = await start_sidecar(anthropic_upstream=upstream)
        seen: list[str] = []
        async with anthropic_client(sidecar.proxy_url) as client:
            with pytest.raises(anthropic.APIStatusError) as raised:
                async with client.messages.stream(
                    model="m",
                    max_tokens=16,
                    messages=[{"role": "user", "content": "x"}],
                    tools=[{"name": "t", "input_schema": {"type": "object"}}],
                ) as stream:
                    async for event in stream:
                        seen.append(event.type)
        assert "before its last event" in str(raised.value)
        assert seen == ["message_start"]  # the held call never reached the agent
