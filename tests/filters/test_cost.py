"""The cost filter through the SDK agents: which replies and requests it counts, and for whom."""

from __future__ import annotations

import anthropic
import pytest

from sidecar.scripted import ToolCallSpec, Turn, UpstreamError
from tests.e2e.agents import AGENTS
from tests.helpers.metrics import scrape

SCHEMA = {"type": "object", "properties": {"limit": {"type": "integer"}}, "required": ["limit"]}
TOOLS = {"orders_list": SCHEMA}
GOOD = ToolCallSpec("orders_list", {"limit": 5})
BAD = ToolCallSpec("orders_list", {"limit": "5"})
INPUT = ("input", "input_cached", "input_cache_write")


def tokens(metrics, tool: str, direction: str) -> float:
    return metrics.value("sidecar_tool_tokens_total", tool=tool, direction=direction, default=0.0)


@pytest.mark.parametrize("kind", list(AGENTS))
async def test_calls_and_results_on_every_protocol(start_sidecar, model, kind):
    running = await start_sidecar()
    agent = AGENTS[kind](running.proxy_url, TOOLS)
    model.add_turns([Turn(tool_calls=[GOOD], usage={"output_tokens": 33})])
    first = await agent.ask(stream=False)
    agent.answer({first.call_ids[0]: '{"orders": ["A-1", "A-2"]}'})
    model.add_turns([Turn(text="Two orders.", usage={"input_tokens": 500})])
    await agent.ask(stream=True)

    metrics = await scrape(running.admin_url)
    assert tokens(metrics, "orders_list", "output") == 33  # one call, no text: exact
    attributed = sum(tokens(metrics, "orders_list", d) for d in INPUT)
    if kind == "responses":
        # Continues a stored response (previous_response_id): the input tokens cover history
        # the body does not carry, so none is attributed.
        assert attributed == 0
    else:
        assert 0 < attributed < 500


async def test_repair_rounds_count_every_reply_and_resend_the_request(start_sidecar, model):
    running = await start_sidecar()
    agent = AGENTS["anthropic"](running.proxy_url, TOOLS)
    model.add_turns([Turn(tool_calls=[GOOD], usage={"output_tokens": 10})])
    first = await agent.ask(stream=False)
    agent.answer({first.call_ids[0]: '{"orders": []}'})
    # The model calls badly (refused: a repair round), then corrects itself.
    model.add_turns(
        [
            Turn(tool_calls=[BAD], usage={"input_tokens": 300, "output_tokens": 10}),
            Turn(tool_calls=[GOOD], usage={"input_tokens": 150, "cache_read_tokens": 250, "output_tokens": 12}),
        ]
    )
    second = await agent.ask(stream=False)
    assert second.calls == [("orders_list", {"limit": 5})]

    metrics = await scrape(running.admin_url)
    assert tokens(metrics, "orders_list", "output") == 10 + 10 + 12  # the refused call was written too
    # The round re-sends the agent's request: its call and result count twice, at the sizes
    # estimated for the agent's request; in the round they are history, read at 250 / 400.
    base, cached = tokens(metrics, "orders_list", "input"), tokens(metrics, "orders_list", "input_cached")
    assert cached > 0
    assert cached / (base + cached) == pytest.approx(250 / 400 / 2)


async def test_an_incomplete_reply_is_not_counted(start_sidecar, model):
    running = await start_sidecar()
    agent = AGENTS["anthropic"](running.proxy_url, TOOLS)
    model.add_turns(
        [Turn(tool_calls=[GOOD], usage={"output_tokens": 40}, stream_error_after=4, error=UpstreamError(529))]
    )
    with pytest.raises(anthropic.APIStatusError, match=r"(?i)overloaded"):
        await agent.ask(stream=True)
    metrics = await scrape(running.admin_url)
    assert metrics.total("sidecar_tool_tokens_total") == 0


async def test_calls_of_undeclared_tools_count_under_other(start_sidecar, model):
    running = await start_sidecar(enforcement={"max_repair_rounds": 0})
    agent = AGENTS["chat"](running.proxy_url, TOOLS)
    model.add_turns([Turn(tool_calls=[ToolCallSpec("invented_tool", {})], usage={"output_tokens": 7})])
    await agent.ask(stream=False)
    metrics = await scrape(running.admin_url)
    assert tokens(metrics, "other", "output") == 7
    assert "invented_tool" not in metrics.label_values("tool")
