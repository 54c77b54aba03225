"""Declared-tool and argument lockdown guard: the first gate every call passes."""

from __future__ import annotations

from sidecar.config import Settings
from sidecar.exchange.state import CallCheck
from sidecar.guards.base import Guard
from sidecar.lockdown.validator import Lockdown
from sidecar.model import Verdict


class ArgumentsGuard(Guard):
    """Unknown tools and arguments that do not match the declared schema exactly."""

    name = "arguments"

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
        return verdict
