"""`on_sent` (sidecar/exchange/filters.py): filters that observe the request hear it once it
went upstream, before the reply is read, once per exchange (not per repair round); a failure
there is counted and changes nothing; a critical filter cannot listen to it."""

from __future__ import annotations

import asyncio

import pytest

from sidecar.exchange.filters import Filter, FilterChain
from sidecar.exchange.state import Exchange
from sidecar.model import Reply
from sidecar.scripted import ToolCallSpec, Turn
from tests.e2e.agents import AGENTS
from tests.helpers.ledger import TOOLS, TRAITS
from tests.helpers.metrics import scrape

SEARCH = ToolCallSpec("support_tickets_search", {"query": "refund"})
BAD_SEARCH = ToolCallSpec("support_tickets_search", {"query": ""})  # minLength 1: a repair round
SESSION = {"X-Sidecar-Session": "on-sent"}


class Order(Filter):
    """Records the hooks it hears, and at `on_sent` how many requests the model had."""

    name = "order"

    def __init__(self, model_requests: list[object]) -> None:
        self.model_requests = model_requests
        self.heard: list[str] = []
        self.requests_at_sent: list[int] = []
        self.sent_request: list[object] = []

    async def on_request(self, ex: Exchange) -> None:
        self.heard.append("request")

    async def on_sent(self, ex: Exchange) -> None:
        self.heard.append("sent")
        # The request was written before this runs: the model gets it while the sidecar waits.
        async with asyncio.timeout(5):
            # (The scripted model only lists what it received: polled, there is no event.)
            while len(self.model_requests) == len(self.requests_at_sent):  # noqa: ASYNC110
                await asyncio.sleep(0.001)
        self.requests_at_sent.append(len(self.model_requests))
        self.sent_request.append(ex.request)

    async def on_reply(self, ex: Exchange, reply: Reply) -> None:
        self.heard.append("reply")


@pytest.mark.parametrize("stream", [False, True])
async def test_on_sent_comes_after_the_request_went_upstream_and_before_the_reply(start_sidecar, model, stream):
    running = await start_sidecar(tools=TRAITS)
    order = Order(model.requests)
    running.sidecar.add_filter(order)
    agent = AGENTS["anthropic"](running.proxy_url, TOOLS, SESSION)
    model.add_turns([Turn(tool_calls=[SEARCH])])
    got = await agent.ask(stream)
    assert got.calls == [("support_tickets_search", {"query": "refund"})]
    assert order.heard == ["request", "sent", "reply"]
    assert order.requests_at_sent == [1]
    assert order.sent_request == [model.model_requests[0].json]  # the request as it went upstream


async def test_a_repair_round_sends_again_without_on_sent(start_sidecar, model):
    running = await start_sidecar(tools=TRAITS)
    order = Order(model.requests)
    running.sidecar.add_filter(order)
    agent = AGENTS["anthropic"](running.proxy_url, TOOLS, SESSION)
    model.add_turns([Turn(tool_calls=[BAD_SEARCH]), Turn(tool_calls=[SEARCH])])
    got = await agent.ask(False)
    assert got.calls == [("support_tickets_search", {"query": "refund"})]
    assert len(model.model_requests) == 2  # the agent's request, then the repair round's
    assert order.heard == ["request", "sent", "reply", "reply"]


class RaisesWhenSent(Filter):
    name = "raises_when_sent"

    async def on_sent(self, ex: Exchange) -> None:
        raise RuntimeError("injected")


async def test_a_filter_that_raises_in_on_sent_changes_nothing_and_is_counted(start_sidecar, model):
    running = await start_sidecar(tools=TRAITS)
    running.sidecar.add_filter(RaisesWhenSent())
    agent = AGENTS["chat"](running.proxy_url, TOOLS, SESSION)
    model.add_turns([Turn(tool_calls=[SEARCH])])
    got = await agent.ask(False)
    assert got.calls == [("support_tickets_search", {"query": "refund"})]
    metrics = await scrape(running.admin_url)
    labels = {"filter": "raises_when_sent", "hook": "on_sent", "critical": "false"}
    assert metrics.value("sidecar_filter_errors_total", **labels) == 1


class CriticalWhenSent(RaisesWhenSent):
    name = "critical_when_sent"
    critical = True


def test_a_critical_filter_cannot_listen_to_on_sent():
    with pytest.raises(TypeError, match="critical_when_sent is critical"):
        FilterChain([CriticalWhenSent()])
    chain = FilterChain([])
    with pytest.raises(TypeError, match="critical_when_sent is critical"):
        chain.add(CriticalWhenSent())
    assert chain.filters == []
