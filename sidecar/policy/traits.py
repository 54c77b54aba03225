"""Per-tool traits (`side_effects`, `repeatable`): one source of truth, the policy data.

The policy reads `data.sidecar.tools.<name>` (then `data.sidecar.unlisted_tool`, then its
built-in default: side-effecting, not repeatable), and so does every guard, through here: the
replay filter and the policy can never disagree about a tool. The configuration's
`tools.<name>.side_effects` / `repeatable` are not a second source: they are written into that
data document before it is compiled (`data_overlay`), so the policy sees them too. With an OPA
server the data is OPA's own files, which the sidecar cannot change: configuration traits are
then refused at start-up (`Settings` validation).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sidecar.config import Settings
from sidecar.policy.engine import merge_data

log = logging.getLogger("sidecar.policy")


def data_overlay(settings: Settings) -> dict[str, Any]:
    """The configuration's per-tool traits as a policy data document (empty if none)."""
    tools: dict[str, dict[str, bool]] = {}
    for name, tool in settings.tools.items():
        traits = {
            k: v for k, v in (("side_effects", tool.side_effects), ("repeatable", tool.repeatable)) if v is not None
        }
        if traits:
            tools[name] = traits
    return {"sidecar": {"tools": tools}} if tools else {}


# The shipped library's default for a tool nobody described (`tool_settings` in sidecar.rego).
UNLISTED_DEFAULTS = {"side_effects": True, "repeatable": False}


class ToolTraits:
    """Per-tool `side_effects` and `repeatable`, read from the policy data in force."""

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
        return cls(settings, merge_data(data, data_overlay(settings)))

    def update(self, data: Mapping[str, Any]) -> None:
        """New policy data (the whole `data` document), e.g. after a policy reload."""
        found = data.get("sidecar")
        sidecar: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        tools = sidecar.get("tools")
        unlisted = sidecar.get("unlisted_tool")
        self._tools = tools if isinstance(tools, Mapping) else {}
        self._unlisted = unlisted if isinstance(unlisted, Mapping) else {}

    def _data(self, tool: str, key: str) -> bool:
        """As the shipped rules read it: the tool's entry if it has one (even without this
        key), else `unlisted_tool`, else the built-in default."""
        default = UNLISTED_DEFAULTS[key]
        entry = self._tools.get(tool)
        source = entry if isinstance(entry, Mapping) else self._unlisted
        value = source.get(key, default)
        return value if isinstance(value, bool) else default

    def side_effects(self, tool: str) -> bool:
        return self._data(tool, "side_effects")

    def repeatable(self, tool: str) -> bool:
        return self._data(tool, "repeatable")
