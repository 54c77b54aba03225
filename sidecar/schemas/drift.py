"""Drift: a tool's declaration changed in live traffic. Counted, logged with a readable diff,
and handed to the policy input as `input.tool.previous_schema_hash`.

The request path calls `DriftWatch.observe` once per agent request (the drift filter,
`sidecar/filters/drift.py`); everything it does is in memory and bounded by the inventory.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from sidecar.model import ToolDeclaration
from sidecar.schemas.diff import diff_declarations
from sidecar.schemas.inventory import Drift, ToolInventory
from sidecar.telemetry.logs import log_event
from sidecar.telemetry.metrics import Metrics

log = logging.getLogger("sidecar.schemas")

# A rewrite of a large schema can differ in hundreds of places; one log line stays readable.
MAX_DIFF_LINES = 50


class DriftWatch:
    """Feeds the inventory and reports each changed declaration: the schema-change counter
    and one `tool_schema_change` log line carrying the diff."""

    def __init__(self, inventory: ToolInventory, metrics: Metrics, agent: str) -> None:
        self.inventory = inventory
        self.metrics = metrics
        self.agent = agent

    def observe(self, provider: str, declarations: Mapping[str, ToolDeclaration]) -> dict[str, str]:
        """Record the request's declarations; returns {tool: schema hash before its latest
        change} for the tools that have one."""
        recorded = self.inventory.record(self.agent, provider, declarations)
        for drift in recorded.drifts:
            self.metrics.schema_change(drift.after.name)
            self._log(drift)
        return dict(recorded.previous_schema_hashes)

    def _log(self, drift: Drift) -> None:
        lines = [change.text() for change in diff_declarations(drift.before, drift.after)]
        shown = lines[:MAX_DIFF_LINES]
        if len(lines) > MAX_DIFF_LINES:
            shown.append(f"… and {len(lines) - MAX_DIFF_LINES} more change(s)")
        log_event(
            "tool_schema_change",
            level=logging.WARNING,
            log=log,
            agent=drift.agent,
            provider=drift.provider,
            tool=drift.after.name,
            previous_schema_hash=drift.before.schema_hash,
            schema_hash=drift.after.schema_hash,
            previous_declaration_hash=drift.before_hash,
            declaration_hash=drift.after_hash,
            changes=len(lines),
            diff=shown,
        )
