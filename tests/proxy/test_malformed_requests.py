"""Malformed agent requests: never a 500 or a crash. What the sidecar cannot parse reaches the
provider untouched (the scripted model answers as the provider would); what it refuses itself
gets a provider-shaped 4xx."""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import aiohttp
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.raw import ENDPOINTS, assert_clean_log, assert_provider_error, post
from tests.helpers.strategies import JSON, WIRE_JSON, mutated

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
VALID: dict[str, dict[str, Any]] = {
    "/v1/messages": {
        "model": "claude-test",
        "max_tokens": 64,
        "tools": [{"name": "weather", "description": "d", "input_schema": SCHEMA}],
        "tool_choice": {"type": "auto"},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]},
        ],
    },
    "/v1/chat/completions": {
        "model": "gpt-test",
        "tools": [{"type": "function", "function": {"name": "weather", "parameters": SCHEMA}}],
        "tool_choice": "auto",
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ],
    },
    "/v1/responses": {
        "model": "gpt-test",
        "store": False,
        "tools": [{"type": "function", "name": "weather", "parameters": SCHEMA}],
        "input": [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": '{"city":"Oslo"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        ],
    },
}


def _deep(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": [value]}
    return value


HAND_PICKED: list[tuple[str, bytes | Any]] = [
    ("invalid JSON", b'{"model": "x", "messages": ['),
    ("not an object", [1, 2, 3]),
    ("a string", "hello"),
    ("null", None),
    ("empty body", b""),
    ("non-UTF-8 bytes", b'{"model": "\xff\xfe", "messages": []}'),
    ("lone surrogate", b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}], "max_tokens": 5}'),
    ("NaN and huge numbers", b'{"model": "m", "max_tokens": NaN, "temperature": 1e400, "n": 123456789012345678901234}'),
    ("tools not a list", {"tools": {"name": "weather"}}),
    ("tools entries not objects", {"tools": [1, "weather", None, []]}),
    (
        "tool names not strings",
        {
            "tools": [
                {"name": 5, "input_schema": SCHEMA},
                {"type": "function", "name": ["x"], "function": {"name": {"a": 1}}},
            ]
        },
    ),
    (
        "schema not an object",
        {
            "tools": [
                {
                    "name": "weather",
                    "input_schema": "object",
                    "type": "function",
                    "function": {"name": "weather", "parameters": 7},
                    "parameters": [1],
                }
            ]
        },
    ),
    (
        "schema invalid JSON Schema",
        {
            "tools": [
                {
                    "name": "weather",
                    "input_schema": {"type": 5},
                    "type": "function",
                    "parameters": {"type": 5},
                    "function": {"name": "weather", "parameters": {"type": 5}},
                }
            ]
        },
    ),
    ("messages wrong type", {"messages": "hello", "input": 5}),
    ("messages entries wrong type", {"messages": [1, None, "x", [{}]], "input": [1, "x", None]}),
    (
        "blocks missing fields",
        {
            "messages": [
                {"role": "user", "content": [{"type": "tool_result"}, {}, {"type": 3}]},
                {"role": "assistant", "tool_calls": [{}, 1]},
                {"role": "tool"},
            ],
            "input": [{"type": "function_call_output"}, {"type": "function_call"}],
        },
    ),
    ("tool_choice wrong", {"tool_choice": {"type": "tool", "name": ["weather"], "function": {"name": {}}}}),
    (
        "session fields wrong",
        {"metadata": {"user_id": {"a": 1}}, "user": [1], "previous_response_id": 5, "prompt_cache_key": {}},
    ),
    ("nesting 200 deep", {"metadata": _deep(100)}),
]


def _body(path: str, case: bytes | Any) -> bytes | Any:
    if isinstance(case, dict):
        return {**VALID[path], **case}
    return case


async def _check(session: aiohttp.ClientSession, url: str, path: str, body: bytes | Any) -> tuple[int, Any]:
    status, content_type, raw = await post(session, url, path, body)
    assert status != 500, raw[:300]
    assert content_type.startswith("application/json"), (status, content_type, raw[:200])
    parsed = orjson.loads(raw)
    if status >= 400:
        assert_provider_error(path, parsed)
    return status, parsed


@pytest.mark.parametrize("path", list(ENDPOINTS))
async def test_hand_picked_malformed_requests(path, start_sidecar, model, caplog):
    caplog.set_level(logging.WARNING)
    running = await start_sidecar()
    async with aiohttp.ClientSession() as session:
        for name, case in HAND_PICKED:
            before = len(model.model_requests)
            status, _ = await _check(session, running.proxy_url, path, _body(path, case))
            # Whatever the sidecar does not refuse itself, the provider judges.
            assert status < 500, name
            if len(model.model_requests) == before:
                assert 400 <= status < 500, name
        # Still serving: a valid request goes through.
        status, _ = await _check(session, running.proxy_url, path, VALID[path])
        assert status == 200
    assert_clean_log(caplog)


@pytest.mark.parametrize("path", list(ENDPOINTS))
async def test_too_deep_requests_are_refused_not_forwarded(path, start_sidecar, model, caplog):
    """Valid JSON the sidecar could not write back is refused: forwarding it would let the
    reply's tool calls pass unchecked."""
    running = await start_sidecar()
    async with aiohttp.ClientSession() as session:
        for depth in (130, 600):  # within orjson's read limit, and beyond it (stdlib fallback)
            deep = b'{"a":[' * depth + b'"x"' + b"]}" * depth
            raw = orjson.dumps({**VALID[path], "metadata": 0}).replace(b'"metadata":0', b'"metadata":' + deep)
            status, body = await _check(session, running.proxy_url, path, raw)
            assert status == 400
            assert "nests deeper" in str(body)
        assert model.model_requests == []
    assert_clean_log(caplog)


async def test_lone_surrogates_and_big_numbers_are_forwarded_untouched(start_sidecar, model, caplog):
    """JSON only the stdlib reads (lone surrogates, NaN, integers beyond 64 bits) is parsed
    and forwarded byte for byte; the provider (here the scripted model, strict like orjson) judges."""
    caplog.set_level(logging.WARNING)
    running = await start_sidecar()
    raw = orjson.dumps({**VALID["/v1/messages"], "max_tokens": 64}).replace(
        b'"content":"sunny"', b'"content":"sun\\ud800ny","big":123456789012345678901234567890,"n":NaN'
    )
    async with aiohttp.ClientSession() as session:
        status, _ = await _check(session, running.proxy_url, "/v1/messages", raw)
    assert status == 400
    assert [r.body for r in model.model_requests] == [raw]
    assert_clean_log(caplog)


@pytest.mark.parametrize("path", list(ENDPOINTS))
async def test_hypothesis_mutated_requests(path, start_sidecar, model, caplog):
    """Random JSON values mixed into a valid body, all against one sidecar."""
    caplog.set_level(logging.WARNING)
    running = await start_sidecar()
    loop = asyncio.get_running_loop()
    seen: list[int] = []

    async with aiohttp.ClientSession() as session:

        @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(body=mutated(VALID[path], WIRE_JSON) | st.dictionaries(st.text(max_size=8), JSON, max_size=4))
        def run(body: dict[str, Any]) -> None:
            future = asyncio.run_coroutine_threadsafe(_check(session, running.proxy_url, path, body), loop)
            status, _ = future.result(timeout=30)
            seen.append(status)

        # Collect now and not in the hypothesis thread (regorus engines must drop on their own).
        gc.collect()
        gc.disable()
        try:
            await asyncio.to_thread(run)
        finally:
            gc.enable()
        status, _ = await _check(session, running.proxy_url, path, VALID[path])
        assert status == 200
    assert len(seen) >= 50
    assert_clean_log(caplog)
