"""Argument lockdown: tool-call arguments checked against the declared JSON Schema, exactly.

`Lockdown` is the public entry point (also used by the regression tests that
`sidecar rejections promote` generates for an agent's repository).
"""

from sidecar.lockdown.validator import CompiledSchema, Lockdown, compile_schema

__all__ = ["CompiledSchema", "Lockdown", "compile_schema"]
