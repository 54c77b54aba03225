"""The scripted model against the official Anthropic SDK (Messages API)."""

from __future__ import annotations

import gzip

import anthropic
import orjson
import pytest

from sidecar.dialects.sse import parse_sse
from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn, UpstreamError

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = Turn(text="Let me look.", tool_calls=[ToolCallSpec("get_weather", {"city": "Paris"})])


async def test_create_returns_text_and_tool_use(model: ScriptedModel, claude) -> None:
    model.add_turns(WEATHER)
    msg = await claude.messages.create(model="claude-test", max_tokens=100, messages=USER)
    assert msg.model == "claude-test"
    assert msg.id.startswith("msg_01")
    assert msg.stop_reason == "tool_use"
    assert [b.type for b in msg.content] == ["text", "tool_use"]
    assert msg.content[0].text == "Let me look."
    tool = msg.content[1]
    assert tool.name == "get_weather" and tool.input == {"city": "Paris"}
    assert tool.id.startswith("toolu_01")
    assert msg.usage.input_tokens == len(model.requests[0].body) // 4
    assert model.requests[0].protocol == "anthropic"
    assert model.requests[0].json["model"] == "claude-test"


async def test_stream_final_message(model: ScriptedModel, claude) -> None:
    model.add_turns(WEATHER, Turn(text="It is sunny."))
    async with claude.messages.stream(model="claude-test", max_tokens=100, messages=USER) as stream:
        msg = await stream.get_final_message()
    assert msg.content[0].text == "Let me look."
    assert msg.content[1].input == {"city": "Paris"}
    assert msg.stop_reason == "tool_use"
    follow_up = [
        *USER,
        {"role": "assistant", "content": [b.model_dump() for b in msg.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": msg.content[1].id, "content": "sunny"}]},
    ]
    answer = await claude.messages.create(model="claude-test", max_tokens=100, messages=follow_up)
    assert answer.content[0].text == "It is sunny."
    assert answer.stop_reason == "end_turn"


async def test_stream_fragments_input_json(model: ScriptedModel, post) -> None:
    args = {"query": "a fairly long search string", "limit": 10, "tags": ["x", "y"]}
    model.add_turns(Turn(tool_calls=[ToolCallSpec("search", args)]))
    _, raw, headers = await post("/v1/messages", {"model": "m", "stream": True, "max_tokens": 5, "messages": USER})
    assert headers["Content-Type"].startswith("text/event-stream")
    deltas = [e.json()["delta"]["partial_json"] for e in parse_sse(raw) if e.event == "content_block_delta"]
    assert deltas[0] == "" and len(deltas) > 3
    assert orjson.loads("".join(deltas)) == args


async def test_parallel_and_empty_input(model: ScriptedModel, claude) -> None:
    model.add_turns(Turn(tool_calls=[ToolCallSpec("now"), ToolCallSpec("now", {})]))
    async with claude.messages.stream(model="m", max_tokens=10, messages=USER) as stream:
        msg = await stream.get_final_message()
    assert [(b.name, b.input) for b in msg.content] == [("now", {}), ("now", {})]
    assert msg.content[0].id != msg.content[1].id


async def test_empty_input_streams_only_empty_fragment(model: ScriptedModel, post) -> None:
    model.add_turns(Turn(tool_calls=[ToolCallSpec("now")]))
    _, raw, _ = await post("/v1/messages", {"model": "m", "stream": True, "messages": USER})
    deltas = [e.json()["delta"] for e in parse_sse(raw) if e.event == "content_block_delta"]
    assert deltas == [{"type": "input_json_delta", "partial_json": ""}]


async def test_thinking_block_first_with_signature(model: ScriptedModel, claude) -> None:
    model.add_turns(Turn(thinking="I should call the tool.", tool_calls=[ToolCallSpec("v")]))
    async with claude.messages.stream(model="m", max_tokens=10, messages=USER) as stream:
        msg = await stream.get_final_message()
    thinking, tool = msg.content
    assert thinking.type == "thinking" and thinking.thinking == "I should call the tool."
    assert len(thinking.signature) > 100
    assert tool.type == "tool_use" and tool.input == {}


async def test_raw_arguments_are_streamed_verbatim(model: ScriptedModel, post) -> None:
    raw_args = '{"city": "Par'
    model.add_turns(
        Turn(tool_calls=[ToolCallSpec("get_weather", raw_arguments=raw_args)]),
        Turn(tool_calls=[ToolCallSpec("get_weather", raw_arguments='{"a": 1}')]),
    )
    _, raw, _ = await post("/v1/messages", {"model": "m", "stream": True, "messages": USER})
    fragments = [e.json()["delta"]["partial_json"] for e in parse_sse(raw) if e.event == "content_block_delta"]
    assert "".join(fragments) == raw_args
    _, body, _ = await post("/v1/messages", {"model": "m", "messages": USER})
    assert orjson.loads(body)["content"][0]["input"] == {"a": 1}


async def test_truncated_tool_input(model: ScriptedModel, post) -> None:
    model.add_turns(Turn(text="ok", tool_calls=[ToolCallSpec("w", {"text": "x" * 80})], truncate_tool_input=True))
    _, raw, _ = await post("/v1/messages", {"model": "m", "stream": True, "messages": USER})
    events = parse_sse(raw)
    stops = [e.json()["index"] for e in events if e.event == "content_block_stop"]
    assert stops == [0]  # the tool block at index 1 never stops
    delta = next(e.json() for e in events if e.event == "message_delta")
    assert delta["delta"]["stop_reason"] == "max_tokens"
    partial = "".join(e.json()["delta"].get("partial_json", "") for e in events if e.event == "content_block_delta")
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(partial)
    assert events[-1].event == "message_stop"


async def test_http_errors(model: ScriptedModel, claude) -> None:
    model.add_turns(
        Turn(error=UpstreamError(529)),
        Turn(error=UpstreamError(500)),
        Turn(error=UpstreamError(429, headers={"retry-after": "1"})),
    )
    with pytest.raises(anthropic.OverloadedError) as over:
        await claude.messages.create(model="m", max_tokens=1, messages=USER)
    assert over.value.status_code == 529
    assert over.value.body["error"]["type"] == "overloaded_error"
    assert over.value.body["request_id"].startswith("req_")
    with pytest.raises(anthropic.InternalServerError) as internal:
        await claude.messages.create(model="m", max_tokens=1, messages=USER)
    assert internal.value.body["error"]["type"] == "api_error"
    with pytest.raises(anthropic.RateLimitError) as limited:
        await claude.messages.create(model="m", max_tokens=1, messages=USER)
    assert limited.value.response.headers["retry-after"] == "1"


async def test_in_stream_error(model: ScriptedModel, claude, post) -> None:
    model.add_turns(
        Turn(text="This answer will break off.", stream_error_after=3), Turn(text="again", stream_error_after=3)
    )
    with pytest.raises(anthropic.APIError) as err:
        async with claude.messages.stream(model="m", max_tokens=10, messages=USER) as stream:
            await stream.get_final_message()
    assert "overloaded_error" in str(err.value)
    _, raw, _ = await post("/v1/messages", {"model": "m", "stream": True, "messages": USER})
    names = [e.event for e in parse_sse(raw)]
    assert names == ["message_start", "content_block_start", "ping", "error"]


async def test_gzip_body(model: ScriptedModel, claude, post) -> None:
    model.add_turns(Turn(text="compressed", gzip=True), Turn(text="compressed", gzip=True))
    msg = await claude.messages.create(model="m", max_tokens=1, messages=USER)
    assert msg.content[0].text == "compressed"
    _, raw, headers = await post("/v1/messages", {"model": "m", "messages": USER})
    assert headers["Content-Encoding"] == "gzip"
    assert orjson.loads(gzip.decompress(raw))["content"][0]["text"] == "compressed"


async def test_orphan_tool_result_is_rejected_without_consuming(model: ScriptedModel, claude) -> None:
    model.add_turns(Turn(text="fine"))
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "tool_result", "tool_use_id": "toolu_01missing", "content": "x"},
            ],
        }
    ]
    with pytest.raises(anthropic.BadRequestError) as err:
        await claude.messages.create(model="m", max_tokens=1, messages=messages)
    body = err.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"] == (
        "messages.0.content.1: unexpected `tool_use_id` found in `tool_result` blocks: "
        "toolu_01missing. Each `tool_result` block must have a corresponding `tool_use` "
        "block in the previous message."
    )
    assert model.remaining == 1


async def test_unanswered_tool_use_is_rejected(model: ScriptedModel, claude) -> None:
    messages = [
        *USER,
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_a", "name": "w", "input": {}},
                {"type": "tool_use", "id": "toolu_b", "name": "w", "input": {}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "1"}]},
    ]
    with pytest.raises(anthropic.BadRequestError) as err:
        await claude.messages.create(model="m", max_tokens=1, messages=messages)
    assert err.value.body["error"]["message"].startswith(
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_b."
    )
    assert model.exhausted_count == 0


async def test_count_tokens_and_models(model: ScriptedModel, claude) -> None:
    count = await claude.messages.count_tokens(model="m", messages=USER)
    assert count.input_tokens == len(model.requests[-1].body) // 4
    page = await claude.models.list()
    assert all(m.id.startswith("claude-") for m in page.data)
    assert model.model_requests == []
