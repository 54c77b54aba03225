"""The tool inventory and the drift watch: latest declaration per agent, provider and tool,
bounded; a changed declaration counted once, logged once with its diff."""

from __future__ import annotations

import logging
from typing import Any

from sidecar.config import InventorySettings
from sidecar.model import ToolDeclaration, ToolList, declaration_hash
from sidecar.schemas.drift import DriftWatch
from sidecar.schemas.inventory import REFRESH_S, ToolInventory
from sidecar.telemetry.metrics import Metrics

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WIDER = {**SCHEMA, "properties": {**SCHEMA["properties"], "days": {"type": "integer"}}}


def decl(schema: dict[str, Any] = SCHEMA, description: str = "Weather for a city", name: str = "weather_get"):
    return ToolDeclaration.create(name, schema, description)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        self.now += 1
        return self.now


def inventory(**bounds: int) -> ToolInventory:
    return ToolInventory(InventorySettings(**bounds), clock=Clock())


def test_latest_declaration_and_drift() -> None:
    inv = inventory()
    first = inv.record("agent-1", "anthropic", {"weather_get": decl()})
    assert first.drifts == [] and first.previous_schema_hashes == {}
    again = inv.record("agent-1", "anthropic", {"weather_get": decl()})
    assert again.drifts == []
    [entry] = inv.entries()
    assert entry.last_seen > entry.first_seen and entry.changes == 0
    changed = inv.record("agent-1", "anthropic", {"weather_get": decl(WIDER)})
    [drift] = changed.drifts
    assert (drift.before.schema, drift.after.schema) == (SCHEMA, WIDER)
    assert drift.before_hash == declaration_hash(decl()) and drift.after_hash == declaration_hash(decl(WIDER))
    assert changed.previous_schema_hashes == {"weather_get": decl().schema_hash}
    # The previous hash stays with the tool until its schema changes again.
    assert inv.record("agent-1", "anthropic", {"weather_get": decl(WIDER)}).previous_schema_hashes == {
        "weather_get": decl().schema_hash
    }


def test_a_description_change_is_drift_but_keeps_the_schema_hash() -> None:
    inv = inventory()
    inv.record("a", "openai", {"weather_get": decl()})
    recorded = inv.record("a", "openai", {"weather_get": decl(description="Forecast for a city")})
    assert len(recorded.drifts) == 1 and recorded.previous_schema_hashes == {}
    assert inv.entries()[0].previous_schema_hash is None and inv.entries()[0].changes == 1


def test_agents_and_providers_are_kept_apart() -> None:
    """One agent declaring a tool differently to two providers alternates without drift."""
    inv = inventory()
    for _ in range(3):
        assert inv.record("a", "anthropic", {"weather_get": decl()}).drifts == []
        assert inv.record("a", "openai", {"weather_get": decl(WIDER)}).drifts == []
        assert inv.record("b", "anthropic", {"weather_get": decl(WIDER)}).drifts == []
    assert [(e.agent, e.provider) for e in inv.entries()] == [("a", "anthropic"), ("a", "openai"), ("b", "anthropic")]


def test_bounded_by_entries_least_recently_declared_first() -> None:
    inv = inventory(max_entries=2)
    for name in ("t1", "t2", "t1", "t3"):
        inv.record("a", "openai", {name: decl(name=name)})
    assert [e.declaration.name for e in inv.entries()] == ["t1", "t3"]
    assert inv.evicted == 1
    # An evicted tool declared again is new again: no drift reported.
    assert inv.record("a", "openai", {"t2": decl(WIDER, name="t2")}).drifts == []


def test_bounded_by_bytes() -> None:
    big = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 100} for i in range(9)}}
    inv = inventory(max_bytes=2048)
    inv.record("a", "openai", {"t1": decl(big, name="t1")})
    inv.record("a", "openai", {"t2": decl(big, name="t2")})
    assert [e.declaration.name for e in inv.entries()] == ["t2"] and inv.bytes <= 2048
    huge = {"type": "object", "properties": {"p": {"type": "string", "description": "x" * 4000}}}
    inv.record("a", "openai", {"t2": decl(huge, name="t2")})
    assert inv.entries() == [] and inv.oversized == 1 and inv.bytes == 0


def test_served_document() -> None:
    inv = inventory()
    inv.record("agent-1", "anthropic", {"weather_get": decl()})
    document = inv.to_json()
    [tool] = document["tools"]
    assert tool == {
        "agent": "agent-1",
        "provider": "anthropic",
        "name": "weather_get",
        "description": "Weather for a city",
        "schema": SCHEMA,
        "schema_hash": decl().schema_hash,
        "declaration_hash": declaration_hash(decl()),
        "previous_schema_hash": None,
        "changes": 0,
        "first_seen": "2027-01-15T08:00:01Z",
        "last_seen": "2027-01-15T08:00:01Z",
    }
    assert document["inventory"] == {
        "entries": 1,
        "bytes": inv.bytes,
        "max_entries": 1000,
        "max_bytes": 8 * 1024 * 1024,
        "evicted": 0,
        "oversized": 0,
    }


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_drift_watch_counts_logs_and_hands_the_policy_the_previous_hash() -> None:
    metrics = Metrics()
    metrics.declare_tool("weather_get")
    watch = DriftWatch(inventory(), metrics, "agent-1")
    assert watch.observe("anthropic", {"weather_get": decl()}) == {}
    logger, handler = logging.getLogger("sidecar.schemas"), Records()
    logger.addHandler(handler)
    try:
        previous = watch.observe("anthropic", {"weather_get": decl(WIDER)})
    finally:
        logger.removeHandler(handler)
    metrics.settle()  # counts held on the hot path are applied before a read
    assert metrics.schema_changes.labels("weather_get")._value.get() == 1
    [record] = [r for r in handler.records if getattr(r, "event", None) == "tool_schema_change"]
    fields = record.fields  # type: ignore[attr-defined]
    assert fields["diff"] == ["+ weather_get days: integer, optional"]
    assert (fields["agent"], fields["provider"], fields["tool"]) == ("agent-1", "anthropic", "weather_get")
    assert fields["previous_schema_hash"] == decl().schema_hash and fields["schema_hash"] == decl(WIDER).schema_hash
    assert previous == {"weather_get": decl().schema_hash}  # what the policy input gets


class StillClock:
    """A clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_the_same_tool_list_again_within_a_second_is_not_walked() -> None:
    """An agent re-declares its `ToolList` on every request: within REFRESH_S, and with the
    inventory unchanged since, `record` answers from the last walk; after it, or once the
    inventory changed, it walks (and refreshes `last_seen`) again."""
    clock = StillClock()
    inv = ToolInventory(InventorySettings(), clock=clock)
    tools = ToolList({"weather_get": decl(), "other": decl(name="other")})
    inv.record("a", "anthropic", tools)
    walked = inv.record("a", "anthropic", ToolList(tools))  # another list object: walked
    assert [e.last_seen for e in inv.entries()] == [clock.now, clock.now]

    clock.now += REFRESH_S / 2
    remembered = inv.record("a", "anthropic", tools)
    assert remembered.drifts == [] and remembered.previous_schema_hashes == walked.previous_schema_hashes
    assert {e.last_seen for e in inv.entries()} == {clock.now - REFRESH_S / 2}  # not walked

    clock.now += REFRESH_S
    inv.record("a", "anthropic", tools)
    assert {e.last_seen for e in inv.entries()} == {clock.now}  # walked again

    # Another agent or provider is its own walk.
    inv.record("a", "openai", tools)
    assert len(inv) == 4


def test_a_remembered_walk_is_dropped_once_the_inventory_changes() -> None:
    clock = StillClock()
    inv = ToolInventory(InventorySettings(), clock=clock)
    tools = ToolList({"weather_get": decl()})
    inv.record("a", "anthropic", tools)
    # Another list redeclares the tool with a wider schema: drift.
    assert len(inv.record("a", "anthropic", {"weather_get": decl(WIDER)}).drifts) == 1
    # The first list again, at once: its schema is a change again, which only a walk finds.
    back = inv.record("a", "anthropic", tools)
    assert len(back.drifts) == 1 and inv.entries()[0].declaration.schema == SCHEMA
    assert back.previous_schema_hashes == {"weather_get": decl(WIDER).schema_hash}


def test_a_list_larger_than_the_inventory_is_walked_every_time() -> None:
    """A walk that evicted some of the list's own declarations is not remembered: the next
    request walks again, as it did before the memo."""
    clock = StillClock()
    inv = ToolInventory(InventorySettings(max_entries=1), clock=clock)
    tools = ToolList({"t1": decl(name="t1"), "t2": decl(name="t2")})
    inv.record("a", "anthropic", tools)
    evicted = inv.evicted
    inv.record("a", "anthropic", tools)
    assert inv.evicted > evicted  # walked (and evicted) again
