"""The scripted streams follow the same grammar, and the same key layout, as recorded traffic.

Each stream is reduced to a token sequence (event kind, block/delta type; runs of the same
token collapsed, since fragment counts vary) and compared with a real recording from
tests/fixtures/wire. Where the recording is recent enough, the JSON key order of every event
kind is compared as well, nested objects included.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest

from sidecar.dialects.sse import SSEEvent, parse_sse
from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn
from tests.helpers.wire import WIRE

USER = [{"role": "user", "content": "hi"}]


def collapse(tokens: list[str]) -> list[str]:
    return [t for i, t in enumerate(tokens) if i == 0 or tokens[i - 1] != t]


def anthropic_token(event: SSEEvent) -> str:
    data = event.json()
    if event.event == "content_block_start":
        return f"start:{data['content_block']['type']}"
    if event.event == "content_block_delta":
        return f"delta:{data['delta']['type']}"
    return str(event.event)


def chat_token(event: SSEEvent) -> str:
    if event.data == "[DONE]":
        return "[DONE]"
    data = event.json()
    if "error" in data:
        return "error"
    if not data["choices"]:
        return "usage"
    choice = data["choices"][0]
    delta = choice["delta"]
    if choice["finish_reason"]:
        return f"finish:{choice['finish_reason']}"
    if "role" in delta:
        return "role"
    if delta.get("tool_calls"):
        return "header" if "id" in delta["tool_calls"][0] else "arguments"
    return "content"


def responses_token(event: SSEEvent) -> str:
    return str(event.json()["type"])


def key_paths(value: Any, prefix: str = "") -> list[str]:
    """Every key path in document order; list items share the path of their first item."""
    paths: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "obfuscation":
                continue
            paths.append(prefix + key)
            paths += key_paths(item, f"{prefix}{key}.")
    elif isinstance(value, list) and value:
        paths += key_paths(value[0], f"{prefix}[].")
    return paths


def layouts(events: list[SSEEvent], token: Any) -> dict[str, list[str]]:
    """Key layout of the first event of each token kind."""
    found: dict[str, list[str]] = {}
    for event in events:
        if event.data != "[DONE]":
            found.setdefault(token(event), key_paths(event.json()))
    return found


def recorded(name: str) -> list[SSEEvent]:
    path = WIRE / name
    if path.suffix == ".jsonl":  # one data object per line, framing stripped
        lines = [line for line in path.read_text().splitlines() if line]
        return [SSEEvent(line.encode(), orjson.loads(line)["type"], line) for line in lines]
    return parse_sse(path.read_bytes())


async def scripted(turn: Turn, path: str, body: dict[str, Any]) -> list[SSEEvent]:
    async with (
        ScriptedModel([turn], seed=3) as model,
        aiohttp.ClientSession() as session,
        session.post(model.url + path, json={"model": "m", "stream": True, **body}) as resp,
    ):
        return parse_sse(await resp.read())


ANTHROPIC_CASES = [
    (
        "anthropic-stream-tool-use.sse",
        False,
        Turn(
            text="I'll check the current weather in Paris for you.",
            tool_calls=[ToolCallSpec("get_weather", {"location": "Paris"})],
        ),
    ),
    (
        "anthropic-stream-tool-use-parallel-empty-input.sse",
        True,
        Turn(tool_calls=[ToolCallSpec("pelican_name_generator")] * 2),
    ),
    (
        "anthropic-stream-thinking-tool-use.sse",
        True,
        Turn(thinking="The user wants me to use the tool.", tool_calls=[ToolCallSpec("v")]),
    ),
    ("anthropic-stream-error-midstream.sse", False, Turn(text="The question is simple.", stream_error_after=3)),
]


@pytest.mark.parametrize(("name", "same_layout", "turn"), ANTHROPIC_CASES, ids=[c[0] for c in ANTHROPIC_CASES])
async def test_anthropic_grammar(name: str, same_layout: bool, turn: Turn) -> None:
    ours = await scripted(turn, "/v1/messages", {"messages": USER, "max_tokens": 10})
    theirs = recorded(name)
    assert collapse([anthropic_token(e) for e in ours]) == collapse([anthropic_token(e) for e in theirs])
    if same_layout:
        assert layouts(ours, anthropic_token) == layouts(theirs, anthropic_token)


CHAT_CASES = [
    (
        "openai-chat-stream-tool-calls-parallel.sse",
        Turn(
            tool_calls=[
                ToolCallSpec("GetWeatherArgs", {"city": "Edinburgh", "units": "c"}),
                ToolCallSpec("get_stock_price", {"ticker": "AAPL"}),
            ]
        ),
    ),
    (
        "openai-chat-stream-tool-calls-parallel-empty-args.sse",
        Turn(tool_calls=[ToolCallSpec("get_country"), ToolCallSpec("get_product_name")]),
    ),
    (
        "openai-chat-stream-error-midstream.sse",
        Turn(text="The question is long enough to stream.", stream_error_after=3),
    ),
]


@pytest.mark.parametrize(("name", "turn"), CHAT_CASES, ids=[c[0] for c in CHAT_CASES])
async def test_chat_grammar(name: str, turn: Turn) -> None:
    ours = await scripted(turn, "/v1/chat/completions", {"messages": USER, "stream_options": {"include_usage": True}})
    theirs = recorded(name)
    assert collapse([chat_token(e) for e in ours]) == collapse([chat_token(e) for e in theirs])


async def test_chat_chunk_layout() -> None:
    turn = Turn(tool_calls=[ToolCallSpec("multiply", {"a": 1231, "b": 2331})])
    ours = await scripted(turn, "/v1/chat/completions", {"messages": USER, "stream_options": {"include_usage": True}})
    theirs = recorded("openai-chat-stream-tool-call.sse")
    ours_layout, theirs_layout = layouts(ours, chat_token), layouts(theirs, chat_token)
    for token in ("arguments", "finish:tool_calls", "usage"):
        assert ours_layout[token] == theirs_layout[token], token


RESPONSES_CASES = [
    (
        "openai-responses-stream-function-call.sse",
        True,
        Turn(tool_calls=[ToolCallSpec("multiply", {"a": 1231, "b": 2331})]),
    ),
    ("openai-responses-stream-error.chunks.jsonl", False, Turn(text="never seen", stream_error_after=2)),
]


@pytest.mark.parametrize(("name", "same_layout", "turn"), RESPONSES_CASES, ids=[c[0] for c in RESPONSES_CASES])
async def test_responses_grammar(name: str, same_layout: bool, turn: Turn) -> None:
    theirs = recorded(name)
    # Echo the recorded tool declarations so the response objects are comparable.
    tools = theirs[0].json()["response"]["tools"]
    ours = await scripted(turn, "/v1/responses", {"input": "hi", "tools": tools})
    assert collapse([responses_token(e) for e in ours]) == collapse([responses_token(e) for e in theirs])
    assert [e.json()["sequence_number"] for e in ours] == list(range(len(ours)))
    if same_layout:
        assert layouts(ours, responses_token) == layouts(theirs, responses_token)
    else:
        ours_error = next(e.json() for e in ours if e.event == "error")
        theirs_error = next(e.json() for e in theirs if e.event == "error")
        assert key_paths(ours_error) == key_paths(theirs_error)


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("anthropic-request-thinking-tool-result.json", "/v1/messages"),
        ("anthropic-request-tool-result-parallel.json", "/v1/messages"),
        ("openai-chat-request-tool-message.json", "/v1/chat/completions"),
        ("openai-chat-request-tool-messages-parallel.json", "/v1/chat/completions"),
        ("openai-responses-request-function-call-output.json", "/v1/responses"),
    ],
)
async def test_recorded_requests_pass_pairing_checks(name: str, path: str) -> None:
    """Real, valid follow-up requests must not trip the pairing checks."""
    async with ScriptedModel([Turn(text="ok")]) as model, aiohttp.ClientSession() as session:
        async with session.post(
            model.url + path, data=(WIRE / name).read_bytes(), headers={"Content-Type": "application/json"}
        ) as resp:
            assert resp.status == 200, await resp.text()
        assert model.remaining == 0
