"""ScriptedModel mechanics: turn order, responders, looping, recording, faults, CLI."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import aiohttp
import anthropic
import openai
import orjson
import pytest

from sidecar.dialects.sse import parse_sse
from sidecar.scripted import (
    EXHAUSTED_TEXT,
    RecordedRequest,
    ScriptedModel,
    ToolCallSpec,
    Turn,
    UpstreamError,
    load_script,
)

USER = [{"role": "user", "content": "hi"}]


async def test_turns_are_shared_across_protocols(model: ScriptedModel, claude, oai) -> None:
    model.add_turns([Turn(text="one"), Turn(text="two")], Turn(text="three"))
    first = await claude.messages.create(model="m", max_tokens=5, messages=USER)
    second = await oai.chat.completions.create(model="m", messages=USER)
    third = await oai.responses.create(model="m", input="hi")
    assert first.content[0].text == "one"
    assert second.choices[0].message.content == "two"
    assert third.output_text == "three"
    assert [r.protocol for r in model.requests] == ["anthropic", "openai_chat", "openai_responses"]


async def test_exhausted_script_answers_and_counts(model: ScriptedModel, oai) -> None:
    completion = await oai.chat.completions.create(model="m", messages=USER)
    assert completion.choices[0].message.content == EXHAUSTED_TEXT
    assert model.exhausted_count == 1


async def test_loop_cycles_the_script() -> None:
    async with ScriptedModel([Turn(text="a"), Turn(text="b")], loop=True) as model:
        client = openai.AsyncOpenAI(base_url=model.url + "/v1", api_key="t", max_retries=0)
        texts = [
            (await client.chat.completions.create(model="m", messages=USER)).choices[0].message.content
            for _ in range(5)
        ]
    assert texts == ["a", "b", "a", "b", "a"]
    assert model.exhausted_count == 0


@pytest.mark.parametrize("is_async", [False, True])
async def test_responder(is_async: bool) -> None:
    seen: list[RecordedRequest] = []

    def answer(request: RecordedRequest) -> Turn:
        seen.append(request)
        return Turn(text=f"you said {request.json['messages'][-1]['content']}")

    async def answer_async(request: RecordedRequest) -> Turn:
        await asyncio.sleep(0)
        return answer(request)

    async with ScriptedModel(responder=answer_async if is_async else answer) as model:
        client = anthropic.AsyncAnthropic(base_url=model.url, api_key="t", max_retries=0)
        msg = await client.messages.create(model="m", max_tokens=5, messages=USER)
    assert msg.content[0].text == "you said hi"
    assert seen[0].protocol == "anthropic" and seen[0].path == "/v1/messages"


async def test_recorded_request_fields(model: ScriptedModel, claude) -> None:
    model.add_turns(Turn(text="x"))
    await claude.messages.create(model="m", max_tokens=5, messages=USER)
    request = model.requests[0]
    assert request.method == "POST"
    assert "anthropic-version" in request.headers
    assert all(k == k.lower() for k in request.headers)
    assert orjson.loads(request.body) == request.json
    assert request.stream is False


async def test_reset_clears_everything(model: ScriptedModel, oai) -> None:
    model.add_turns(Turn(text="a"), Turn(text="b"))
    first = await oai.responses.create(model="m", input="x")
    model.reset()
    assert model.requests == [] and model.remaining == 0
    with pytest.raises(openai.BadRequestError):  # stored responses are gone too
        await oai.responses.create(model="m", input="x", previous_response_id=first.id)


async def test_parallel_requests_each_get_one_turn(model: ScriptedModel, oai) -> None:
    model.add_turns(*(Turn(text=str(i), delay_s=0.01) for i in range(6)))

    async def one() -> str:
        stream = await oai.chat.completions.create(model="m", messages=USER, stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    texts = await asyncio.gather(*(one() for _ in range(6)))
    assert sorted(texts) == [str(i) for i in range(6)]


async def test_not_found_shapes(model: ScriptedModel, http: aiohttp.ClientSession) -> None:
    async with http.post(model.url + "/v1/nope", json={}, headers={"anthropic-version": "2023-06-01"}) as resp:
        assert resp.status == 404
        body = await resp.json()
    assert body["type"] == "error" and body["error"]["type"] == "not_found_error"
    async with http.get(model.url + "/v1/files") as resp:
        assert resp.status == 404
        body = await resp.json()
    assert body["error"]["message"] == "Invalid URL (GET /v1/files)"
    assert [r.path for r in model.requests] == ["/v1/nope", "/v1/files"]
    assert all(r.protocol is None for r in model.requests)


async def test_models_shape_follows_anthropic_version(model: ScriptedModel, http: aiohttp.ClientSession) -> None:
    async with http.get(model.url + "/v1/models", headers={"anthropic-version": "2023-06-01"}) as resp:
        anthropic_list = await resp.json()
    async with http.get(model.url + "/v1/models") as resp:
        openai_list = await resp.json()
    assert anthropic_list["data"][0]["type"] == "model" and "has_more" in anthropic_list
    assert openai_list["object"] == "list"


async def test_path_prefix_and_bad_json(model: ScriptedModel, http: aiohttp.ClientSession) -> None:
    model.add_turns(Turn(text="prefixed"))
    async with http.post(model.url + "/anthropic/v1/messages", json={"model": "m", "messages": USER}) as resp:
        assert (await resp.json())["content"][0]["text"] == "prefixed"
    async with http.post(model.url + "/v1/chat/completions", data=b"{not json") as resp:
        assert resp.status == 400
        assert (await resp.json())["error"]["type"] == "invalid_request_error"


async def test_first_byte_delay_triggers_client_timeout(model: ScriptedModel) -> None:
    model.add_turns(Turn(text="late", first_byte_delay_s=5), Turn(text="on time"))
    client = anthropic.AsyncAnthropic(base_url=model.url, api_key="t", max_retries=0, timeout=0.3)
    started = time.monotonic()
    with pytest.raises(anthropic.APITimeoutError):
        await client.messages.create(model="m", max_tokens=5, messages=USER)
    msg = await client.messages.create(model="m", max_tokens=5, messages=USER)
    assert msg.content[0].text == "on time"
    assert time.monotonic() - started < 2


async def test_delay_between_events(model: ScriptedModel, post) -> None:
    model.add_turns(Turn(text="a b c", delay_s=0.02))
    started = time.monotonic()
    _, raw, _ = await post("/v1/responses", {"model": "m", "stream": True, "input": "x"})
    events = parse_sse(raw)
    assert time.monotonic() - started >= 0.02 * (len(events) - 1)


async def test_usage_override_and_stop_reason(model: ScriptedModel, claude) -> None:
    model.add_turns(Turn(text="x", usage={"input_tokens": 7, "output_tokens": 3}, stop_reason="stop_sequence"))
    msg = await claude.messages.create(model="m", max_tokens=5, messages=USER)
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (7, 3)
    assert msg.stop_reason == "stop_sequence"


async def test_error_turn_without_stream_error_after_on_stream(model: ScriptedModel, oai) -> None:
    model.add_turns(Turn(error=UpstreamError(503, message="busy")))
    with pytest.raises(openai.InternalServerError) as err:
        await oai.chat.completions.create(model="m", messages=USER, stream=True)
    assert err.value.status_code == 503 and err.value.body["message"] == "busy"


def test_script_from_json(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_bytes(
        orjson.dumps(
            [
                {"text": "hi", "tool_calls": [{"name": "w", "arguments": {"a": 1}, "id": "call_x"}]},
                {"error": {"status": 529, "message": "busy"}},
                {"tool_calls": [{"name": "w", "raw_arguments": "{oops"}], "stream_error_after": 2},
            ]
        )
    )
    turns = load_script(script)
    assert turns[0].tool_calls == [ToolCallSpec("w", {"a": 1}, id="call_x")]
    assert turns[1].error == UpstreamError(529, message="busy")
    assert turns[2].tool_calls[0].raw_arguments == "{oops"
    with pytest.raises(ValueError, match="unknown turn field"):
        Turn.from_dict({"txt": "typo"})


async def test_command_line(tmp_path: Path) -> None:
    script = Path(__file__).parents[2] / "sidecar" / "scripted" / "demo_script.json"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sidecar.scripted",
        "--listen",
        "127.0.0.1:0",
        "--script",
        str(script),
        "--loop",
        stdout=asyncio.subprocess.PIPE,
        cwd=Path(__file__).parents[2],
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=10)
        url = line.decode().split()[-1]
        client = anthropic.AsyncAnthropic(base_url=url, api_key="t", max_retries=0)
        msg = await client.messages.create(model="m", max_tokens=5, messages=USER)
        assert msg.content[1].input == {"city": "Paris"}
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), timeout=10) == 0


async def test_reset_with_seed_replays_identical_bytes(model: ScriptedModel, post) -> None:
    bodies = []
    for _ in range(2):
        model.reset(seed=11)
        model.add_turns(Turn(thinking="hm", text="ok", tool_calls=[ToolCallSpec("w", {"a": 1})]))
        _, raw, _ = await post("/v1/messages", {"model": "m", "stream": True, "messages": USER})
        bodies.append(raw)
    assert bodies[0] == bodies[1]


async def test_cache_usage_in_each_protocols_fields(model: ScriptedModel, claude, oai) -> None:
    cached = {"input_tokens": 10, "cache_read_tokens": 700, "cache_write_tokens": 90}
    model.add_turns(Turn(text="x", usage=cached), Turn(text="y", usage=cached))
    whole = await claude.messages.create(model="m", max_tokens=5, messages=USER)
    async with claude.messages.stream(model="m", max_tokens=5, messages=USER) as events:
        streamed = await events.get_final_message()
    for usage in (whole.usage, streamed.usage):
        assert (usage.input_tokens, usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (10, 700, 90)
    assert whole.usage.cache_creation is not None and whole.usage.cache_creation.ephemeral_5m_input_tokens == 90

    model.add_turns(Turn(text="x", usage={"input_tokens": 800, "cache_read_tokens": 700}))
    chat = await oai.chat.completions.create(model="m", messages=USER)
    assert chat.usage is not None and chat.usage.prompt_tokens == 800
    assert chat.usage.prompt_tokens_details is not None and chat.usage.prompt_tokens_details.cached_tokens == 700
    model.add_turns(Turn(text="x", usage={"input_tokens": 800, "cache_read_tokens": 700}))
    response = await oai.responses.create(model="m", input="hi")
    assert response.usage is not None and response.usage.input_tokens_details.cached_tokens == 700


@pytest.mark.parametrize(
    "usage",
    [{"cache_write_tokens": 5}, {"input_tokens": 100, "cache_read_tokens": 200}],
    ids=["openai has no cache writes", "prompt tokens include the cached ones"],
)
async def test_cache_usage_no_openai_api_sends_is_refused(model: ScriptedModel, oai, usage) -> None:
    model.add_turns(Turn(text="x", usage=usage))
    with pytest.raises(openai.BadRequestError, match="scripted model"):
        await oai.chat.completions.create(model="m", messages=USER)
