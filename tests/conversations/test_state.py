"""Thread and conversation state kept where the ledger is: it survives a sidecar restart on
SQLite, and two sidecars on one real Redis continue each other's threads and conversations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
import redis

from sidecar.app import Running
from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn
from tests.conftest import StartSidecar
from tests.helpers.ledger import Capture

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [{"name": "get_weather", "input_schema": WEATHER}]
THREADS_BETA = "message-threads-2026-08-12"
RESPONSES_TOOLS: Any = [{"type": "function", "name": "get_weather", "parameters": WEATHER}]


def _anthropic(sidecar: Running) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=sidecar.proxy_url, api_key="test", max_retries=0)


def _openai(sidecar: Running) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=sidecar.proxy_url + "/v1", api_key="test", max_retries=0)


@pytest.fixture(params=["sqlite", "redis"])
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "state.db")
    url: str = request.getfixturevalue("redis_url")
    with redis.Redis.from_url(url) as client:
        client.flushdb()
    return "redis", url


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_thread_continues_on_the_other_sidecar(
    start_sidecar: StartSidecar, model: ScriptedModel, shared_store: tuple[str, str], stream: bool
) -> None:
    """Turn one (with a repair) on one sidecar; the continuation on the other still knows the
    thread's tools, the message to continue from and the call its result answers."""
    backend, where = shared_store
    model.add_turns(
        [
            Turn(tool_calls=[ToolCallSpec("get_weather", {"city": 75})]),  # refused, repaired
            Turn(tool_calls=[ToolCallSpec("get_weather", {"city": "Paris"})]),
            Turn(tool_calls=[ToolCallSpec("get_weather", {"city": "Lyon"})]),  # checked against the thread's tools
            Turn(text="Sunny."),
        ]
    )
    state = {"backend": backend, "sqlite_path": where, "redis_url": where}
    first_sidecar = await start_sidecar(state=state)
    args: dict[str, Any] = {"model": "claude-test", "max_tokens": 256, "tools": TOOLS, "betas": [THREADS_BETA]}
    message = await _create(_anthropic(first_sidecar), args, stream)
    [call] = [b for b in message.content if b.type == "tool_use"]
    assert call.input == {"city": "Paris"}
    if backend == "sqlite":
        await first_sidecar.stop()  # a restart: the next sidecar opens the same file
    second_sidecar = await start_sidecar(state=state)
    capture = Capture()
    second_sidecar.sidecar.add_filter(capture)
    continued = {
        "model": "claude-test",
        "max_tokens": 256,
        "betas": [THREADS_BETA],
        "thread": {"type": "continue", "previous_message_id": message.id},
        "messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]}
        ],
    }
    second = await _anthropic(second_sidecar).beta.messages.create(**continued)
    assert [b.input for b in second.content if b.type == "tool_use"] == [{"city": "Lyon"}]
    assert [c.verdict.allowed for c in capture.checks] == [True]
    assert [r.known for r in capture.results] == [True]  # the result matched the first turn's call


async def _create(client: anthropic.AsyncAnthropic, args: dict[str, Any], stream: bool) -> Any:
    body = {**args, "thread": {"type": "create"}, "messages": [{"role": "user", "content": "Weather?"}]}
    if not stream:
        return await client.beta.messages.create(**body)
    async with client.beta.messages.stream(**body) as events:
        return await events.get_final_message()


async def test_conversation_withheld_answers_survive(
    start_sidecar: StartSidecar, model: ScriptedModel, shared_store: tuple[str, str]
) -> None:
    """A call blocked on one sidecar is answered by the other on the conversation's next turn."""
    backend, where = shared_store
    state = {"backend": backend, "sqlite_path": where, "redis_url": where}
    blocking = await start_sidecar(state=state, enforcement={"max_repair_rounds": 0})
    model.add_turns([Turn(tool_calls=[ToolCallSpec("get_weather", {"city": 75})]), Turn(text="Sorry.")])
    client = _openai(blocking)
    conversation = await client.conversations.create()
    args: dict[str, Any] = {"model": "gpt-test", "conversation": conversation.id, "tools": RESPONSES_TOOLS}
    first = await client.responses.create(input="Weather?", **args)
    assert "were not run" in first.output_text
    if backend == "sqlite":
        await blocking.stop()
    other = await start_sidecar(state=state)
    second = await _openai(other).responses.create(input="Never mind.", **args)
    assert second.output_text == "Sorry."  # the scripted API accepted the turn
    assert model.model_requests[-1].json["input"][0]["type"] == "function_call_output"
