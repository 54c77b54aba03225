"""Declared tool and argument lockdown: the first gate every call passes."""

from __future__ import annotations

from sidecar.config import Settings
from sidecar.exchange.filters import Filter
from sidecar.exchange.state import CallCheck
from sidecar.lockdown import Lockdown
from sidecar.model import Verdict


class ArgumentsFilter(Filter):
    """Unknown tools and arguments that do not match the declared schema exactly.

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
        declarations = check.exchange.view.declarations
        declaration = declarations.get(call.name)
        rules = self.settings.lockdown_for(call.name)
        if declaration is not None and rules.enabled:
            await self.lockdown.prepare(declaration, rules)  # a large schema compiles off the loop
        verdict = self.lockdown.check(call, declaration, rules, declarations.keys())
        check.validation = verdict
        return None if verdict.allowed else verdict
