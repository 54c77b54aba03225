"""Work after an exchange ends runs in batches (sidecar/telemetry/batched.py): not at `on_done`,
but at the next turn of the loop when no other request is in flight, else within BATCH_S, at
BATCH_MAX waiting, before any read of the metrics, or at `Metrics.settle` (the sidecar
closing). The cost filter's token attribution is the example here; the telemetry filter's
request line is tested in test_logs.py and test_logs_workload.py."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import pytest
from multidict import CIMultiDict
from prometheus_client.parser import text_string_to_metric_families
from yarl import URL

from sidecar.dialects import ANTHROPIC
from sidecar.exchange.state import End, Exchange, Outcome
from sidecar.filters.cost import CostFilter
from sidecar.filters.telemetry import TelemetryFilter
from sidecar.model import Provider
from sidecar.telemetry.batched import BATCH_MAX, BATCH_S, Batched
from sidecar.telemetry.metrics import Metrics
from sidecar.telemetry.rejection_log import RejectionLog
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
    await costs.on_sent(ex)
    await costs.on_reply(ex, ANTHROPIC.read_reply(REPLY))
    await costs.on_done(ex, None)  # type: ignore[arg-type]  # the filter does not read the end


def _busy() -> Metrics:
    """Metrics of a sidecar handling other requests too: work waits for its batch."""
    metrics = Metrics()
    metrics.requests_in_flight = 8
    return metrics


async def test_an_ended_exchange_is_counted_by_the_batch_or_by_a_read() -> None:
    metrics = _busy()
    costs = CostFilter(metrics)
    await _ended(costs, metrics)
    assert len(costs._ended) == 1  # not attributed at on_done
    assert _tokens(metrics) == 20  # a read settles the batch first
    assert len(costs._ended) == 0

    await _ended(costs, metrics)
    assert len(costs._ended) == 1
    await asyncio.sleep(BATCH_S * 3)  # the batch's timer
    assert len(costs._ended) == 0
    assert metrics.status_summary()["tools"]["read_file"]["tokens"]["output"] == 40


async def test_an_idle_sidecar_does_the_work_at_the_next_turn_of_the_loop() -> None:
    metrics = Metrics()
    metrics.requests_in_flight = 1  # only the request that is ending
    costs = CostFilter(metrics)
    await _ended(costs, metrics)
    await _ended(costs, metrics)
    assert len(costs._ended) == 2  # not inside on_done: its answer is written first
    await asyncio.sleep(0)
    assert len(costs._ended) == 0
    metrics._pending.apply()  # what the batch counted, without settling any batch
    assert (
        metrics.registry.get_sample_value("sidecar_tool_tokens_total", {"tool": "read_file", "direction": "output"})
        == 40
    )

    metrics.requests_in_flight = 2  # busy again: the batch waits
    await _ended(costs, metrics)
    await asyncio.sleep(0)
    assert len(costs._ended) == 1


async def test_a_full_batch_is_attributed_at_once() -> None:
    metrics = _busy()
    costs = CostFilter(metrics)
    for _ in range(BATCH_MAX - 1):
        await _ended(costs, metrics)
    assert len(costs._ended) == BATCH_MAX - 1
    await _ended(costs, metrics)
    assert len(costs._ended) == 0
    metrics._pending.apply()  # what the batch counted, without settling any batch
    assert (
        metrics.registry.get_sample_value("sidecar_tool_tokens_total", {"tool": "read_file", "direction": "output"})
        == 20 * BATCH_MAX
    )


async def test_settle_does_every_batch_and_one_failing_item_loses_no_other(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = _busy()
    done: list[int] = []
    failed: list[int] = []

    def work(item: int) -> None:
        if item == 2:
            raise ValueError("boom")
        done.append(item)

    def on_failure(item: int) -> None:
        logging.getLogger("sidecar.test").exception("item %d failed", item)
        failed.append(item)

    first: Batched[int] = Batched(metrics, work, on_failure)
    second: Batched[int] = Batched(metrics, lambda item: done.append(item * 10), on_failure)
    for item in (1, 2, 3):
        first.add(item)
    second.add(4)
    assert done == [] and (len(first), len(second)) == (3, 1)
    with caplog.at_level(logging.ERROR, logger="sidecar.test"):
        metrics.settle()  # what closing the sidecar does first
    assert done == [1, 3, 40] and failed == [2]
    assert "ValueError: boom" in caplog.text  # the failure handler runs inside the except
    assert (len(first), len(second)) == (0, 0)
    metrics.settle()  # nothing left: nothing done twice
    assert done == [1, 3, 40]


async def test_finish_runs_once_after_each_batch_that_had_items() -> None:
    metrics = _busy()
    events: list[str] = []
    batched: Batched[int] = Batched(
        metrics, lambda item: events.append(f"item {item}"), events.append, finish=lambda: events.append("finish")
    )
    metrics.settle()  # an empty batch: nothing to finish
    assert events == []
    batched.add(1)
    batched.add(2)
    metrics.settle()
    assert events == ["item 1", "item 2", "finish"]
    batched.add(3)
    await asyncio.sleep(BATCH_S * 3)  # the batch's timer
    assert events == ["item 1", "item 2", "finish", "item 3", "finish"]


async def test_a_batch_of_exchanges_counts_its_tokens_once_per_tool_and_direction() -> None:
    metrics = _busy()
    costs = CostFilter(metrics)
    increments: list[tuple[str | None, str, float]] = []
    counted = metrics.tool_tokens_spent

    def spy(spent: object) -> None:
        pairs = list(spent)  # type: ignore[call-overload]
        increments.extend(pairs)
        counted(pairs)

    metrics.tool_tokens_spent = spy  # type: ignore[method-assign]
    for _ in range(3):
        await _ended(costs, metrics)
    assert _tokens(metrics) == 60  # the three exchanges' output tokens, all counted
    assert [tokens for tool, direction, tokens in increments if (tool, direction) == ("read_file", "output")] == [60]


async def test_a_failing_count_is_logged_and_the_next_batch_is_counted(caplog: pytest.LogCaptureFixture) -> None:
    metrics = _busy()
    costs = CostFilter(metrics)
    counted = metrics.tool_tokens_spent
    calls = 0

    def flaky(spent: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("registry broken")
        counted(spent)  # type: ignore[arg-type]

    metrics.tool_tokens_spent = flaky  # type: ignore[method-assign]
    await _ended(costs, metrics)
    with caplog.at_level(logging.ERROR, logger="sidecar.cost"):
        metrics.settle()
    assert "registry broken" in caplog.text
    assert (
        metrics.registry.get_sample_value(
            "sidecar_filter_errors_total", {"filter": "cost", "hook": "on_done", "critical": "false"}
        )
        == 1
    )
    await _ended(costs, metrics)
    assert _tokens(metrics) == 20  # the failed batch's tokens are lost, the next one's counted


async def test_a_waiting_batch_holds_nothing_of_the_exchange(tmp_path: Path) -> None:
    """The batches keep what `on_done` read, not the exchange: its parsed request and replies
    are freed when it ends (memory still in the caches), not when the batch runs."""
    metrics = _busy()
    metrics.declare_tool("read_file")
    costs, telemetry = CostFilter(metrics), TelemetryFilter(metrics, RejectionLog(str(tmp_path / "r.log")))
    view = ANTHROPIC.read_request(REQUEST)
    ex = Exchange("x", Provider.ANTHROPIC, ANTHROPIC, "s1", view, REQUEST, URL("http://u"), CIMultiDict())
    reply = ANTHROPIC.read_reply(REPLY)
    await costs.on_sent(ex)
    await costs.on_reply(ex, reply)
    held = sys.getrefcount(ex), sys.getrefcount(reply), sys.getrefcount(reply.envelope)
    end = End(Outcome.DONE, 200, False, 0.001)
    await costs.on_done(ex, end)
    await telemetry.on_done(ex, end)
    assert (len(costs._ended), len(telemetry._ended)) == (1, 1)  # both wait for their batch
    assert (sys.getrefcount(ex), sys.getrefcount(reply), sys.getrefcount(reply.envelope)) == held
    assert _tokens(metrics) == 20  # and the batch still counts the exchange
