"""The scripted model refuses wrong thread and conversation requests the way the APIs document,
so the sidecar's tests can tell a right continuation from a wrong one."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn

BETA = "message-threads-2026-08-12"
TOOLS = [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]


def _client(model: ScriptedModel) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=model.url, api_key="test", max_retries=0)


def _continue(previous: str, content: Any, **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-test",
        "max_tokens": 64,
        "betas": [BETA],
        "thread": {"type": "continue", "previous_message_id": previous},
        "messages": [{"role": "user", "content": content}],
        **extra,
    }


async def test_thread_rules() -> None:
    async with ScriptedModel([Turn(tool_calls=[ToolCallSpec("get_weather", {"city": "Paris"})])], loop=True) as model:
        client = _client(model)
        first = await client.beta.messages.create(
            model="claude-test",
            max_tokens=64,
            betas=[BETA],
            tools=TOOLS,
            thread={"type": "create"},
            messages=[{"role": "user", "content": "Weather?"}],
        )
        call = first.content[0]
        assert call.type == "tool_use"
        answer = [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]
        with pytest.raises(anthropic.BadRequestError, match="tool_result"):  # the held tool_use must be answered
            await client.beta.messages.create(**_continue(first.id, "no answer"))
        with pytest.raises(anthropic.BadRequestError) as repeated:
            await client.beta.messages.create(**_continue(first.id, answer, tools=TOOLS))
        assert repeated.value.error_code == "thread_fingerprint_mismatch"
        second = await client.beta.messages.create(**_continue(first.id, answer))
        with pytest.raises(anthropic.BadRequestError) as again:  # each response is continued once
            await client.beta.messages.create(**_continue(first.id, answer))
        assert again.value.error_code == "thread_already_continued"
        with pytest.raises(anthropic.NotFoundError) as lost:
            await client.beta.messages.create(**_continue("msg_unknown", "hi"))
        assert lost.value.error_code == "thread_not_found"
        assert second.id != first.id


async def test_thread_needs_the_beta_header() -> None:
    async with ScriptedModel([Turn(text="hi")]) as model:
        with pytest.raises(anthropic.BadRequestError, match="thread"):
            await _client(model).messages.create(
                model="claude-test",
                max_tokens=64,
                messages=[{"role": "user", "content": "hi"}],
                extra_body={"thread": {"type": "create"}},
            )


async def test_conversation_rules() -> None:
    async with ScriptedModel([Turn(tool_calls=[ToolCallSpec("get_weather", {"city": "Paris"})])], loop=True) as model:
        client = openai.AsyncOpenAI(base_url=model.url + "/v1", api_key="test", max_retries=0)
        conversation = await client.conversations.create()
        first = await client.responses.create(model="gpt-test", conversation=conversation.id, input="Weather?")
        [call] = [i for i in first.output if i.type == "function_call"]
        with pytest.raises(openai.BadRequestError, match=call.call_id):  # the conversation's call is unanswered
            await client.responses.create(model="gpt-test", conversation=conversation.id, input="And tomorrow?")
        with pytest.raises(openai.BadRequestError) as both:
            await client.responses.create(
                model="gpt-test", conversation=conversation.id, previous_response_id=first.id, input="x"
            )
        assert both.value.code == "mutually_exclusive_parameters"
        output = [{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}]
        await client.responses.create(model="gpt-test", conversation=conversation.id, input=output)
        with pytest.raises(openai.NotFoundError):
            await client.responses.create(model="gpt-test", conversation="conv_unknown", input="hi")
