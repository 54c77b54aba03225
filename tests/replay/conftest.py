"""Shared pieces of the replay and result-matching tests: tools, traits, metric scraping."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sidecar.addons import Addon
from sidecar.exchange.state import CallCheck, Exchange
from tests.helpers.redis_server import run_redis_server

SEARCH_SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string", "minLength": 1}, "limit": {"type": "integer"}},
    "required": ["query"],
}
SEND_SCHEMA = {
    "type": "object",
    "properties": {"ticket_id": {"type": "string"}, "body": {"type": "string"}},
    "required": ["ticket_id", "body"],
}
TOOLS = {"support_tickets_search": SEARCH_SCHEMA, "support_replies_send": SEND_SCHEMA}
# Side effects come from settings (config beats data.json; no policies dir in these tests).
TRAITS: dict[str, Any] = {
    "support_replies_send": {"side_effects": True},
    "support_tickets_search": {"side_effects": False},
}


async def scrape(admin_url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of /metrics on the admin port, keyed by (name, labels)."""
    async with aiohttp.ClientSession() as http, http.get(admin_url + "/metrics") as response:
        text = await response.text()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


class Capture(Addon):
    """Keeps what the guards decided and what result matching left for the policy."""

    name = "capture"

    def __init__(self) -> None:
        self.checks: list[CallCheck] = []
        self.results: list[Any] = []

    async def request(self, exchange: Exchange) -> None:
        self.results.extend(exchange.scratch.get("tool_results", []))

    async def checked(self, exchange: Exchange, checks: list[CallCheck]) -> None:
        self.checks.extend(checks)


@pytest.fixture
def redis_url() -> Iterator[str]:
    with run_redis_server() as url:
        yield url
