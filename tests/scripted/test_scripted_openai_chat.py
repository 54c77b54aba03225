"""The scripted model against the official OpenAI SDK (Chat Completions)."""

from __future__ import annotations

import gzip

import openai
import orjson
import pytest

from sidecar.dialects.sse import parse_sse
from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn, UpstreamError

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = Turn(text="Let me look.", tool_calls=[ToolCallSpec("get_weather", {"city": "Paris"})])


async def test_create_tool_call(model: ScriptedModel, oai) -> None:
    model.add_turns(WEATHER)
    completion = await oai.chat.completions.create(model="gpt-test", messages=USER)
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == "gpt-test"
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me look."
    call = choice.message.tool_calls[0]
    assert call.id.startswith("call_") and call.function.name == "get_weather"
    assert orjson.loads(call.function.arguments) == {"city": "Paris"}
    assert completion.usage.prompt_tokens == len(model.requests[0].body) // 4
    assert model.requests[0].protocol == "openai_chat"


async def test_stream_helper_accumulates(model: ScriptedModel, oai) -> None:
    model.add_turns(
        Turn(
            text="Checking both.",
            tool_calls=[
                ToolCallSpec("get_weather", {"city": "Paris", "units": "metric"}),
                ToolCallSpec("get_time", {"timezone": "Europe/Paris"}),
            ],
        )
    )
    async with oai.chat.completions.stream(
        model="gpt-test", messages=USER, stream_options={"include_usage": True}
    ) as stream:
        completion = await stream.get_final_completion()
    message = completion.choices[0].message
    assert message.content == "Checking both."
    calls = [(c.function.name, orjson.loads(c.function.arguments)) for c in message.tool_calls]
    assert calls == [("get_weather", {"city": "Paris", "units": "metric"}), ("get_time", {"timezone": "Europe/Paris"})]
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.usage is not None and completion.usage.completion_tokens > 0


async def test_stream_by_concatenating_deltas(model: ScriptedModel, oai) -> None:
    bad = ToolCallSpec("bad", raw_arguments='{"a": ')
    model.add_turns(Turn(tool_calls=[ToolCallSpec("now"), bad]))
    stream = await oai.chat.completions.create(model="m", messages=USER, stream=True)
    args: dict[int, str] = {}
    names: dict[int, str] = {}
    finish = None
    async for chunk in stream:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for tc in choice.delta.tool_calls or []:
                if tc.function and tc.function.name:
                    names[tc.index] = tc.function.name
                args[tc.index] = args.get(tc.index, "") + (tc.function.arguments or "")
    assert names == {0: "now", 1: "bad"}
    assert args == {0: "{}", 1: '{"a": '}
    assert finish == "tool_calls"


async def test_stream_grammar_with_usage(model: ScriptedModel, post) -> None:
    model.add_turns(Turn(tool_calls=[ToolCallSpec("w", {"city": "Paris"})]), Turn(text="hi"))
    body = {"model": "m", "stream": True, "messages": USER, "stream_options": {"include_usage": True}}
    _, raw, _ = await post("/v1/chat/completions", body)
    events = parse_sse(raw)
    assert all(e.event is None for e in events)
    assert events[-1].data == "[DONE]"
    chunks = [e.json() for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    header = chunks[1]["choices"][0]["delta"]["tool_calls"][0]
    assert header["function"]["arguments"] == "" and header["id"].startswith("call_")
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    assert all(c["usage"] is None for c in chunks[:-1])
    assert len({c["id"] for c in chunks}) == 1
    _, raw, _ = await post("/v1/chat/completions", {"model": "m", "stream": True, "messages": USER})
    chunks = [e.json() for e in parse_sse(raw)[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in c for c in chunks)


async def test_http_error_500(model: ScriptedModel, oai) -> None:
    model.add_turns(Turn(error=UpstreamError(500)), Turn(error=UpstreamError(429)))
    with pytest.raises(openai.InternalServerError) as err:
        await oai.chat.completions.create(model="m", messages=USER)
    assert err.value.body["type"] == "server_error"
    with pytest.raises(openai.RateLimitError) as limited:
        await oai.chat.completions.create(model="m", messages=USER)
    assert limited.value.code == "rate_limit_exceeded"


async def test_in_stream_error(model: ScriptedModel, oai, post) -> None:
    model.add_turns(
        Turn(text="one two three four five six", stream_error_after=2), Turn(text="one two three", stream_error_after=2)
    )
    with pytest.raises(openai.APIError) as err:
        stream = await oai.chat.completions.create(model="m", messages=USER, stream=True)
        async for _ in stream:
            pass
    assert "server had an error" in err.value.message
    _, raw, _ = await post("/v1/chat/completions", {"model": "m", "stream": True, "messages": USER})
    events = parse_sse(raw)
    assert len(events) == 3
    assert list(events[-1].json()) == ["error"]
    assert all(e.data != "[DONE]" for e in events)


async def test_gzip_body(model: ScriptedModel, oai, post) -> None:
    model.add_turns(Turn(text="zipped", gzip=True), Turn(text="zipped", gzip=True))
    completion = await oai.chat.completions.create(model="m", messages=USER)
    assert completion.choices[0].message.content == "zipped"
    _, raw, headers = await post("/v1/chat/completions", {"model": "m", "messages": USER})
    assert headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(raw).startswith(b"{\n  ")  # OpenAI pretty-prints


async def test_missing_tool_messages_rejected(model: ScriptedModel, oai) -> None:
    model.add_turns(Turn(text="done"))
    messages = [
        *USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "w", "arguments": "{}"}},
                {"id": "call_b", "type": "function", "function": {"name": "w", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "1"},
        {"role": "user", "content": "and?"},
    ]
    with pytest.raises(openai.BadRequestError) as err:
        await oai.chat.completions.create(model="m", messages=messages)
    assert err.value.body["message"] == (
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        "call_b"
    )
    assert err.value.body["param"] == "messages.[3].role"
    messages.insert(3, {"role": "tool", "tool_call_id": "call_b", "content": "2"})
    completion = await oai.chat.completions.create(model="m", messages=messages)
    assert completion.choices[0].message.content == "done"


async def test_orphan_tool_message_rejected(model: ScriptedModel, oai) -> None:
    messages = [*USER, {"role": "tool", "tool_call_id": "call_x", "content": "1"}]
    with pytest.raises(openai.BadRequestError) as err:
        await oai.chat.completions.create(model="m", messages=messages)
    assert "must be a response to a preceeding message" in err.value.body["message"]
    assert model.exhausted_count == 0


async def test_models_list(model: ScriptedModel, oai) -> None:
    page = await oai.models.list()
    assert all(m.object == "model" for m in page.data)
    assert "gpt-4o-mini" in [m.id for m in page.data]
