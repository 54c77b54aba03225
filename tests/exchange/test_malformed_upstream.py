"""Malformed upstream replies: the agent gets the upstream bytes untouched or a provider-shaped
error (HTTP or in-stream), the sidecar logs no traceback and keeps serving."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from tests.helpers.raw import ENDPOINTS, assert_clean_log, assert_provider_error, post
from tests.helpers.serve import serve

SSE = "text/event-stream"
JSON = "application/json"


def sse(*events: tuple[str | None, Any]) -> bytes:
    out = b""
    for name, data in events:
        payload = data if isinstance(data, bytes) else orjson.dumps(data)
        out += (b"event: " + name.encode() + b"\n" if name else b"") + b"data: " + payload + b"\n\n"
    return out


TOOL_BLOCK = {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}
A_START = (
    "message_start",
    {
        "type": "message_start",
        "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "m", "usage": {}},
    },
)
A_TOOL = ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": TOOL_BLOCK})
A_DELTA = (
    "content_block_delta",
    {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": '{"city":"Oslo"}'},
    },
)
A_STOP = ("content_block_stop", {"type": "content_block_stop", "index": 0})
A_END = [
    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}}),
    ("message_stop", {"type": "message_stop"}),
]
ARGS = '{"city":"Oslo"}'
C_CALL = (
    None,
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "weather", "arguments": ARGS},
                        }
                    ]
                },
            }
        ],
    },
)
C_FINISH = (None, {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
DONE = (None, b"[DONE]")
R_CREATED = ("response.created", {"type": "response.created", "response": {"id": "resp_1", "output": []}})
R_ITEM = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "weather",
    "arguments": "",
    "status": "in_progress",
}
R_ADDED = ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": R_ITEM})
R_ARGS = (
    "response.function_call_arguments.delta",
    {
        "type": "response.function_call_arguments.delta",
        "output_index": 0,
        "item_id": "fc_1",
        "delta": '{"city":"Oslo"}',
    },
)
R_FINAL = {**R_ITEM, "status": "completed", "arguments": '{"city":"Oslo"}'}
R_DONE = (
    "response.completed",
    {"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "output": [R_FINAL]}},
)

# (name, content type, body) per endpoint; every case is also sent with stream true and false.
COMMON: list[tuple[str, str, bytes]] = [
    ("non-JSON 200", JSON, b"<html>bad gateway</html>"),
    ("JSON array", JSON, b"[1,2]"),
    ("empty", JSON, b""),
    ("too deep", JSON, b'{"a":' * 300 + b"1" + b"}" * 300),
    ("not SSE despite stream", "text/plain", b"hello"),
    ("SSE garbage lines", SSE, b"garbage\nmore: stuff\n\n\xff\xfe\n\ndata: {not json\n\n"),
    ("SSE cut mid-event", SSE, b'data: {"type": "mess'),
]
CASES: dict[str, list[tuple[str, str, bytes]]] = {
    "/v1/messages": [
        ("content a string", JSON, orjson.dumps({"type": "message", "content": "x", "stop_reason": "tool_use"})),
        (
            "input a list",
            JSON,
            orjson.dumps({"type": "message", "content": [{**TOOL_BLOCK, "input": [1]}], "stop_reason": "tool_use"}),
        ),
        ("blocks of wrong types", JSON, orjson.dumps({"content": [1, None, {"type": 5}, {"type": "tool_use"}]})),
        ("delta before start", SSE, sse(A_START, A_DELTA, A_TOOL, A_STOP, *A_END)),
        (
            "stop for unknown index",
            SSE,
            sse(A_START, ("content_block_stop", {"type": "content_block_stop", "index": 7}), *A_END),
        ),
        ("duplicate message_start", SSE, sse(A_START, A_TOOL, A_START, A_DELTA, A_STOP, *A_END)),
        ("invalid JSON data", SSE, sse(A_START, ("content_block_start", b"{nope"), A_TOOL, A_DELTA, A_STOP, *A_END)),
        (
            "index of wrong types",
            SSE,
            sse(
                A_START,
                ("content_block_start", {"type": "content_block_start", "index": "0", "content_block": [1]}),
                *A_END,
            ),
        ),
        ("stream cut after a call", SSE, sse(A_START, A_TOOL, A_DELTA)[:-5]),
    ],
    "/v1/chat/completions": [
        ("choices a string", JSON, orjson.dumps({"choices": "x"})),
        (
            "arguments a number",
            JSON,
            orjson.dumps(
                {
                    "choices": [
                        {
                            "index": 0,
                            "message": {
                                "tool_calls": [
                                    {"id": "c", "type": "function", "function": {"name": "weather", "arguments": 5}}
                                ]
                            },
                        }
                    ]
                }
            ),
        ),
        ("tool_calls an object", JSON, orjson.dumps({"choices": [{"message": {"tool_calls": {"a": 1}}}]})),
        ("function a string", JSON, orjson.dumps({"choices": [{"message": {"tool_calls": [{"function": "f"}]}}]})),
        ("DONE in the middle", SSE, sse(C_CALL, DONE, C_FINISH, DONE)),
        (
            "fragments of wrong types",
            SSE,
            sse(
                (
                    None,
                    {
                        "choices": [
                            {
                                "index": 0,
                                "delta": {
                                    "tool_calls": [
                                        1,
                                        {"index": "x", "function": "f"},
                                        {"index": None, "function": {"arguments": 5}},
                                    ]
                                },
                            },
                            3,
                        ]
                    },
                ),
                C_FINISH,
                DONE,
            ),
        ),
        ("chunk of wrong types", SSE, sse((None, {"choices": {"index": 0}, "usage": 5}), (None, [1]), DONE)),
        ("no terminator", SSE, sse(C_CALL)),
    ],
    "/v1/responses": [
        ("output a string", JSON, orjson.dumps({"id": "resp_1", "output": "x"})),
        ("arguments a number", JSON, orjson.dumps({"id": "resp_1", "output": [{**R_ITEM, "arguments": 5}]})),
        ("items of wrong types", JSON, orjson.dumps({"output": [1, {"type": ["function_call"]}, None]})),
        ("delta before added", SSE, sse(R_CREATED, R_ARGS, R_ADDED, R_ARGS, R_DONE)),
        (
            "output_index wrong",
            SSE,
            sse(
                R_CREATED,
                (
                    "response.output_item.added",
                    {"type": "response.output_item.added", "output_index": "0", "item": "x"},
                ),
                R_DONE,
            ),
        ),
        (
            "completed output wrong",
            SSE,
            sse(
                R_CREATED,
                R_ADDED,
                R_ARGS,
                ("response.completed", {"type": "response.completed", "response": {"output": 5}}),
            ),
        ),
        ("type not a string", SSE, sse(R_CREATED, (None, {"type": ["x"], "output_index": 0}), R_DONE)),
        ("cut after a call", SSE, sse(R_CREATED, R_ADDED, R_ARGS)),
    ],
}


class Upstream:
    """A tiny provider stand-in that answers exactly the bytes it is given."""

    def __init__(self) -> None:
        self.reply: tuple[int, str, bytes] = (200, JSON, b"{}")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        status, content_type, body = self.reply
        return web.Response(status=status, body=body, headers={"Content-Type": content_type})


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[Upstream, str]]:
    stub = Upstream()
    async with serve(stub.handle) as url:
        yield stub, url


REQUEST: dict[str, dict[str, Any]] = {
    "/v1/messages": {
        "model": "m",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "weather", "input_schema": {"type": "object"}}],
    },
    "/v1/chat/completions": {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "weather"}}],
    },
    "/v1/responses": {"model": "m", "input": "hi", "store": False, "tools": [{"type": "function", "name": "weather"}]},
}


def _ends_with_error_event(path: str, raw: bytes) -> bool:
    last = [block for block in raw.split(b"\n\n") if block.strip()][-1]
    data = [line[6:] for line in last.split(b"\n") if line.startswith(b"data: ")]
    if not data:
        return False
    body = orjson.loads(data[0])
    assert_provider_error(path, body)
    return True


@pytest.mark.parametrize("path", list(ENDPOINTS))
async def test_malformed_upstream_replies(path, upstream, start_sidecar, caplog):
    caplog.set_level(logging.WARNING)
    stub, url = upstream
    running = await start_sidecar(anthropic_upstream=url, openai_upstream=url)
    async with aiohttp.ClientSession() as session:
        for name, content_type, body in COMMON + CASES[path]:
            for stream in (False, True):
                stub.reply = (200, content_type, body)
                status, got_type, raw = await post(
                    session, running.proxy_url, path, {**REQUEST[path], "stream": stream}
                )
                where = f"{name} (stream={stream})"
                assert status in (200, 400, 502), where
                if raw == body:
                    continue  # untouched
                if status != 200:
                    assert_provider_error(path, orjson.loads(raw))
                elif got_type.startswith(SSE):
                    # Either a valid rewritten stream or one that ends with the protocol's error.
                    assert raw.endswith(b"\n\n"), where
                else:
                    parsed = orjson.loads(raw)
                    assert isinstance(parsed, dict), where
        # Still serving.
        stub.reply = (200, JSON, orjson.dumps({"type": "message", "content": [], "choices": [], "output": []}))
        status, _, _ = await post(session, running.proxy_url, path, REQUEST[path])
        assert status == 200
    assert_clean_log(caplog)


@pytest.mark.parametrize("path", list(ENDPOINTS))
async def test_too_deep_reply_is_refused(path, upstream, start_sidecar, caplog):
    """A reply the sidecar cannot check must not reach the agent unchecked."""
    stub, url = upstream
    running = await start_sidecar(anthropic_upstream=url, openai_upstream=url)
    stub.reply = (200, JSON, b'{"a":' * 300 + b"1" + b"}" * 300)
    async with aiohttp.ClientSession() as session:
        status, _, raw = await post(session, running.proxy_url, path, REQUEST[path])
    assert status == 502
    assert_provider_error(path, orjson.loads(raw))
    assert "nests deeper" in raw.decode()


@pytest.mark.parametrize("path", list(ENDPOINTS))
async def test_cut_stream_after_a_call_ends_with_an_error_event(path, upstream, start_sidecar, caplog):
    stub, url = upstream
    running = await start_sidecar(anthropic_upstream=url, openai_upstream=url)
    cut = {
        "/v1/messages": sse(A_START, A_TOOL, A_DELTA),
        "/v1/chat/completions": sse(C_CALL),
        "/v1/responses": sse(R_CREATED, R_ADDED, R_ARGS),
    }[path]
    stub.reply = (200, SSE, cut)
    async with aiohttp.ClientSession() as session:
        status, _, raw = await post(session, running.proxy_url, path, {**REQUEST[path], "stream": True})
    assert status == 200
    assert b"weather" not in raw  # the held call never reaches the agent
    assert _ends_with_error_event(path, raw)
    assert_clean_log(caplog)


async def test_last_resort_guard_answers_provider_shaped(upstream, start_sidecar, caplog, monkeypatch):
    """An unexpected sidecar bug becomes a provider-shaped 502 (or in-stream error), logged
    with its traceback; the next request is served."""
    from sidecar.dialects import ANTHROPIC, OPENAI_CHAT

    def broken(*_: Any) -> Any:
        raise RuntimeError("injected")

    stub, url = upstream
    running = await start_sidecar(anthropic_upstream=url, openai_upstream=url)
    async with aiohttp.ClientSession() as session:
        monkeypatch.setattr(OPENAI_CHAT, "read_reply", broken)
        stub.reply = (200, JSON, orjson.dumps({"choices": []}))
        status, _, raw = await post(session, running.proxy_url, "/v1/chat/completions", REQUEST["/v1/chat/completions"])
        assert status == 502
        assert_provider_error("/v1/chat/completions", orjson.loads(raw))

        monkeypatch.setattr(ANTHROPIC, "assembler", broken)
        stub.reply = (200, SSE, sse(A_START, *A_END))
        status, _, raw = await post(
            session, running.proxy_url, "/v1/messages", {**REQUEST["/v1/messages"], "stream": True}
        )
        assert status == 200 and _ends_with_error_event("/v1/messages", raw)
        monkeypatch.undo()
        status, _, _ = await post(
            session, running.proxy_url, "/v1/messages", {**REQUEST["/v1/messages"], "stream": True}
        )
        assert status == 200
    logged = [r for r in caplog.records if r.name == "sidecar.exchange" and r.exc_info is not None]
    assert len(logged) == 2 and all("injected" in str(r.exc_info[1]) for r in logged)
