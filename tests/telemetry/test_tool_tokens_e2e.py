"""Tokens per tool end to end: an agent on the official SDKs, the scripted model sending usage the
way the APIs do (cache reads and writes included). The estimate is checked against the method
docs/cost.md states, computed here from the bytes the model received; then /v1/status (tokens,
drift, lint per tool), `sidecar status` and `sidecar_tool_lint_findings`."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from sidecar.cli import main
from sidecar.model import ToolDeclaration
from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn
from tests.conftest import StartSidecar
from tests.e2e.clients import anthropic_client, openai_client
from tests.helpers.metrics import scrape

WEATHER_V1 = {
    "name": "weather_get",
    "description": "Current weather for a city, in degrees Celsius.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City in English, e.g. Paris."}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
WEATHER_V2 = {
    **WEATHER_V1,
    "input_schema": {
        **WEATHER_V1["input_schema"],
        "properties": {**WEATHER_V1["input_schema"]["properties"], "days": {"type": "integer", "default": 1}},
    },
}
# A money amount as a float: a lint error (money-as-number).
REFUND = {
    "name": "payments_refund",
    "description": "Refund a payment to the customer's card.",
    "input_schema": {
        "type": "object",
        "properties": {
            "payment_id": {"type": "string", "description": "The payment, e.g. pay_123."},
            "amount": {"type": "number", "description": "How much to refund."},
        },
        "required": ["payment_id", "amount"],
        "additionalProperties": False,
    },
}
DIRECTIONS = ("output", "input", "input_cached", "input_cache_write")


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def anthropic_spans(body: dict[str, Any]) -> list[tuple[str, int, bool]]:
    """(tool, characters, newest turn) of each tool_use / tool_result block, as docs/cost.md
    defines their size: the block's type, id, name and payload as compact JSON."""
    messages = body["messages"]
    turn = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    names: dict[str, str] = {}
    spans = []
    for position, message in enumerate(messages):
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block["type"] == "tool_use":
                names[block["id"]] = block["name"]
                core = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": block["input"]}
                spans.append((block["name"], len(compact(core)), position >= turn))
            elif block["type"] == "tool_result":
                core = {"type": "tool_result", "tool_use_id": block["tool_use_id"], "content": block["content"]}
                spans.append((names[block["tool_use_id"]], len(compact(core)), position >= turn))
    return spans


def expected_input(body: bytes, total: int, read: int, write: int, spent: dict[tuple[str, str], float]) -> None:
    """docs/cost.md: share of the request's characters; reads to the history first; the rest
    split between base rate and cache writes as the reply reports them."""
    spans = anthropic_spans(json.loads(body))
    size = len(body.decode())
    tokens = [(tool, total * chars / size, new) for tool, chars, new in spans]
    fresh = sum(t for _, t, new in tokens if new)
    history = total - fresh
    not_read = total - read
    for tool, amount, new in tokens:
        cached = 0.0 if new else amount * min(1.0, read / history)
        rest = amount - cached
        spent[(tool, "input_cached")] = spent.get((tool, "input_cached"), 0.0) + cached
        spent[(tool, "input_cache_write")] = spent.get((tool, "input_cache_write"), 0.0) + rest * write / not_read
        spent[(tool, "input")] = spent.get((tool, "input"), 0.0) + rest * (not_read - write) / not_read


async def _status(admin_url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session, session.get(admin_url + "/v1/status") as response:
        assert response.status == 200
        data: dict[str, Any] = await response.json()
    return data


async def test_tokens_drift_and_lint_per_tool_through_the_anthropic_sdk(
    model: ScriptedModel, start_sidecar: StartSidecar, capsys: pytest.CaptureFixture[str]
) -> None:
    running = await start_sidecar(agent_id="agent-cost")
    async with anthropic_client(running.proxy_url) as client:
        await _anthropic_conversation(model, client, running.admin_url, capsys)


async def _anthropic_conversation(
    model: ScriptedModel, client: Any, admin_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris, then in Rome?"}]
    spent: dict[tuple[str, str], float] = {}

    async def turn(tools: list[dict[str, Any]], stream: bool) -> Any:
        if stream:
            async with client.messages.stream(
                model="claude-sonnet-4-5", max_tokens=256, tools=tools, messages=messages
            ) as events:
                reply = await events.get_final_message()
        else:
            reply = await client.messages.create(
                model="claude-sonnet-4-5", max_tokens=256, tools=tools, messages=messages
            )
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        return reply

    def answer(reply: Any, text: str) -> None:
        [use] = [b for b in reply.content if b.type == "tool_use"]
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": text}]})

    # 1. One call and nothing else: its 40 output tokens are all the tool's (exact).
    model.add_turns([Turn(tool_calls=[ToolCallSpec("weather_get", {"city": "Paris"})], usage={"output_tokens": 40})])
    answer(await turn([WEATHER_V1, REFUND], stream=False), "Sunny, 24 C, light wind from the west. " * 8)
    spent[("weather_get", "output")] = 40.0

    # 2. The call and its result go back (the newest turn: nothing cached); another call (streamed).
    model.add_turns(
        [
            Turn(
                tool_calls=[ToolCallSpec("weather_get", {"city": "Rome"})],
                usage={"input_tokens": 700, "output_tokens": 30},
            )
        ]
    )
    answer(await turn([WEATHER_V1, REFUND], stream=True), "Cloudy, 19 C.")
    expected_input(model.requests[-1].body, 700, 0, 0, spent)
    spent[("weather_get", "output")] += 30.0

    # 3. The first call and result are now history (read from the cache), the second is new
    # (written to it). The agent ships weather_get v2: drift.
    usage = {"input_tokens": 40, "cache_read_tokens": 800, "cache_write_tokens": 160, "output_tokens": 12}
    model.add_turns([Turn(text="Paris is sunny, Rome cloudy.", usage=usage)])
    await turn([WEATHER_V2, REFUND], stream=False)
    expected_input(model.requests[-1].body, 40 + 800 + 160, 800, 160, spent)

    metrics = await scrape(admin_url)
    for direction in DIRECTIONS:
        got = metrics.value("sidecar_tool_tokens_total", tool="weather_get", direction=direction)
        assert got == pytest.approx(spent[("weather_get", direction)]), direction
    assert spent[("weather_get", "input_cached")] > 0 and spent[("weather_get", "input_cache_write")] > 0
    # payments_refund was declared, never called: no tokens of its own.
    assert metrics.total("sidecar_tool_tokens_total", tool="payments_refund") == 0
    assert metrics.value("sidecar_tool_lint_findings", tool="payments_refund", severity="error") >= 1

    status = await _status(admin_url)
    weather, refund = status["tools"]["weather_get"], status["tools"]["payments_refund"]
    assert weather["tokens"] == {d: round(spent[("weather_get", d)]) for d in DIRECTIONS}
    assert refund["calls"] == 0 and refund["tokens"] == dict.fromkeys(DIRECTIONS, 0)
    [declared] = weather["declarations"]
    v1 = ToolDeclaration.create("weather_get", WEATHER_V1["input_schema"], str(WEATHER_V1["description"]))
    v2 = ToolDeclaration.create("weather_get", WEATHER_V2["input_schema"], str(WEATHER_V2["description"]))
    assert declared["agent"] == "agent-cost" and declared["provider"] == "anthropic"
    assert (declared["schema_hash"], declared["previous_schema_hash"], declared["changes"]) == (
        v2.schema_hash,
        v1.schema_hash,
        1,
    )
    [refund_declared] = refund["declarations"]
    assert refund_declared["lint"]["error"] >= 1 and "money-as-number" in refund_declared["lint"]["rules"]

    code = await asyncio.to_thread(main, ["status", "--admin-url", admin_url])
    table = capsys.readouterr().out
    assert code == 0
    lines = table.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("tokens per tool (estimated")))
    assert lines[start + 1].split() == ["tool", "output", "input", "input", "cached", "input", "cache", "write"]
    row = next(line.split() for line in lines[start:] if line.startswith("weather_get"))
    assert row == ["weather_get", *(str(round(spent[("weather_get", d)])) for d in DIRECTIONS)]
    start = lines.index(next(line for line in lines if line.startswith("declarations (latest seen")))
    rows = {line.split()[0]: line.split() for line in lines[start + 2 :] if line.startswith(("weather", "payments"))}
    assert rows["weather_get"][:5] == ["weather_get", "anthropic", v2.schema_hash[:12], "1", v1.schema_hash[:12]]
    assert rows["payments_refund"][5] == str(refund_declared["lint"]["error"])
    assert "money-as-number" in rows["payments_refund"][-1]


async def test_chat_completions_usage_through_the_openai_sdk(model: ScriptedModel, start_sidecar: StartSidecar) -> None:
    """Chat: `completion_tokens` for the call (exact: one call, no text), `cached_tokens` as cache
    reads of the history; OpenAI reports no cache writes."""
    running = await start_sidecar()
    async with openai_client(running.proxy_url) as client:
        await _chat_conversation(model, client, running.admin_url)


async def _chat_conversation(model: ScriptedModel, client: Any, admin_url: str) -> None:
    tool = {"type": "function", "function": {"name": "weather_get", "parameters": WEATHER_V1["input_schema"]}}
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
    model.add_turns([Turn(tool_calls=[ToolCallSpec("weather_get", {"city": "Paris"})], usage={"output_tokens": 21})])
    async with client.chat.completions.stream(
        model="gpt-test", messages=messages, tools=[tool], stream_options={"include_usage": True}
    ) as events:
        completion = await events.get_final_completion()
    [call] = completion.choices[0].message.tool_calls or []
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump(exclude_none=True)]},
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 24 C."},
    ]
    model.add_turns([Turn(text="Sunny.", usage={"input_tokens": 400, "cache_read_tokens": 100})])
    await client.chat.completions.create(model="gpt-test", messages=messages, tools=[tool])

    metrics = await scrape(admin_url)
    assert metrics.value("sidecar_tool_tokens_total", tool="weather_get", direction="output") == 21
    input_base = metrics.value("sidecar_tool_tokens_total", tool="weather_get", direction="input")
    # The call and result are the newest turn: no cache read is theirs while the history (the
    # rest of the prompt) can hold all 100.
    assert metrics.value("sidecar_tool_tokens_total", tool="weather_get", direction="input_cached") == 0
    assert metrics.value("sidecar_tool_tokens_total", tool="weather_get", direction="input_cache_write") == 0
    body = model.requests[-1].body
    request = json.loads(body)
    call_chars = len(
        compact({"id": call.id, "type": "function", "function": request["messages"][1]["tool_calls"][0]["function"]})
    )
    result_chars = len(compact({"role": "tool", "tool_call_id": call.id, "content": "Sunny, 24 C."}))
    assert input_base == pytest.approx(400 * (call_chars + result_chars) / len(body.decode()))
