"""`structuredContent` checked against the tool's `outputSchema` (MCP: a server that declares one
MUST return conforming structured results). Compiled once per schema by the lockdown cache; a
mismatch is an anomaly of the result (counted, in the policy's `tool_result` input), not a
rewrite: the client's SDK validates it too."""

from __future__ import annotations

from typing import Any

from sidecar.config import LockdownSettings
from sidecar.lockdown import Lockdown
from sidecar.mcp.wire import MISSING_STRUCTURED_CONTENT, OUTPUT_SCHEMA_VIOLATION
from sidecar.model import ToolDeclaration

# The schema as the server wrote it: no unknown-property lock (results may grow fields).
_AS_WRITTEN = LockdownSettings(reject_unknown_properties=False, assert_formats=False)


class OutputCheck:
    def __init__(self, lockdown: Lockdown | None = None) -> None:
        self.lockdown = lockdown or Lockdown(cache_bytes=4 * 1024 * 1024)

    def anomalies(self, declaration: ToolDeclaration | None, result: dict[str, Any]) -> tuple[str, ...]:
        if declaration is None or declaration.output_schema is None or result.get("isError") is True:
            return ()
        if "structuredContent" not in result:
            return (MISSING_STRUCTURED_CONTENT,)
        schema = ToolDeclaration.create(declaration.name, declaration.output_schema)
        validator = self.lockdown.compiled(schema, _AS_WRITTEN).validator
        if validator is None or not validator.is_valid(result["structuredContent"]):
            return (OUTPUT_SCHEMA_VIOLATION,)
        return ()
