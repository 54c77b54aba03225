"""The cost filter attributes ended exchanges in batches (sidecar/filters/cost.py BATCH_S):
not at `on_done`, but within BATCH_S, at BATCH_MAX waiting, or before any read of the metrics."""

from __future__ import annotations

import asyncio

from multidict import CIMultiDict
from prometheus_client.parser import text_string_to_metric_families
from yarl import URL

from sidecar.dialects import ANTHROPIC
from sidecar.exchange.state import Exchange
from sidecar.filters import cost
from sidecar.filters.cost import CostFilter
from sidecar.model import Provider
from sidecar.telemetry.metrics import Metrics
from tests.helpers.metrics import Scrape

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}
REQUEST = {
    "model": "m",
    "max_tokens": 10,
    "tools": [{"name": "read_file", "description": "", "input_schema": SCHEMA}],
    "messages": [{"role": "user", "content": "read it"}],
}
REPLY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}}],
    "stop_reason": "tool_use",
    "usage": {"input_tokens": 100, "output_tokens": 20},
}


def _tokens(metrics: Metrics) -> float:
    body, content_type = metrics.render()
    text = body.decode()
    scrape = Scrape({f.name: f for f in text_string_to_metric_families(text)}, content_type, text)
    return scrape.value("sidecar_tool_tokens_total", tool="read_file", direction="output", default=0.0)


async def _ended(costs: CostFilter, metrics: Metrics) -> None:
    view = ANTHROPIC.read_request(REQUEST)
    ex = Exchange("x", Provider.ANTHROPIC, ANTHROPIC, "s1", view, REQUEST, URL("http://u"), CIMultiDict())
    metrics.declare_tool("read_file")
    await costs.on_request(ex)
    await costs.on_reply(ex, ANTHROPIC.read_reply(REPLY))
    await costs.on_done(ex, None)  # type: ignore[arg-type]  # the filter does not read the end


async def test_an_ended_exchange_is_counted_by_the_batch_or_by_a_read() -> None:
    metrics = Metrics()
    costs = CostFilter(metrics)
    await _ended(costs, metrics)
    assert costs._waiting  # not attributed at on_done
    assert _tokens(metrics) == 20  # a read settles the batch first
    assert not costs._waiting

    await _ended(costs, metrics)
    assert costs._waiting
    await asyncio.sleep(cost.BATCH_S * 3)  # the batch's timer
    assert not costs._waiting
    assert metrics.status_summary()["tools"]["read_file"]["tokens"]["output"] == 40


async def test_a_full_batch_is_attributed_at_once() -> None:
    metrics = Metrics()
    costs = CostFilter(metrics)
    for _ in range(cost.BATCH_MAX):
        await _ended(costs, metrics)
    assert not costs._waiting
