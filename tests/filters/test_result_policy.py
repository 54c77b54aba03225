"""The result policy filter in-process: any request body, the history's results, the memo."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from multidict import CIMultiDict
from yarl import URL

from sidecar.config import load_settings
from sidecar.dialects import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES, Dialect
from sidecar.exchange.state import Exchange
from sidecar.filters.result_policy import ResultPolicy, result_rules
from sidecar.model import Provider
from sidecar.policy import build_engine
from sidecar.telemetry.metrics import Metrics
from tests.helpers.strategies import WIRE_JSON, mutated
from tests.helpers.wire import wire_json

BASES = {
    ANTHROPIC.name: "anthropic-request-tool-result-parallel.json",
    OPENAI_CHAT.name: "openai-chat-request-tool-messages-parallel.json",
    OPENAI_RESPONSES.name: "openai-responses-request-function-call-output.json",
}
AWS_KEY = "AKIAQ3EGRV7X2PLMN4TZ"


def _filter(**flags: Any) -> ResultPolicy:
    config = load_settings(flags=flags, environ={})
    engine = build_engine(config.policy, config.policies)
    return ResultPolicy(config, engine, Metrics(), rules=result_rules(config, engine))


def _exchange(dialect: Dialect, body: dict[str, Any]) -> Exchange:
    provider = Provider.ANTHROPIC if dialect is ANTHROPIC else Provider.OPENAI
    return Exchange("x", provider, dialect, "s1", dialect.read_request(body), body, URL("http://u"), CIMultiDict())


@pytest.mark.parametrize("dialect", [ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES], ids=lambda d: d.name)
def test_any_request_is_decided_without_raising(dialect: Dialect) -> None:
    """A malformed body may refuse nothing here: every result is decided or left alone."""
    policy = _filter()
    loop = asyncio.new_event_loop()

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(body=mutated(wire_json(BASES[dialect.name]), WIRE_JSON))
    def run(body: dict[str, Any]) -> None:
        ex = _exchange(dialect, body)
        loop.run_until_complete(policy.on_request(ex))
        assert len(dialect.request_results(ex.request)) == len(dialect.request_results(body))

    try:
        run()
    finally:
        loop.close()


async def test_history_results_are_decided_and_remembered() -> None:
    """Three turns of re-sent history: each result is inspected and decided once; the memo
    answers its later occurrences, and each keeps its rewrite."""
    policy = _filter()
    calls = 0
    decide = policy.engine.result_decision

    async def counted(document: dict[str, Any]) -> Any:
        nonlocal calls
        calls += 1
        return await decide(document)

    policy.engine.result_decision = counted  # type: ignore[method-assign]
    messages: list[Any] = [{"role": "user", "content": "go"}]
    sent = []
    for turn, content in enumerate([f"key {AWS_KEY}", "clean", "also clean"]):
        messages.append({"role": "assistant", "content": None, "tool_calls": [{"id": f"c{turn}", "type": "function"}]})
        messages.append({"role": "tool", "tool_call_id": f"c{turn}", "content": content})
        ex = _exchange(OPENAI_CHAT, {"model": "m", "messages": list(messages)})
        await policy.on_request(ex)
        sent.append([r.content for r in OPENAI_CHAT.request_results(ex.request)])
    assert calls == 3  # six occurrences, three results: each decided once
    assert all(AWS_KEY not in str(contents) for contents in sent)
    assert [len(contents) for contents in sent] == [1, 2, 3]
    assert sent[2][1:] == ["clean", "also clean"]
