"""The pre-flight: before any load, every target must answer every scenario with the model's
tool calls intact, read by the official SDKs (Anthropic's stream helper, OpenAI's client)
the way an agent reads them, and with exactly one upstream request per client request (a
repair round would show as a second). A benchmark of refusals or repairs would be a lie, so
any difference aborts the run.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import anthropic
import openai
import orjson
from prometheus_client.parser import text_string_to_metric_families

from proxybench.bodies import Api, body, expected_calls

Calls = list[tuple[str, dict[str, Any]]]
API_KEY = "sk-bench-not-a-key"


class PreflightError(RuntimeError):
    """A target did not deliver the model's reply unchanged."""


async def anthropic_calls(base_url: str, stream: bool) -> Calls:
    client = anthropic.AsyncAnthropic(base_url=base_url, api_key=API_KEY, max_retries=0)
    try:
        request = body(Api.ANTHROPIC, stream)
        request.pop("stream")
        if stream:
            async with client.messages.stream(**request) as events:
                message = await events.get_final_message()
        else:
            message = await client.messages.create(**request)
        return [(block.name, dict(block.input)) for block in message.content if block.type == "tool_use"]
    finally:
        await client.close()


async def chat_calls(base_url: str, stream: bool) -> Calls:
    client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key=API_KEY, max_retries=0)
    try:
        request = body(Api.CHAT, stream)
        if not stream:
            completion = await client.chat.completions.create(**request)
            tool_calls = completion.choices[0].message.tool_calls or []
            return [(c.function.name, orjson.loads(c.function.arguments)) for c in tool_calls if c.type == "function"]
        names: dict[int, str] = {}
        arguments: dict[int, str] = {}
        async for chunk in await client.chat.completions.create(**request):
            for choice in chunk.choices:
                for delta in choice.delta.tool_calls or []:
                    if delta.function is None:
                        continue
                    names[delta.index] = names.get(delta.index, "") + (delta.function.name or "")
                    arguments[delta.index] = arguments.get(delta.index, "") + (delta.function.arguments or "")
        return [(names[i], orjson.loads(arguments[i])) for i in sorted(names)]
    finally:
        await client.close()


async def mock_counts(session: aiohttp.ClientSession, mock_url: str) -> dict[str, int]:
    async with session.get(f"{mock_url}/stats") as response:
        counts: dict[str, int] = orjson.loads(await response.read())
        return counts


async def check_target(session: aiohttp.ClientSession, name: str, url: str, mock_url: str) -> list[str]:
    """Each API, whole and streamed, once through `url`; returns one line per check that passed."""
    expected = expected_calls()
    lines: list[str] = []
    for api in Api:
        for stream in (False, True):
            before = await mock_counts(session, mock_url)
            scenario = f"{api.label} {'streamed' if stream else 'whole'}"
            try:
                got = await (anthropic_calls(url, stream) if api is Api.ANTHROPIC else chat_calls(url, stream))
            except (anthropic.APIError, openai.APIError) as exc:
                raise PreflightError(f"{name}, {scenario}: the SDK failed: {exc}") from exc
            after = await mock_counts(session, mock_url)
            upstream = after.get(api.name, 0) - before.get(api.name, 0)
            if got != expected:
                raise PreflightError(
                    f"{name}, {scenario}: tool calls differ from the mock's: got {got}, sent {expected}"
                )
            if upstream != 1:
                raise PreflightError(f"{name}, {scenario}: {upstream} upstream requests for one (a repair round?)")
            lines.append(f"{name}: {scenario}: 200, {len(got)} tool calls intact, 1 upstream request")
    return lines


def refusals(metrics_text: str) -> list[str]:
    """Every sidecar counter that says a call or request was not passed through unchanged."""
    problems: list[str] = []
    allowed = 0.0
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == "sidecar_tool_calls_total":
                if sample.labels.get("verdict") == "allow":
                    allowed += sample.value
                elif sample.value > 0:
                    problems.append(f"{sample.value:g} calls with verdict {sample.labels.get('verdict')}")
            elif sample.name in ("sidecar_repair_rounds_total", "sidecar_requests_refused_total") and sample.value > 0:
                problems.append(f"{sample.name}{sample.labels} = {sample.value:g}")
    expected = len(expected_calls()) * 2 * len(Api)  # each call, whole and streamed, per API
    if allowed < expected:
        problems.append(f"only {allowed:g} calls counted as allowed (expected {expected})")
    return problems


async def check_sidecar_metrics(session: aiohttp.ClientSession, name: str, admin_url: str) -> str:
    async with session.get(f"{admin_url}/metrics") as response:
        text = await response.text()
    problems = refusals(text)
    if problems:
        raise PreflightError(f"{name}: the sidecar did not pass the calls through: {'; '.join(problems)}")
    return f"{name}: every tool call allowed (sidecar_tool_calls_total), no repair round, no refusal"
