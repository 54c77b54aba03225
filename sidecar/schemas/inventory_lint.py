"""The inventory's declarations, linted where operators look: `/v1/status`, `sidecar status`,
`sidecar_tool_lint_findings` (the per-tool dashboard).

Linting never runs on the request path. `refresh()` is awaited by the admin endpoints that show
the results (`/v1/status`, `/metrics`): it takes a snapshot of the inventory on the event loop
and lints, in a worker thread, only the declarations that are new or changed since the last
refresh (keyed by their declaration hash); the naming rules, which judge an agent's tools as a
set, are re-run on each group (cheap: word rules over names). What it keeps is bounded by the
inventory itself: entries that left the inventory leave the cache.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sidecar.config import Settings
from sidecar.lockdown.validator import Lockdown
from sidecar.model import ToolDeclaration
from sidecar.schemas.findings import SEVERITIES, Finding, Severity, by_severity
from sidecar.schemas.inventory import InventoryEntry, InventoryKey, ToolInventory, iso_time
from sidecar.schemas.lint import lint_tool, naming_findings
from sidecar.schemas.load import LoadedTool

log = logging.getLogger("sidecar.schemas")

# (key, declaration hash, declaration) of each inventory entry, as the worker thread sees it.
_Snapshot = list[tuple[InventoryKey, str, ToolDeclaration]]
_Own = dict[InventoryKey, tuple[str, list[Finding] | None]]


@dataclass(frozen=True, slots=True)
class LintSummary:
    """One declaration's findings: counts by severity, and the rule ids of its errors and
    warnings (what to fix), in the order `sidecar schemas lint` prints them."""

    counts: dict[str, int]
    rules: list[str] = field(default_factory=list)
    ok: bool = True  # False: the lint itself failed on this declaration (logged)

    @classmethod
    def of(cls, findings: list[Finding]) -> LintSummary:
        counts = {s.value: 0 for s in SEVERITIES}
        rules: list[str] = []
        for finding in by_severity(findings):
            counts[finding.severity.value] += 1
            if finding.severity is not Severity.INFO and finding.rule.value not in rules:
                rules.append(finding.rule.value)
        return cls(counts, rules)

    @classmethod
    def failed(cls) -> LintSummary:
        return cls({s.value: 0 for s in SEVERITIES}, ok=False)

    def to_json(self) -> dict[str, Any]:
        return {**self.counts, "rules": list(self.rules), "ok": self.ok}


class InventoryLint:
    def __init__(self, inventory: ToolInventory, settings: Settings) -> None:
        self.inventory = inventory
        self.settings = settings
        self._lockdown = Lockdown()  # the lint's own compile cache, not the proxy's
        # Per entry: (declaration hash linted, its own findings without the naming ones).
        self._own: _Own = {}
        self._summaries: dict[InventoryKey, LintSummary] = {}
        self._lock = asyncio.Lock()

    async def refresh(self) -> None:
        """Lint what changed since the last refresh (one refresh at a time; nothing changed:
        no thread, no work beyond comparing hashes)."""
        async with self._lock:
            snapshot: _Snapshot = [(e.key, e.declaration_hash, e.declaration) for e in self.inventory.entries()]
            if {key: digest for key, digest, _ in snapshot} == {key: kept[0] for key, kept in self._own.items()}:
                return
            own, summaries = await asyncio.to_thread(self._lint, snapshot, dict(self._own))
            self._own, self._summaries = own, summaries

    def _lint(self, snapshot: _Snapshot, cached: _Own) -> tuple[_Own, dict[InventoryKey, LintSummary]]:
        own: _Own = {}
        groups: dict[tuple[str, str], list[tuple[InventoryKey, LoadedTool]]] = {}
        for key, digest, declaration in snapshot:
            tool = LoadedTool(declaration, key[1], f"/tools/{declaration.name}")
            kept = cached.get(key)
            if kept is None or kept[0] != digest:
                kept = (digest, self._lint_one(tool))
            own[key] = kept
            groups.setdefault((key[0], key[1]), []).append((key, tool))
        summaries: dict[InventoryKey, LintSummary] = {}
        for members in groups.values():
            naming = naming_findings([tool for _, tool in members])
            for key, tool in members:
                findings = own[key][1]
                summaries[key] = (
                    LintSummary.of([*naming.get(tool.declaration.name, []), *findings])
                    if findings is not None
                    else LintSummary.failed()
                )
        return own, summaries

    def _lint_one(self, tool: LoadedTool) -> list[Finding] | None:
        """The tool's own findings; None when the lint itself failed (logged, shown as failed)."""
        try:
            return lint_tool(tool, self.settings.lockdown_for(tool.declaration.name), self._lockdown)
        except Exception:
            log.exception("linting the declaration of %s failed", tool.declaration.name)
            return None

    def lint_of(self, key: InventoryKey) -> LintSummary | None:
        """None: not linted yet (declared since the last refresh)."""
        return self._summaries.get(key)

    def counts(self) -> Mapping[tuple[str, str], int]:
        """{(tool, severity): findings} for `sidecar_tool_lint_findings`: per tool name, the
        highest count over the agents and providers that declare it."""
        out: dict[tuple[str, str], int] = {}
        for key, summary in list(self._summaries.items()):
            for severity, n in summary.counts.items():
                pair = (key[2], severity)
                out[pair] = max(out.get(pair, 0), n)
        return out

    def declarations(self) -> dict[str, list[dict[str, Any]]]:
        """Per tool name, each agent's / provider's current declaration: its hash, its drift
        (the previous schema hash and how many changes were seen) and its lint summary."""
        out: dict[str, list[dict[str, Any]]] = {}
        for entry in self.inventory.entries():
            out.setdefault(entry.declaration.name, []).append(self._declaration(entry))
        return out

    def _declaration(self, entry: InventoryEntry) -> dict[str, Any]:
        lint = self.lint_of(entry.key)
        return {
            "agent": entry.agent,
            "provider": entry.provider,
            "schema_hash": entry.declaration.schema_hash,
            "previous_schema_hash": entry.previous_schema_hash,
            "changes": entry.changes,
            "last_seen": iso_time(entry.last_seen),
            "lint": lint.to_json() if lint is not None else None,
        }
