"""The inventory's declarations linted off the request path: only new or changed ones, the naming
rules over each agent's set, bounded by the inventory, a failing lint shown as failed."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sidecar.config import InventorySettings, load_settings
from sidecar.model import ToolDeclaration
from sidecar.schemas import inventory_lint
from sidecar.schemas.inventory import ToolInventory
from sidecar.schemas.inventory_lint import InventoryLint
from sidecar.telemetry.metrics import Metrics
from tests.helpers.metrics import Scrape

GOOD = ToolDeclaration.create(
    "weather_forecast_get",
    {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City in English, e.g. Paris."}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "The weather forecast for a city, for the next three days.",
)
# Classic mistakes: a positional name and a money amount as a float (errors), a generic name.
BAD = ToolDeclaration.create(
    "search",
    {"type": "object", "properties": {"arg0": {"type": "string"}, "amount": {"type": "number"}}},
    "Search.",
)


def good_as(name: str) -> ToolDeclaration:
    return ToolDeclaration.create(name, GOOD.schema, GOOD.description)


class Counting:
    """Wraps lint_tool to count the declarations actually linted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        real = inventory_lint.lint_tool

        def counted(tool: Any, *args: Any, **kwargs: Any) -> Any:
            self.names.append(tool.declaration.name)
            return real(tool, *args, **kwargs)

        monkeypatch.setattr(inventory_lint, "lint_tool", counted)


def setup(**bounds: int) -> tuple[ToolInventory, InventoryLint]:
    inventory = ToolInventory(InventorySettings(**bounds))
    return inventory, InventoryLint(inventory, load_settings(flags={}, environ={}))


async def test_lints_only_what_is_new_or_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    counting = Counting(monkeypatch)
    inventory, lint = setup()
    inventory.record("agent", "anthropic", {"weather_forecast_get": GOOD, "search": BAD})
    key = ("agent", "anthropic", "search")
    assert lint.lint_of(key) is None  # not linted until someone looks
    await lint.refresh()
    assert sorted(counting.names) == ["search", "weather_forecast_get"]
    summary = lint.lint_of(key)
    assert summary is not None and summary.ok
    assert summary.counts["error"] >= 2
    assert {"positional-name", "money-as-number", "generic-name"} <= set(summary.rules)

    await lint.refresh()  # nothing changed: nothing linted again
    inventory.record("agent", "anthropic", {"weather_forecast_get": GOOD, "search": BAD})
    await lint.refresh()
    assert len(counting.names) == 2

    fixed = ToolDeclaration.create("search", {**BAD.schema, "properties": {"query": {"type": "string"}}}, "Search.")
    inventory.record("agent", "anthropic", {"search": fixed})
    await lint.refresh()
    assert counting.names[2:] == ["search"]
    after = lint.lint_of(key)
    assert after is not None and "positional-name" not in after.rules


async def test_naming_is_judged_over_each_agents_tools() -> None:
    inventory, lint = setup()
    styled = ToolDeclaration.create("GetInvoice", GOOD.schema, "An invoice by its number, with its lines.")
    inventory.record("agent", "openai", {"weather_forecast_get": GOOD, "orders_list_get": GOOD, "GetInvoice": styled})
    await lint.refresh()
    summary = lint.lint_of(("agent", "openai", "GetInvoice"))
    assert summary is not None and "inconsistent-naming" in summary.rules


async def test_counts_take_the_worst_provider_and_follow_evictions() -> None:
    inventory, lint = setup(max_entries=2)
    inventory.record("agent", "anthropic", {"search": BAD})
    inventory.record("agent", "openai", {"search": good_as("search")})
    await lint.refresh()
    counts = lint.counts()
    bad = lint.lint_of(("agent", "anthropic", "search"))
    assert bad is not None and counts[("search", "error")] == bad.counts["error"]
    # A third entry evicts the oldest (anthropic's): its findings leave with it.
    inventory.record("agent", "openai", {"weather_forecast_get": GOOD})
    await lint.refresh()
    assert lint.lint_of(("agent", "anthropic", "search")) is None
    assert lint.counts()[("search", "error")] == 0


async def test_a_failing_lint_is_shown_as_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("lint bug")

    monkeypatch.setattr(inventory_lint, "lint_tool", broken)
    inventory, lint = setup()
    inventory.record("agent", "anthropic", {"search": BAD})
    await lint.refresh()
    summary = lint.lint_of(("agent", "anthropic", "search"))
    assert summary is not None and not summary.ok
    [declared] = lint.declarations()["search"]
    assert declared["lint"]["ok"] is False


async def test_the_gauge_reads_what_was_linted_through_the_label_cap() -> None:
    inventory, lint = setup()
    metrics = Metrics(tool_label_cap=1)
    metrics.lint_findings(lint.counts)
    metrics.declare_tool("weather_forecast_get")  # admitted; "search" falls beyond the cap
    inventory.record("agent", "anthropic", {"weather_forecast_get": GOOD, "search": BAD})
    await lint.refresh()
    body, content_type = metrics.render()
    text = body.decode()
    scrape = Scrape({f.name: f for f in text_string_to_metric_families(text)}, content_type, text)
    bad = lint.lint_of(("agent", "anthropic", "search"))
    assert bad is not None
    assert scrape.value("sidecar_tool_lint_findings", tool="other", severity="error") == bad.counts["error"]
    assert scrape.value("sidecar_tool_lint_findings", tool="weather_forecast_get", severity="error") == 0
