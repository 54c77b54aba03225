"""The tool inventory: the latest declaration of every tool each agent really sends.

Every request re-declares its tools, so the sidecar sees what is deployed, not what a
repository says. The inventory keeps, per (agent, provider, tool name), the newest
declaration and when it was first and last seen, and tells the caller when a declaration
differs from the one kept (drift). It is served at `GET /v1/tools` on the admin port.

Why the key has the provider: one agent may declare the same tool differently to two
providers (OpenAI strict mode requires every property in `required`); alternating between
them is not a change of the tool. The agent is `input.agent.id` of the policy input
(`agent_id` setting, else POD_NAME), the same for every request of one sidecar process.

Bounded by entries and by bytes (canonical JSON of name, description and schema): the least
recently declared entry goes first. A tool evicted and declared again is new again (no
drift is reported for it); a tool missing from one request is not removed, since agents
often send a subset of their tools per turn.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sidecar.config import InventorySettings
from sidecar.model import PerToolList, ToolDeclaration, canonical_json, declaration_hash

InventoryKey = tuple[str, str, str]  # (agent, provider, tool name)

# A tool list declared again within this long of its last walk is not walked again: its
# entries' `last_seen` is served to the second, and a list declared that often stays at the
# recent end of the LRU order anyway. An agent re-declares its tools on every request; with
# this, that costs a lookup instead of a walk of every tool.
REFRESH_S = 1.0


def iso_time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(slots=True)
class InventoryEntry:
    """The latest declaration of one tool for one agent and provider."""

    agent: str
    provider: str
    declaration: ToolDeclaration
    declaration_hash: str
    first_seen: float
    last_seen: float
    size: int
    # Schema hash before the latest schema change; None while the schema never changed.
    previous_schema_hash: str | None = None
    changes: int = 0

    @property
    def key(self) -> InventoryKey:
        return (self.agent, self.provider, self.declaration.name)

    def to_json(self) -> dict[str, Any]:
        decl = self.declaration
        return {
            "agent": self.agent,
            "provider": self.provider,
            "name": decl.name,
            "description": decl.description,
            "schema": decl.schema,
            "schema_hash": decl.schema_hash,
            "declaration_hash": self.declaration_hash,
            "previous_schema_hash": self.previous_schema_hash,
            "changes": self.changes,
            "first_seen": iso_time(self.first_seen),
            "last_seen": iso_time(self.last_seen),
        }


@dataclass(frozen=True, slots=True)
class Drift:
    """A declaration that differs from the one the inventory kept for the same key."""

    agent: str
    provider: str
    before: ToolDeclaration
    after: ToolDeclaration
    before_hash: str
    after_hash: str


@dataclass(frozen=True, slots=True)
class Recorded:
    """What one request's declarations did to the inventory."""

    drifts: list[Drift]
    # Tool name -> schema hash before its latest schema change (only tools that have one).
    previous_schema_hashes: dict[str, str]


@dataclass(frozen=True, slots=True)
class _Walk:
    """A walk of one tool list that kept every declaration of it, as `record` remembers it."""

    agent: str
    provider: str
    changes: int  # the inventory's change count after the walk
    at: float
    recorded: Recorded  # without drifts: a repeat finds none

    def repeats(self, agent: str, provider: str, changes: int, now: float) -> bool:
        """Whether walking the list again now would only refresh `last_seen`."""
        return (
            changes == self.changes
            and agent == self.agent
            and provider == self.provider
            and 0 <= now - self.at < REFRESH_S
        )


def _size(declaration: ToolDeclaration) -> int:
    return (
        len(canonical_json(declaration.schema)) + len(declaration.name.encode()) + len(declaration.description.encode())
    )


class ToolInventory:
    """Bounded LRU of the latest declarations; `record` is called once per agent request."""

    def __init__(self, settings: InventorySettings, clock: Callable[[], float] = time.time) -> None:
        self.max_entries = settings.max_entries
        self.max_bytes = settings.max_bytes
        self._clock = clock
        self._entries: OrderedDict[InventoryKey, InventoryEntry] = OrderedDict()
        self.bytes = 0
        self.evicted = 0
        self.oversized = 0  # declarations larger than max_bytes on their own: never kept
        self._changes = 0  # entries added, replaced or dropped: what a remembered walk relied on
        self._walked: PerToolList[_Walk] = PerToolList()

    def __len__(self) -> int:
        return len(self._entries)

    def record(self, agent: str, provider: str, declarations: Mapping[str, ToolDeclaration]) -> Recorded:
        """Keep each declaration as the latest of its key; report those that changed.

        The common case (the same declaration again) is two dict lookups and a string
        compare: the declaration hash is only computed for new or changed declarations. The
        same `ToolList` again within `REFRESH_S`, with the inventory unchanged since, is not
        walked at all: the walk would find every declaration the same."""
        now = self._clock()
        walk = self._walked.get(declarations)
        if walk is not None and walk.repeats(agent, provider, self._changes, now):
            return walk.recorded
        evicted, oversized = self.evicted, self.oversized
        drifts: list[Drift] = []
        previous: dict[str, str] = {}
        for name, declaration in declarations.items():
            key = (agent, provider, name)
            entry = self._entries.get(key)
            if entry is not None and _same(entry.declaration, declaration):
                entry.last_seen = now
                self._entries.move_to_end(key)
            else:
                entry = self._replace(key, entry, declaration, now, drifts)
            if entry is not None and entry.previous_schema_hash is not None:
                previous[name] = entry.previous_schema_hash
        self._shrink()
        if (self.evicted, self.oversized) == (evicted, oversized):  # every declaration is kept
            self._walked.put(declarations, _Walk(agent, provider, self._changes, now, Recorded([], previous)))
        return Recorded(drifts, previous)

    def _replace(
        self,
        key: InventoryKey,
        entry: InventoryEntry | None,
        declaration: ToolDeclaration,
        now: float,
        drifts: list[Drift],
    ) -> InventoryEntry | None:
        self._changes += 1
        new_hash = declaration_hash(declaration)
        size = _size(declaration)
        if size > self.max_bytes:
            self.oversized += 1
            if entry is not None:  # keeping the old one would report it as current
                self._drop(key)
            return None
        if entry is None:
            entry = InventoryEntry(key[0], key[1], declaration, new_hash, now, now, size)
            self._entries[key] = entry
            self.bytes += size
            return entry
        if new_hash != entry.declaration_hash:
            drifts.append(Drift(key[0], key[1], entry.declaration, declaration, entry.declaration_hash, new_hash))
            entry.changes += 1
        if declaration.schema_hash != entry.declaration.schema_hash:
            entry.previous_schema_hash = entry.declaration.schema_hash
        self.bytes += size - entry.size
        entry.declaration, entry.declaration_hash, entry.size, entry.last_seen = declaration, new_hash, size, now
        self._entries.move_to_end(key)
        return entry

    def _drop(self, key: InventoryKey) -> None:
        self._changes += 1
        entry = self._entries.pop(key)
        self.bytes -= entry.size

    def _shrink(self) -> None:
        while self._entries and (len(self._entries) > self.max_entries or self.bytes > self.max_bytes):
            oldest = next(iter(self._entries))
            self._drop(oldest)
            self.evicted += 1

    def entries(self) -> list[InventoryEntry]:
        """Sorted by agent, provider and tool name (stable output for the API and the CLI)."""
        return [self._entries[key] for key in sorted(self._entries)]

    def to_json(self) -> dict[str, Any]:
        """The `GET /v1/tools` document."""
        return {
            "tools": [entry.to_json() for entry in self.entries()],
            "inventory": {
                "entries": len(self._entries),
                "bytes": self.bytes,
                "max_entries": self.max_entries,
                "max_bytes": self.max_bytes,
                "evicted": self.evicted,
                "oversized": self.oversized,
            },
        }


def _same(kept: ToolDeclaration, seen: ToolDeclaration) -> bool:
    return kept.schema_hash == seen.schema_hash and kept.description == seen.description and kept.name == seen.name
