"""Provider-held conversations through the agent frameworks that use them, end to end.

- the OpenAI Agents SDK with `conversation_id` (the OpenAI Conversations API),
- LangChain's `ChatOpenAI(use_previous_response_id=True)` and pydantic-ai's
  `openai_previous_response_id='auto'` (Responses `previous_response_id` chains).

Each run has a repair in its second tool turn. The scripted model checks every request the way
the API does (a conversation's calls answered, `conversation` never with
`previous_response_id`, each chained call answered), so a wrong repair round or a turn built on
what the agent never saw fails the run.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from sidecar.app import Running
from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn
from tests.conftest import StartSidecar

MODEL = "gpt-5.5"


def turns() -> list[Turn]:
    return [
        Turn(tool_calls=[ToolCallSpec("get_weather", {"city": "Paris"})]),
        Turn(tool_calls=[ToolCallSpec("get_weather", {"city": 75})]),  # refused: city must be a string
        Turn(tool_calls=[ToolCallSpec("get_weather", {"city": "Lyon"})]),  # the repair round's answer
        Turn(text="Sunny in Paris and Lyon."),
    ]


def _openai(sidecar: Running) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=sidecar.proxy_url + "/v1", api_key="test", max_retries=0)


def _assert_repaired(model: ScriptedModel) -> list[dict[str, Any]]:
    """Four model requests, none refused by the scripted API; the third is the repair round."""
    requests = [r.json for r in model.model_requests]
    assert len(requests) == 4 and model.exhausted_count == 0
    repair = requests[2]
    assert [i["type"] for i in repair["input"]] == ["function_call_output"]
    assert '"invalid_arguments"' in repair["input"][0]["output"]
    return requests


# -- OpenAI Agents SDK, conversation_id ---------------------------------------------------------


async def test_agents_sdk_conversation_repair_round_is_accepted(model: ScriptedModel, sidecar: Running) -> None:
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    ran: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        ran.append(city)
        return f"sunny in {city}"

    client = _openai(sidecar)
    conversation = await client.conversations.create()
    model.add_turns(turns())
    agent = Agent(
        name="weather",
        instructions="You report the weather.",
        tools=[get_weather],
        model=OpenAIResponsesModel(model=MODEL, openai_client=client),
    )
    result = await Runner.run(agent, "Weather in Paris and Lyon?", conversation_id=conversation.id)
    assert ran == ["Paris", "Lyon"]
    assert result.final_output == "Sunny in Paris and Lyon."
    requests = _assert_repaired(model)
    assert all(r["conversation"] == conversation.id for r in requests)
    assert not any(r.get("previous_response_id") for r in requests)  # never with `conversation`


async def test_blocked_calls_are_answered_on_the_conversations_next_turn(
    model: ScriptedModel, start_sidecar: StartSidecar
) -> None:
    """No repair round left: the conversation holds the refused call, so the agent's next turn
    goes with its answer; the scripted API would refuse it otherwise."""
    sidecar = await start_sidecar(enforcement={"max_repair_rounds": 0})
    client = _openai(sidecar)
    conversation = await client.conversations.create()
    tools: Any = [
        {
            "type": "function",
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        }
    ]
    model.add_turns(
        [Turn(tool_calls=[ToolCallSpec("get_weather", {"city": 75})]), Turn(text="Sorry."), Turn(text="Ok.")]
    )
    first = await client.responses.create(model=MODEL, conversation=conversation.id, input="Weather?", tools=tools)
    assert "were not run" in first.output_text
    second = await client.responses.create(model=MODEL, conversation=conversation.id, input="Never mind.", tools=tools)
    assert second.output_text == "Sorry."
    sent = model.model_requests[1].json["input"]
    assert sent[0]["type"] == "function_call_output"
    third = await client.responses.create(model=MODEL, conversation=conversation.id, input="Thanks.", tools=tools)
    assert third.output_text == "Ok."  # answered once: not sent again
    assert model.model_requests[2].json["input"] == "Thanks."  # sent as the agent wrote it


async def test_scripted_api_refuses_conversation_with_previous_response_id(model: ScriptedModel) -> None:
    client = openai.AsyncOpenAI(base_url=model.url + "/v1", api_key="test", max_retries=0)
    conversation = await client.conversations.create()
    model.add_turns([Turn(text="hi")])
    first = await client.responses.create(model=MODEL, input="hi")
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(
            model=MODEL, conversation=conversation.id, previous_response_id=first.id, input="again"
        )
    assert refused.value.code == "mutually_exclusive_parameters"


# -- previous_response_id chains ----------------------------------------------------------------


async def test_langchain_previous_response_id_chain(model: ScriptedModel, sidecar: Running) -> None:
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    ran: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        ran.append(city)
        return f"sunny in {city}"

    llm = ChatOpenAI(
        model=MODEL,
        base_url=sidecar.proxy_url + "/v1",
        api_key="test",
        use_responses_api=True,
        use_previous_response_id=True,
        max_retries=0,
    ).bind_tools([get_weather])
    model.add_turns(turns())
    messages: list[Any] = [HumanMessage("Weather in Paris and Lyon?")]
    while True:
        answer = await llm.ainvoke(messages)
        messages.append(answer)
        if not answer.tool_calls:
            break
        for call in answer.tool_calls:
            messages.append(ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"]))
    assert ran == ["Paris", "Lyon"]
    assert answer.text == "Sunny in Paris and Lyon."
    requests = _assert_repaired(model)
    assert [bool(r.get("previous_response_id")) for r in requests] == [False, True, True, True]


async def test_pydantic_ai_previous_response_id_auto(model: ScriptedModel, sidecar: Running) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIResponsesModel, OpenAIResponsesModelSettings
    from pydantic_ai.providers.openai import OpenAIProvider

    ran: list[str] = []
    provider = OpenAIProvider(openai_client=_openai(sidecar))
    agent = Agent(
        OpenAIResponsesModel(MODEL, provider=provider),
        instructions="You report the weather.",
        model_settings=OpenAIResponsesModelSettings(openai_previous_response_id="auto"),
    )

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Weather for a city."""
        ran.append(city)
        return f"sunny in {city}"

    model.add_turns(turns())
    result = await agent.run("Weather in Paris and Lyon?")
    assert ran == ["Paris", "Lyon"]
    assert result.output == "Sunny in Paris and Lyon."
    requests = _assert_repaired(model)
    assert [bool(r.get("previous_response_id")) for r in requests] == [False, True, True, True]
