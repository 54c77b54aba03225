"""An agent pointed at the sidecar notices nothing: same bodies, same event streams."""

from __future__ import annotations

import asyncio
import json
import re

import aiohttp
import anthropic
import openai
import pytest

from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn
from tests.e2e.clients import (
    NOARG_TOOL_ANTHROPIC,
    NOARG_TOOL_CHAT,
    NOARG_TOOL_RESPONSES,
    WEATHER_TOOL_ANTHROPIC,
    WEATHER_TOOL_CHAT,
    WEATHER_TOOL_RESPONSES,
    anthropic_client,
    openai_client,
)

SINGLE = [
    Turn(text="Let me check.", tool_calls=[ToolCallSpec("get_weather", {"city": "Paris", "days": 2})]),
]
PARALLEL = [
    Turn(
        text="Checking both.",
        tool_calls=[
            ToolCallSpec("get_weather", {"city": "Paris"}),
            ToolCallSpec("get_weather", {"city": "Oslo", "units": "C"}),
        ],
    )
]
EMPTY_ARGS = [Turn(tool_calls=[ToolCallSpec("list_cities", {}), ToolCallSpec("list_cities", {})])]
SCRIPTS = pytest.mark.parametrize("turns", [SINGLE, PARALLEL, EMPTY_ARGS], ids=["single", "parallel", "empty"])
USER = [{"role": "user", "content": "Weather?"}]


def _replay(model: ScriptedModel, turns: list[Turn]) -> None:
    """Same script, same ids: the scripted model is then byte-for-byte deterministic."""
    model.reset(seed=7)
    model.add_turns(turns)


def _clockless(text: str) -> str:
    """Timestamps are the only thing allowed to differ between two runs."""
    return re.sub(r'("(?:created|created_at|completed_at)"\s*:\s*)\d+', r"\g<1>0", text)


async def _twice(model, sidecar, turns, call):
    """The same script through the sidecar and directly."""
    results = []
    for base in (sidecar.proxy_url, model.url):
        _replay(model, turns)
        results.append(await call(base))
    return results


@SCRIPTS
async def test_anthropic_create_and_stream(model, sidecar, turns):
    async def call(base: str):
        async with anthropic_client(base) as client:
            created = await client.messages.with_raw_response.create(
                model="claude-test", max_tokens=256, tools=[WEATHER_TOOL_ANTHROPIC, NOARG_TOOL_ANTHROPIC], messages=USER
            )
            model.add_turns(turns)
            async with client.messages.stream(
                model="claude-test", max_tokens=256, tools=[WEATHER_TOOL_ANTHROPIC, NOARG_TOOL_ANTHROPIC], messages=USER
            ) as stream:
                events = [event.type async for event in stream]
                final = await stream.get_final_message()
        return created.http_response.text, events, final

    (body_s, events_s, final_s), (body_d, events_d, final_d) = await _twice(model, sidecar, turns, call)
    assert body_s == body_d
    assert events_s == events_d
    assert final_s.model_dump() == final_d.model_dump()
    assert [b.input for b in final_s.content if b.type == "tool_use"] == [c.arguments for c in turns[0].tool_calls]
    assert final_s.stop_reason == "tool_use"


async def test_anthropic_stream_bytes_identical(model, sidecar):
    """Raw SSE bytes through the sidecar equal the model's bytes."""
    tools = [WEATHER_TOOL_ANTHROPIC, NOARG_TOOL_ANTHROPIC]
    body = {"model": "claude-test", "max_tokens": 64, "stream": True, "tools": tools, "messages": USER}
    headers = {"anthropic-version": "2023-06-01", "x-api-key": "k"}

    async def call(base: str) -> bytes:
        async with (
            aiohttp.ClientSession() as session,
            session.post(base + "/v1/messages", json=body, headers=headers) as response,
        ):
            return await response.read()

    via, direct = await _twice(model, sidecar, PARALLEL, call)
    assert via == direct
    assert via.count(b"input_json_delta") > 2


@SCRIPTS
async def test_openai_chat_create_and_stream(model, sidecar, turns):
    async def call(base: str):
        async with openai_client(base) as client:
            created = await client.chat.completions.with_raw_response.create(
                model="gpt-test", messages=USER, tools=[WEATHER_TOOL_CHAT, NOARG_TOOL_CHAT]
            )
            model.add_turns(turns)
            stream = await client.chat.completions.create(
                model="gpt-test",
                messages=USER,
                tools=[WEATHER_TOOL_CHAT, NOARG_TOOL_CHAT],
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = [_clockless(chunk.model_dump_json()) async for chunk in stream]
            model.add_turns(turns)
            async with client.chat.completions.stream(
                model="gpt-test", messages=USER, tools=[WEATHER_TOOL_CHAT, NOARG_TOOL_CHAT]
            ) as helper:
                async for _ in helper:
                    pass
                final = await helper.get_final_completion()
        return _clockless(created.http_response.text), chunks, final

    (body_s, chunks_s, final_s), (body_d, chunks_d, _) = await _twice(model, sidecar, turns, call)
    assert body_s == body_d
    assert chunks_s == chunks_d
    calls = final_s.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == [c.name for c in turns[0].tool_calls]
    assert [json.loads(c.function.arguments or "{}") for c in calls] == [c.arguments for c in turns[0].tool_calls]
    assert final_s.choices[0].finish_reason == "tool_calls"


@SCRIPTS
async def test_openai_responses_create_and_stream(model, sidecar, turns):
    async def call(base: str):
        async with openai_client(base) as client:
            created = await client.responses.with_raw_response.create(
                model="gpt-test", input="Weather?", tools=[WEATHER_TOOL_RESPONSES, NOARG_TOOL_RESPONSES]
            )
            model.add_turns(turns)
            async with client.responses.stream(
                model="gpt-test", input="Weather?", tools=[WEATHER_TOOL_RESPONSES, NOARG_TOOL_RESPONSES]
            ) as stream:
                events = [_clockless(event.model_dump_json(warnings=False)) async for event in stream]
                final = await stream.get_final_response()
        return _clockless(created.http_response.text), events, final

    (body_s, events_s, final_s), (body_d, events_d, _) = await _twice(model, sidecar, turns, call)
    assert body_s == body_d
    assert events_s == events_d
    calls = [item for item in final_s.output if item.type == "function_call"]
    assert [c.name for c in calls] == [c.name for c in turns[0].tool_calls]
    assert [json.loads(c.arguments or "{}") for c in calls] == [c.arguments for c in turns[0].tool_calls]


async def test_sync_clients_work_too(model, sidecar):
    model.add_turns([Turn(text="hello"), Turn(text="hi"), Turn(text="hey")])

    def run() -> list[str]:
        with (
            anthropic.Anthropic(base_url=sidecar.proxy_url, api_key="k", max_retries=0) as a,
            openai.OpenAI(base_url=sidecar.proxy_url + "/v1", api_key="k", max_retries=0) as o,
        ):
            m = a.messages.create(model="c", max_tokens=8, messages=[{"role": "user", "content": "x"}])
            c = o.chat.completions.create(model="g", messages=[{"role": "user", "content": "x"}])
            r = o.responses.create(model="g", input="x")
        return [m.content[0].text, c.choices[0].message.content or "", r.output_text]

    assert await asyncio.to_thread(run) == ["hello", "hi", "hey"]
