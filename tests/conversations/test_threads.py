"""Anthropic message threads end to end, through the official SDK's tool runner.

The scripted model holds threads as the API documents them (a `continue` carries only the new
messages and no `system`/`tools`, each message can be continued once, every `tool_use` of the
held conversation must be answered), so a wrong continuation from the sidecar is an error the
runner would raise, never a silent pass.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from anthropic import beta_async_tool

from sidecar.app import Running
from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn
from tests.conftest import StartSidecar

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
THREADS_BETA = "message-threads-2026-08-12"


def weather_turns() -> list[Turn]:
    """Three tool turns, the second one refused once (lockdown) and repaired, then the answer."""
    return [
        Turn(text="Checking Paris.", tool_calls=[ToolCallSpec("get_weather", {"city": "Paris"})]),
        Turn(tool_calls=[ToolCallSpec("get_weather", {"city": 75})]),  # refused: city must be a string
        Turn(tool_calls=[ToolCallSpec("get_weather", {"city": "Lyon"})]),  # the repair round's answer
        Turn(tool_calls=[ToolCallSpec("get_weather", {"city": "Nice"})]),
        Turn(text="Sunny in Paris, Lyon and Nice."),
    ]


def weather_tool(ran: list[str]) -> Any:
    @beta_async_tool(name="get_weather", description="Weather for a city", input_schema=WEATHER_SCHEMA)
    async def get_weather(city: str) -> str:
        ran.append(city)
        return f"sunny in {city}"

    return get_weather


def _client(sidecar: Running) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=sidecar.proxy_url, api_key="test", max_retries=0)


async def _run(sidecar: Running, stream: bool, thread: bool) -> tuple[list[str], str]:
    ran: list[str] = []
    extra: dict[str, Any] = {} if thread else {"thread": False}
    runner = _client(sidecar).beta.messages.tool_runner(
        model="claude-sonnet-4-5",
        max_tokens=512,
        system="You report the weather.",
        tools=[weather_tool(ran)],
        messages=[{"role": "user", "content": "Weather in Paris, then two more cities?"}],
        stream=stream,
        **extra,
    )
    final = await runner.until_done()
    text = "".join(block.text for block in final.content if block.type == "text")
    return ran, text


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_thread_of_three_tool_turns_with_a_repair(model: ScriptedModel, sidecar: Running, stream: bool) -> None:
    model.add_turns(weather_turns())
    ran, text = await _run(sidecar, stream, thread=True)
    assert ran == ["Paris", "Lyon", "Nice"]  # every valid call delivered, the refused one never
    assert text.endswith("Sunny in Paris, Lyon and Nice.")
    requests = [r.json for r in model.model_requests]
    assert [r["thread"]["type"] for r in requests] == ["create", "continue", "continue", "continue", "continue"]
    assert all("tools" not in r and "system" not in r for r in requests[1:])  # the thread keeps them
    assert all(THREADS_BETA in r.headers["anthropic-beta"] for r in model.model_requests)
    # The repair round continues from the refused message; the agent's next turn from the
    # repaired one, which holds what it was given (never from the refused one).
    ids = [r.json["thread"].get("previous_message_id") for r in model.model_requests]
    assert ids[2] != ids[3] and len(set(ids[1:])) == 4
    repair = requests[2]["messages"]
    assert [b["type"] for b in repair[0]["content"]] == ["tool_result"] and repair[0]["content"][0]["is_error"]
    assert model.exhausted_count == 0


async def test_tool_runner_without_threads(model: ScriptedModel, sidecar: Running) -> None:
    model.add_turns(weather_turns())
    ran, text = await _run(sidecar, stream=False, thread=False)
    assert ran == ["Paris", "Lyon", "Nice"]
    assert text.endswith("Sunny in Paris, Lyon and Nice.")
    assert all("thread" not in r.json and r.json["tools"] for r in model.model_requests)


async def test_a_continuation_is_checked_against_the_threads_tools(model: ScriptedModel, sidecar: Running) -> None:
    """A `continue` declares no tools: a call to one the thread never had is still refused."""
    model.add_turns(
        [
            Turn(tool_calls=[ToolCallSpec("get_weather", {"city": "Paris"})]),
            Turn(tool_calls=[ToolCallSpec("delete_everything", {})]),  # not a tool of the thread
            Turn(text="I cannot do that."),
        ]
    )
    ran: list[str] = []
    runner = _client(sidecar).beta.messages.tool_runner(
        model="claude-sonnet-4-5",
        max_tokens=512,
        tools=[weather_tool(ran)],
        messages=[{"role": "user", "content": "Weather, then clean up"}],
    )
    final = await runner.until_done()
    assert ran == ["Paris"]
    assert final.content[-1].type == "text" and "I cannot do that." in final.content[-1].text
    repair = model.model_requests[2].json
    assert repair["thread"]["type"] == "continue" and '"unknown_tool"' in repair["messages"][0]["content"][0]["content"]


async def test_blocked_calls_are_answered_on_the_threads_next_turn(
    model: ScriptedModel, start_sidecar: StartSidecar
) -> None:
    """No repair round left: the refused call is removed from what the agent gets, but the
    thread holds it, so the agent's next turn is sent with its answer (else the API refuses)."""
    sidecar = await start_sidecar(enforcement={"max_repair_rounds": 0})
    model.add_turns(
        [
            Turn(text="Let me look.", tool_calls=[ToolCallSpec("get_weather", {"city": 75})]),
            Turn(text="Sorry about that."),
        ]
    )
    client = _client(sidecar)
    thread = client.beta.messages.thread(model="claude-sonnet-4-5", max_tokens=256, tools=[_plain_tool()])
    first = await thread.send({"role": "user", "content": "Weather?"})
    assert [b.type for b in first.content] == ["text", "text"]  # the call was blocked, explained
    second = await thread.send({"role": "user", "content": "Never mind."})
    assert second.content[0].text == "Sorry about that."
    sent = model.model_requests[1].json["messages"][0]["content"]
    assert [b["type"] for b in sent] == ["tool_result", "text"] and sent[0]["is_error"]


def _plain_tool() -> dict[str, Any]:
    return {"name": "get_weather", "description": "Weather for a city", "input_schema": WEATHER_SCHEMA}
