"""Framing the sidecar could read otherwise than the SDK (docs/coverage.md, "Framing"): each
reply below would hand the agent a call nobody checked if it were forwarded. The sidecar
refuses it (a provider-shaped 502, or the protocol's in-stream error), counts it in
`sidecar_requests_refused_total{reason}`, logs it once, and the call never reaches the SDK."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import orjson
import pytest
from aiohttp import web

from tests.e2e.clients import anthropic_client, openai_client
from tests.helpers.metrics import scrape
from tests.helpers.serve import serve

SSE = "text/event-stream"


def sse(*events: tuple[str | None, Any]) -> bytes:
    out = b""
    for name, data in events:
        payload = data if isinstance(data, bytes) else orjson.dumps(data)
        out += (b"event: " + name.encode() + b"\n" if name else b"") + b"data: " + payload + b"\n\n"
    return out


def a(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return kind, {"type": kind, **fields}


MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "m", "usage": {}}
TOOL = {"type": "tool_use", "id": "toolu_1", "name": "delete_all", "input": {}}
TEXT = {"type": "text", "text": ""}
ARGS = {"type": "input_json_delta", "partial_json": '{"path": "/"}'}
A_END = [a("message_delta", delta={"stop_reason": "tool_use"}, usage={}), a("message_stop")]


def a_tool(index: int) -> list[tuple[str, dict[str, Any]]]:
    return [
        a("content_block_start", index=index, content_block=TOOL),
        a("content_block_delta", index=index, delta=ARGS),
        a("content_block_stop", index=index),
    ]


ANTHROPIC_STREAMS = {
    # The SDK appends a block per start: index 0 twice is two blocks to it, one to a reader by index.
    "reused index": [
        a("message_start", message=MESSAGE),
        a("content_block_start", index=0, content_block=TEXT),
        a("content_block_stop", index=0),
        *a_tool(0),
        *A_END,
    ],
    "tool_use in message_start": [a("message_start", message={**MESSAGE, "content": [TOOL]}), *A_END],
    "gap in the indexes": [a("message_start", message=MESSAGE), *a_tool(3), *A_END],
    "delta after stop": [
        a("message_start", message=MESSAGE),
        *a_tool(0),
        a("content_block_delta", index=0, delta=ARGS),
        *A_END,
    ],
    "event name and type differ": [
        a("message_start", message=MESSAGE),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": TEXT}),
        ("ping", {"type": "content_block_start", "index": 0, "content_block": TOOL}),
        *A_END,
    ],
    "nested deeper than the parser reads": [
        a("message_start", message=MESSAGE),
        (
            "content_block_start",
            b'{"type":"content_block_start","index":0,"content_block":{"type":"tool_use",'
            b'"id":"toolu_1","name":"delete_all","input":' + b'{"a":' * 300 + b"1" + b"}" * 300 + b"}}",
        ),
        a("content_block_stop", index=0),
        *A_END,
    ],
}

R_CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "delete_all", "arguments": "{}"}
R_MESSAGE = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": []}


def r(kind: str, n: int, **fields: Any) -> tuple[str, dict[str, Any]]:
    return kind, {"type": kind, "sequence_number": n, **fields}


def response(status: str, output: list[Any]) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": status, "output": output}


RESPONSES_STREAMS = {
    # The SDK's final response is the terminal event's: a call only there is a call it runs.
    "call only in response.completed": [
        r("response.created", 0, response=response("in_progress", [])),
        r("response.completed", 1, response=response("completed", [R_CALL])),
    ],
    "call in response.created": [
        r("response.created", 0, response=response("in_progress", [R_CALL])),
        r("response.completed", 1, response=response("completed", [])),
    ],
    "done as another item": [
        r("response.created", 0, response=response("in_progress", [])),
        r("response.output_item.added", 1, output_index=0, item={**R_MESSAGE, "status": "in_progress"}),
        r("response.output_item.done", 2, output_index=0, item=R_CALL),
        r("response.completed", 3, response=response("completed", [R_CALL])),
    ],
    "events after the end": [
        r("response.created", 0, response=response("in_progress", [])),
        r("response.completed", 1, response=response("completed", [])),
        r("response.output_item.added", 2, output_index=0, item=R_CALL),
    ],
}


def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, dict[str, Any]]:
    return None, {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def fragment(**fields: Any) -> dict[str, Any]:
    return {"tool_calls": [{"index": 0, **fields}]}


CHAT_STREAMS = {
    # `read` is declared; the OpenAI SDK joins the name fragments into `read_all_files`.
    "name split across fragments": [
        chunk(fragment(id="call_1", type="function", function={"name": "read", "arguments": ""})),
        chunk(fragment(function={"name": "_all_files", "arguments": "{}"})),
        chunk({}, "tool_calls"),
        (None, b"[DONE]"),
    ],
    "chunks after [DONE]": [
        chunk({"content": "hi"}, "stop"),
        (None, b"[DONE]"),
        chunk(fragment(id="call_1", type="function", function={"name": "read", "arguments": "{}"})),
    ],
}

CHAT_CALL = {
    "id": "c1",
    "object": "chat.completion",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "delete_all", "arguments": "{}"}}
                ],
            },
        }
    ],
}
# (name, status, content type, body): whole replies the SDK would parse anyway.
WHOLE = [
    ("201 Created", 201, "application/json", orjson.dumps(CHAT_CALL), "status"),
    ("JSON under text/plain", 200, "text/plain", orjson.dumps(CHAT_CALL), "content_type"),
    ("an event stream to stream: false", 200, SSE, sse((None, CHAT_CALL), (None, b"[DONE]")), "content_type"),
    ("bytes that are not UTF-8", 200, "application/json", orjson.dumps(CHAT_CALL).replace(b"c1", b"c\xff"), "encoding"),
]


class Upstream:
    def __init__(self) -> None:
        self.reply: tuple[int, str, bytes] = (200, "application/json", b"{}")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        status, content_type, body = self.reply
        return web.Response(status=status, body=body, headers={"Content-Type": content_type})


@pytest.fixture
async def upstream(start_sidecar) -> AsyncIterator[tuple[Upstream, Any]]:
    stub = Upstream()
    async with serve(stub.handle) as url:
        yield stub, await start_sidecar(anthropic_upstream=url, openai_upstream=url)


async def _refusals(running: Any) -> float:
    return (await scrape(running.admin_url)).total("sidecar_requests_refused_total")


def _logged(caplog: pytest.LogCaptureFixture) -> int:
    return sum(1 for rec in caplog.records if rec.getMessage() == "request_refused")


@pytest.mark.parametrize("name", list(ANTHROPIC_STREAMS))
async def test_anthropic_streams_read_otherwise_by_the_sdk_are_refused(name, upstream, caplog):
    stub, running = upstream
    stub.reply = (200, SSE, sse(*ANTHROPIC_STREAMS[name]))
    before = await _refusals(running)
    async with anthropic_client(running.proxy_url) as client:
        with pytest.raises(anthropic.APIStatusError) as raised:
            async with client.messages.stream(
                model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}], tools=[DELETE]
            ) as stream:
                await stream.get_final_message()
    assert "cannot be checked the way clients read it" in str(raised.value)
    assert await _refusals(running) == before + 1 and _logged(caplog) == 1


DELETE = {"name": "delete_all", "input_schema": {"type": "object"}}


@pytest.mark.parametrize("name", list(RESPONSES_STREAMS))
async def test_responses_streams_read_otherwise_by_the_sdk_are_refused(name, upstream, caplog):
    stub, running = upstream
    stub.reply = (200, SSE, sse(*RESPONSES_STREAMS[name]))
    tools = [{"type": "function", "name": "delete_all", "parameters": {"type": "object"}}]
    async with openai_client(running.proxy_url) as client:
        with pytest.raises((openai.APIError, RuntimeError)) as raised:
            async with client.responses.stream(model="m", input="hi", tools=tools) as stream:  # type: ignore[arg-type]
                final = await stream.get_final_response()
                assert not [i for i in final.output if i.type == "function_call"]
    assert "cannot be checked" in str(raised.value) or "Expected" in str(raised.value)
    assert await _refusals(running) == 1 and _logged(caplog) == 1


@pytest.mark.parametrize("name", list(CHAT_STREAMS))
async def test_chat_streams_read_otherwise_by_the_sdk_are_refused(name, upstream, caplog):
    stub, running = upstream
    stub.reply = (200, SSE, sse(*CHAT_STREAMS[name]))
    tools = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
    final = None
    async with openai_client(running.proxy_url) as client:
        try:
            async with client.chat.completions.stream(
                model="m",
                messages=[{"role": "user", "content": "hi"}],
                tools=tools,  # type: ignore[arg-type]
            ) as stream:
                final = await stream.get_final_completion()
        except openai.APIError as exc:
            assert "cannot be checked" in str(exc)
    # Refused in the stream, or (after [DONE], where the SDK stops reading) never sent at all.
    assert final is None or not final.choices[0].message.tool_calls
    assert await _refusals(running) == 1 and _logged(caplog) == 1


@pytest.mark.parametrize(("name", "status", "content_type", "body", "reason"), WHOLE, ids=[w[0] for w in WHOLE])
async def test_whole_replies_the_sdk_would_parse_anyway_are_refused(name, status, content_type, body, reason, upstream):
    stub, running = upstream
    stub.reply = (status, content_type, body)
    async with openai_client(running.proxy_url) as client:
        with pytest.raises(openai.InternalServerError) as raised:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert raised.value.status_code == 502 and "delete_all" not in str(raised.value.body)
    assert (await scrape(running.admin_url)).value("sidecar_requests_refused_total", reason=reason) == 1


async def test_request_bodies_that_are_not_utf8_are_refused(upstream, caplog):
    caplog.set_level(logging.WARNING)
    _, running = upstream
    async with openai_client(running.proxy_url) as client:
        with pytest.raises(openai.BadRequestError, match="not valid UTF-8"):
            await client.post("/chat/completions", content=b'{"model": "m\xff", "messages": []}', cast_to=object)
    assert (await scrape(running.admin_url)).value("sidecar_requests_refused_total", reason="encoding") == 1


def _pieces_upstream(pieces: list[bytes]) -> Any:
    """A Chat stream written in these pieces, apart, so the sidecar reads each on its own."""

    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": SSE})
        await response.prepare(request)
        for piece in pieces:
            await response.write(piece)
            await asyncio.sleep(0.02)
        await response.write_eof()
        return response

    return handle


async def _chat_text(running: Any) -> str:
    messages: Any = [{"role": "user", "content": "hi"}]
    async with (
        openai_client(running.proxy_url) as client,
        client.chat.completions.stream(model="m", messages=messages) as stream,
    ):
        final = await stream.get_final_completion()
    return final.choices[0].message.content or ""


async def test_bytes_that_are_not_utf8_after_ascii_reads_are_refused(start_sidecar, caplog):
    """Reads that were all ASCII need no UTF-8 check; a later read with bytes that are not
    UTF-8 still refuses the stream (here inside a call's arguments)."""
    call = sse(chunk(fragment(id="call_1", type="function", function={"name": "read", "arguments": '{"p": "'})))
    bad = sse(chunk(fragment(function={"arguments": "x"}))).replace(b'"x"', b'"\xff"')
    end = sse(chunk(fragment(function={"arguments": '"}'})), chunk({}, "tool_calls"), (None, b"[DONE]"))
    async with serve(_pieces_upstream([sse(chunk({"content": "ok"})), call, bad, end])) as url:
        running = await start_sidecar(anthropic_upstream=url, openai_upstream=url)
        with pytest.raises(openai.APIError, match="not valid UTF-8"):
            await _chat_text(running)
        assert (await scrape(running.admin_url)).value("sidecar_requests_refused_total", reason="framing") == 1


async def test_a_character_split_across_reads_is_not_refused(start_sidecar):
    """UTF-8 is checked per event, so a character whose bytes come in two reads passes."""
    text = sse(chunk({"content": "caf\u00e9"}), chunk({}, "stop"), (None, b"[DONE]"))
    cut = text.index("\u00e9".encode()) + 1
    async with serve(_pieces_upstream([sse(chunk({"content": "ok "})), text[:cut], text[cut:]])) as url:
        running = await start_sidecar(anthropic_upstream=url, openai_upstream=url)
        assert await _chat_text(running) == "ok caf\u00e9"
        assert await _refusals(running) == 0
