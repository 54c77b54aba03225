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
        self.lockdown = lockdown or Lockdown()

    async def on_call(self, check: CallCheck) -> Verdict | None:
        call = check.call
        declarations = check.exchange.view.declarations
        verdict = self.lockdown.check(
            call, declarations.get(call.name), self.settings.lockdown_for(call.name), declarations.keys()
        )
        check.validation = verdict
        return None if verdict.allowed else verdict
