"""Per-tool traits the guards need: does a tool have side effects, may it repeat?

From the configuration's `tools.<name>`, then the policy data (`data.sidecar.tools.<name>`),
then, for an MCP tool and only with `mcp.trust_annotations`, the server's annotations
(`readOnlyHint`, `idempotentHint`), then `data.sidecar.unlisted_tool`, then defaults.
Annotations are hints from the server: the MCP specification tells clients not to rely on
them from servers they do not trust, so by default they reach the policy input only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sidecar.config import Settings

log = logging.getLogger("sidecar.policy")


class ToolTraits:
    """Per-tool `side_effects` and `repeatable`: config, then data.json, then defaults."""

    def __init__(self, settings: Settings, data: Mapping[str, Any] | None = None) -> None:
        self.settings = settings
        self._tools: Mapping[str, Any] = {}
        self._unlisted: Mapping[str, Any] = {}
        self.update(data or {})

    @classmethod
    def from_settings(cls, settings: Settings) -> ToolTraits:
        """Reads the policy data of `settings.policies` (unset: the packaged default) once, at startup."""
        data: dict[str, Any] = {}
        from sidecar.policy.loader import PolicyLoadError, read_bundle

        try:
            data = read_bundle(settings.policies).data
        except PolicyLoadError as exc:
            log.warning("tool traits: cannot read %s (%s); using config and defaults", settings.policies, exc)
        return cls(settings, data)

    def update(self, data: Mapping[str, Any]) -> None:
        """New policy data (the whole `data` document), e.g. after a policy reload."""
        found = data.get("sidecar")
        sidecar: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        tools = sidecar.get("tools")
        unlisted = sidecar.get("unlisted_tool")
        self._tools = tools if isinstance(tools, Mapping) else {}
        self._unlisted = unlisted if isinstance(unlisted, Mapping) else {}

    def _data(self, tool: str, key: str, default: bool, hinted: bool | None) -> bool:
        entry = self._tools.get(tool)
        if isinstance(entry, Mapping) and key in entry:
            value = entry[key]
        elif hinted is not None and self.settings.mcp.trust_annotations:
            return hinted
        else:
            value = self._unlisted.get(key, default)
        return value if isinstance(value, bool) else default

    def side_effects(self, tool: str, annotations: Mapping[str, Any] | None = None) -> bool:
        configured = self.settings.tool(tool).side_effects
        if configured is not None:
            return configured
        read_only = annotations.get("readOnlyHint") if annotations else None
        hinted = (not read_only) if isinstance(read_only, bool) else None
        return self._data(tool, "side_effects", False, hinted)

    def repeatable(self, tool: str, annotations: Mapping[str, Any] | None = None) -> bool:
        configured = self.settings.tool(tool).repeatable
        if configured is not None:
            return configured
        idempotent = annotations.get("idempotentHint") if annotations else None
        return self._data(tool, "repeatable", False, idempotent if isinstance(idempotent, bool) else None)
