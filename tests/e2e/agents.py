"""One small agent per wire protocol, driven through the official SDKs.

Each agent asks once (streaming or not) and reports what it received in neutral form, and can
send the tool results of its next turn, so tests are written once for all three protocols.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sidecar.scripted import RecordedRequest
from tests.e2e.clients import anthropic_client, openai_client


@dataclass
class Received:
    calls: list[tuple[str, dict[str, Any]]]
    call_ids: list[str]
    text: str
    stop: str | None
    raw: Any
    headers: dict[str, str] = field(default_factory=dict)
    usage_output: int = 0


def _schema_tool(kind: str, name: str, schema: dict[str, Any], description: str = "") -> dict[str, Any]:
    if kind == "anthropic":
        return {"name": name, "description": description, "input_schema": schema}
    if kind == "chat":
        return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}
    return {"type": "function", "name": name, "description": description, "parameters": schema}


class Agent:
    kind = ""

    def __init__(self, base_url: str, tools: dict[str, dict[str, Any]], headers: dict[str, str] | None = None):
        self.base_url = base_url
        self.tools = [_schema_tool(self.kind, name, schema) for name, schema in tools.items()]
        self.headers = headers or {}
        self.history: list[Any] = [{"role": "user", "content": "Please help."}]
        self.previous_response_id: str | None = None
        self.last: Received | None = None

    async def ask(self, stream: bool) -> Received:
        raise NotImplementedError

    def answer(self, results: dict[str, str]) -> None:
        """Append the agent's tool results for the calls it received last."""
        raise NotImplementedError

    @staticmethod
    def tool_outputs(request: RecordedRequest) -> list[dict[str, Any]]:
        """The tool results a recorded upstream request carries, in order, parsed from JSON."""
        raise NotImplementedError


class AnthropicAgent(Agent):
    kind = "anthropic"

    async def ask(self, stream: bool) -> Received:
        async with anthropic_client(self.base_url, default_headers=self.headers) as client:
            args = {"model": "claude-test", "max_tokens": 512, "tools": self.tools, "messages": self.history}
            if stream:
                async with client.messages.stream(**args) as events:
                    async for _ in events:
                        pass
                    message = await events.get_final_message()
                headers: dict[str, str] = {}
            else:
                raw = await client.messages.with_raw_response.create(**args)
                message = await raw.parse()
                headers = dict(raw.headers)
        calls = [(b.name, dict(b.input)) for b in message.content if b.type == "tool_use"]
        ids = [b.id for b in message.content if b.type == "tool_use"]
        text = "".join(b.text for b in message.content if b.type == "text")
        blocks = [b.model_dump(exclude_none=True) for b in message.content]
        self.history.append({"role": "assistant", "content": blocks})
        self.last = Received(calls, ids, text, message.stop_reason, message, headers, message.usage.output_tokens)
        return self.last

    def answer(self, results: dict[str, str]) -> None:
        assert self.last is not None
        blocks = [{"type": "tool_result", "tool_use_id": i, "content": results[i]} for i in self.last.call_ids]
        self.history.append({"role": "user", "content": blocks or "thanks"})

    @staticmethod
    def tool_outputs(request: RecordedRequest) -> list[dict[str, Any]]:
        last = request.json["messages"][-1]
        return [json.loads(b["content"]) for b in last["content"] if b.get("type") == "tool_result"]


class ChatAgent(Agent):
    kind = "chat"

    async def ask(self, stream: bool) -> Received:
        async with openai_client(self.base_url, default_headers=self.headers) as client:
            args = {"model": "gpt-test", "messages": self.history, "tools": self.tools}
            headers: dict[str, str] = {}
            if stream:
                async with client.chat.completions.stream(**args, stream_options={"include_usage": True}) as events:
                    async for _ in events:
                        pass
                    completion = await events.get_final_completion()
            else:
                raw = await client.chat.completions.with_raw_response.create(**args)
                completion = raw.parse()
                headers = dict(raw.headers)
        message = completion.choices[0].message
        tool_calls = message.tool_calls or []
        calls = [(c.function.name, json.loads(c.function.arguments or "{}")) for c in tool_calls]
        ids = [c.id for c in tool_calls]
        entry: dict[str, Any] = {"role": "assistant", "content": message.content}
        if tool_calls:
            entry["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in tool_calls
            ]
        self.history.append(entry)
        usage = completion.usage.completion_tokens if completion.usage else 0
        self.last = Received(
            calls, ids, message.content or "", completion.choices[0].finish_reason, completion, headers, usage
        )
        return self.last

    def answer(self, results: dict[str, str]) -> None:
        assert self.last is not None
        for call_id in self.last.call_ids:
            self.history.append({"role": "tool", "tool_call_id": call_id, "content": results[call_id]})
        if not self.last.call_ids:
            self.history.append({"role": "user", "content": "thanks"})

    @staticmethod
    def tool_outputs(request: RecordedRequest) -> list[dict[str, Any]]:
        messages = request.json["messages"]
        out = []
        for message in reversed(messages):
            if message.get("role") != "tool":
                break
            out.append(json.loads(message["content"]))
        return list(reversed(out))


class ResponsesAgent(Agent):
    """Uses server-side state (`store` default, `previous_response_id`) like most agents."""

    kind = "responses"

    async def ask(self, stream: bool) -> Received:
        async with openai_client(self.base_url, default_headers=self.headers) as client:
            args: dict[str, Any] = {"model": "gpt-test", "input": self.history, "tools": self.tools}
            if self.previous_response_id:
                args["previous_response_id"] = self.previous_response_id
            headers: dict[str, str] = {}
            if stream:
                async with client.responses.stream(**args) as events:
                    async for _ in events:
                        pass
                    response = await events.get_final_response()
            else:
                raw = await client.responses.with_raw_response.create(**args)
                response = raw.parse()
                headers = dict(raw.headers)
        items = [i for i in response.output if i.type == "function_call"]
        calls = [(i.name, json.loads(i.arguments or "{}")) for i in items]
        self.previous_response_id = response.id
        self.history = []
        usage = response.usage.output_tokens if response.usage else 0
        self.last = Received(calls, [i.call_id for i in items], response.output_text, None, response, headers, usage)
        return self.last

    def answer(self, results: dict[str, str]) -> None:
        assert self.last is not None
        self.history = [
            {"type": "function_call_output", "call_id": i, "output": results[i]} for i in self.last.call_ids
        ] or [{"role": "user", "content": "thanks"}]

    @staticmethod
    def tool_outputs(request: RecordedRequest) -> list[dict[str, Any]]:
        items = request.json["input"]
        outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        return [json.loads(i["output"]) for i in outputs]


AGENTS = {"anthropic": AnthropicAgent, "chat": ChatAgent, "responses": ResponsesAgent}
