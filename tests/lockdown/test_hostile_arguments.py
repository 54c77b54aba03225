"""Tool calls with hostile arguments, through the scripted model and all three protocols:
refused with a structured error the model receives (or allowed when valid), never a crash."""

from __future__ import annotations

import json
import logging
from typing import Any

import aiohttp
import orjson
import pytest

from sidecar.dialects.sse import parse_sse
from sidecar.scripted import RecordedRequest, ToolCallSpec, Turn
from tests.helpers.raw import ENDPOINTS, assert_clean_log, post

FREE = {"type": "object"}
STRICT = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": False}
INVALID = {"type": 5}

DEEP_ARGS = '{"q":' + '{"a":[' * 20 + "1" + "]}" * 20 + "}"
# Deeper than the embedded Rego engine evaluates: the policy fails closed (a denial).
POLICY_DEEP_ARGS = '{"q":' + '{"a":[' * 120 + "1" + "]}" * 120 + "}"
TOO_DEEP_ARGS = '{"q":' + "[" * 2000 + "]" * 2000 + "}"
# (name, schema, raw arguments, allowed?)
CASES: list[tuple[str, dict[str, Any], str, bool]] = [
    ("deeply nested", FREE, DEEP_ARGS, True),
    ("deeply nested, strict", STRICT, DEEP_ARGS, False),
    ("nested beyond the policy engine", FREE, POLICY_DEEP_ARGS, False),
    ("nested beyond any parser", FREE, TOO_DEEP_ARGS, False),
    ("nested beyond what can be written", FREE, '{"q":' + "[" * 300 + "]" * 300 + "}", False),
    ("very long string", STRICT, json.dumps({"q": "x" * 100_000}), True),
    ("unicode", STRICT, json.dumps({"q": "ünï ☃ 😀 \u202e \x00"}, ensure_ascii=False), True),
    ("lone surrogate", STRICT, '{"q": "\\ud800"}', False),
    ("NaN", FREE, '{"q": NaN}', False),
    ("Infinity", FREE, '{"q": Infinity}', False),
    ("1e400", FREE, '{"q": 1e400}', False),
    ("1e20", STRICT, '{"q": 1e20}', False),
    ("keys with dots and brackets", STRICT, '{"q": "a", "a.b[0]": 1, "$ref": "#", "": 2}', False),
    ("keys with dots, free", FREE, '{"a.b[0]": 1, "x]": {"[y": 2}}', True),
    ("array", FREE, "[1, 2]", False),
    ("string", FREE, '"hello"', False),
    ("null", FREE, "null", False),
    ("number", FREE, "5", False),
    ("not JSON", FREE, "{'q': 1}", False),
    ("invalid schema", INVALID, '{"q": "a"}', False),
]


def _tools(path: str, schema: dict[str, Any]) -> list[dict[str, Any]]:
    if path == "/v1/messages":
        return [{"name": "search", "input_schema": schema}]
    if path == "/v1/chat/completions":
        return [{"type": "function", "function": {"name": "search", "parameters": schema}}]
    return [{"type": "function", "name": "search", "parameters": schema}]


def _request(path: str, schema: dict[str, Any], stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "stream": stream, "tools": _tools(path, schema)}
    if path == "/v1/responses":
        return {**body, "input": "go", "store": False}
    return {**body, "max_tokens": 64, "messages": [{"role": "user", "content": "go"}]}


def _scripted_as_empty(raw: str) -> bool:
    """The scripted model's Anthropic JSON body sends `{}` for raw arguments orjson cannot read."""
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError:
        return True
    return False


def _answered(request: RecordedRequest) -> bool:
    return b'\\"retryable\\"' in request.body or b'"retryable"' in request.body


def _calls(path: str, raw: bytes, stream: bool) -> int:
    """How many tool calls the agent received."""
    if stream:
        events = [e.json() for e in parse_sse(raw) if e.data.startswith("{")]
        if path == "/v1/messages":
            return sum(
                1 for e in events if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use"
            )
        if path == "/v1/chat/completions":
            return sum(1 for e in events for c in e["choices"] for t in c["delta"].get("tool_calls") or [] if "id" in t)
        return sum(
            1 for e in events if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"
        )
    body = orjson.loads(raw)
    if path == "/v1/messages":
        return sum(1 for b in body["content"] if b["type"] == "tool_use")
    if path == "/v1/chat/completions":
        return len(body["choices"][0]["message"].get("tool_calls") or [])
    return sum(1 for i in body["output"] if i["type"] == "function_call")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("path", list(ENDPOINTS))
async def test_hostile_arguments(path, stream, model, start_sidecar, caplog):
    caplog.set_level(logging.WARNING)
    current: dict[str, str] = {}

    def respond(request: RecordedRequest) -> Turn:
        if _answered(request):  # the repair round: the model gives up with text
            return Turn(text="sorry")
        return Turn(tool_calls=[ToolCallSpec("search", raw_arguments=current["raw"])])

    model.responder = respond
    running = await start_sidecar()
    async with aiohttp.ClientSession() as session:
        for name, schema, raw_args, allowed in CASES:
            current["raw"] = raw_args
            if path == "/v1/messages" and not stream and raw_args.count("[") > 254:
                continue  # the stand-in cannot write that body (too-deep replies: test_malformed_upstream)
            if path == "/v1/messages" and not stream and _scripted_as_empty(raw_args):
                allowed = schema is FREE  # a non-streamed tool_use carries an object: the stand-in sends {}
            before = len(model.model_requests)
            status, _, raw = await post(session, running.proxy_url, path, _request(path, schema, stream))
            assert status == 200, (name, raw[:300])
            rounds = model.model_requests[before:]
            if allowed:
                assert len(rounds) == 1, name
                assert _calls(path, raw, stream) == 1, name
            else:
                assert len(rounds) == 2, name  # one repair round carrying the structured error
                assert _calls(path, raw, stream) == 0, name
                assert b"retryable" in rounds[1].body and b"status" in rounds[1].body, name
    assert_clean_log(caplog)
