"""Shared pieces of the replay and result-matching tests: tools, traits, a capturing filter."""

from __future__ import annotations

from typing import Any

from sidecar.exchange.filters import Filter
from sidecar.exchange.state import CallCheck, Exchange, ToolResultRecord

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


class Capture(Filter):
    """Keeps what the filters decided and the matched results (added with `Sidecar.add_filter`)."""

    name = "capture"

    def __init__(self) -> None:
        self.checks: list[CallCheck] = []
        self.results: list[ToolResultRecord] = []

    async def on_result(self, ex: Exchange, record: ToolResultRecord) -> None:
        self.results.append(record)

    async def on_checked(self, ex: Exchange, checks: list[CallCheck]) -> None:
        self.checks.extend(checks)
