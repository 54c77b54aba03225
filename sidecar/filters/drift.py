"""The drift filter: every request's declarations feed the tool inventory (`GET /v1/tools`);
a changed declaration is counted and logged with its diff, and its previous schema hash goes
to the policy input (`input.tool.previous_schema_hash`). See `sidecar/schemas/drift.py`.

Best-effort, after the telemetry filter (which admits the declared names as metric labels).
"""

from __future__ import annotations

from sidecar.exchange.filters import Filter
from sidecar.exchange.state import Exchange, ExchangeKey
from sidecar.schemas.drift import DriftWatch

# {tool name: schema hash before its latest change}, for this request's declarations.
_PREVIOUS: ExchangeKey[dict[str, str]] = ExchangeKey("drift.previous_schema_hashes")


def previous_schema_hash(ex: Exchange, tool: str) -> str | None:
    """The tool's schema hash before its latest change; None when this sidecar has seen only
    one schema for it (or does not know it)."""
    previous = ex.get(_PREVIOUS)
    return previous.get(tool) if previous is not None else None


class DriftFilter(Filter):
    name = "drift"

    def __init__(self, watch: DriftWatch) -> None:
        self.watch = watch

    async def on_request(self, ex: Exchange) -> None:
        if ex.view.declarations:
            previous = self.watch.observe(ex.declared_by, ex.view.declarations)
            if previous:
                ex.put(_PREVIOUS, previous)
