"""Declared tool and argument lockdown: the first gate every call passes."""

from __future__ import annotations

from sidecar.config import Settings
from sidecar.exchange.filters import Filter
from sidecar.exchange.state import CallCheck
from sidecar.lockdown import Lockdown
from sidecar.model import FieldError, ToolCall, ToolDeclaration, ToolKind, Verdict


class ArgumentsFilter(Filter):
    """Unknown tools and arguments that do not match the declared schema exactly. Tools
    declared without a JSON Schema (custom grammar tools, provider-defined tools) are checked
    for being declared and of the kind called; their input is the policy's to judge.

    Critical: a call whose arguments could not be checked is refused, never delivered.
    """

    name = "arguments"
    critical = True

    def __init__(self, settings: Settings, lockdown: Lockdown | None = None) -> None:
        self.settings = settings
        limits = settings.limits
        self.lockdown = lockdown or Lockdown(limits.schema_cache_bytes, limits.max_schema_bytes)

    async def on_call(self, check: CallCheck) -> Verdict | None:
        call = check.call
        if not call.kind.runs_on_client:
            return None  # a server call: the provider ran it; the policy decides what it means
        declarations = check.exchange.view.declarations
        declaration = declarations.get(call.name)
        if declaration is not None and _kind_mismatch(call, declaration):
            verdict = Verdict.reject(
                "unknown_tool",
                [
                    FieldError(
                        "",
                        f"tool {call.name!r} is declared as a {declaration.kind.value} tool but was called as "
                        f"{call.kind.value} ({call.item_type or 'call'})",
                        f"a call of the declared {declaration.kind.value} tool",
                        "other",
                    )
                ],
            )
        elif declaration is not None and not declaration.has_schema and call.arguments is not None:
            verdict = Verdict.allow()  # no JSON Schema (grammar, provider-defined): the policy decides
        else:
            rules = self.settings.lockdown_for(call.name)
            if declaration is not None and rules.enabled:
                await self.lockdown.prepare(declaration, rules)  # a large schema compiles off the loop
            verdict = self.lockdown.check(call, declaration, rules, declarations.keys())
        check.validation = verdict
        return None if verdict.allowed else verdict


def _kind_mismatch(call: ToolCall, declaration: ToolDeclaration) -> bool:
    """A call whose wire says what kind of tool it is must match the declared kind. A plain
    call (`tool_use`, `function_call`) may be any tool with arguments: Anthropic's `tool_use`
    carries its defined tools (bash...) too; a custom tool is never called with arguments."""
    if call.kind is ToolKind.FUNCTION:
        return declaration.kind is ToolKind.CUSTOM
    return call.kind is not declaration.kind
