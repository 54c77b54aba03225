"""What the policy data says about inspecting a tool's results.

From `data.sidecar` (the same data.json the Rego rules read, so a tool's traits live in one
place): `tools.<name>.untrusted` (prompt-injection markers are looked for in its results),
`tools.<name>.max_result_bytes` (above it a result is `oversized_result`), read as the
shipped rules read a tool's settings: the tool's entry if it has one, else `unlisted_tool`;
then `results.max_result_bytes`, then the defaults below; `results.injection_markers` /
`extra_injection_markers` (markers.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sidecar.inspection.markers import MarkerSet

DEFAULT_MAX_RESULT_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class ToolProfile:
    """How one tool's results are inspected."""

    untrusted: bool = False
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _size(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class ResultRules:
    """Tool profiles and markers from the policy data; `update` on every policy reload."""

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self.markers = MarkerSet.from_data(None)
        self._tools: Mapping[str, Any] = {}
        self._unlisted: Mapping[str, Any] = {}
        self._default_max = DEFAULT_MAX_RESULT_BYTES
        if data is not None:
            self.update(data)

    def update(self, data: Mapping[str, Any]) -> None:
        """New policy data (the whole `data` document). Raises MarkerError (the previous
        rules stay in force) when its markers cannot be used."""
        sidecar = _mapping(data.get("sidecar"))
        results = _mapping(sidecar.get("results"))
        markers = MarkerSet.from_data(dict(results))
        self.markers = markers
        self._tools = _mapping(sidecar.get("tools"))
        self._unlisted = _mapping(sidecar.get("unlisted_tool"))
        self._default_max = _size(results.get("max_result_bytes")) or DEFAULT_MAX_RESULT_BYTES

    def _setting(self, tool: str, key: str) -> Any:
        entry = self._tools.get(tool)
        return (entry if isinstance(entry, Mapping) else self._unlisted).get(key)

    def profile(self, tool: str) -> ToolProfile:
        untrusted = self._setting(tool, "untrusted") is True
        limit = _size(self._setting(tool, "max_result_bytes"))
        return ToolProfile(untrusted, self._default_max if limit is None else limit)
