"""Addons observe named events of an exchange, the way mitmproxy addons hook events.

Telemetry and state are addons: adding a concern means adding a class. An addon that fails
is logged and skipped; it never breaks the proxied request.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from sidecar.exchange.state import CallCheck, Exchange
from sidecar.model import Reply, ToolCall

log = logging.getLogger("sidecar.addons")


class Addon:
    name = "addon"

    async def request(self, exchange: Exchange) -> None:
        """A parsed request is about to go upstream (results matched, tools declared)."""

    async def replied(self, exchange: Exchange, reply: Reply) -> None:
        """A model reply was read: the agent's own, then one per repair round."""

    async def checked(self, exchange: Exchange, checks: list[CallCheck]) -> None:
        """Calls of one model turn were checked; `check.action` says what was done."""

    async def delivered(self, exchange: Exchange, calls: list[ToolCall]) -> None:
        """These calls reached the agent."""

    async def repaired(self, exchange: Exchange, outcome: str) -> None:
        """A repair sequence ended: corrected or exhausted."""

    async def upstream(self, exchange: Exchange, status: int | None, seconds: float) -> None:
        """One upstream request (the agent's or a repair round) finished."""

    async def done(self, exchange: Exchange, status: int, overhead_s: float, stream: bool) -> None:
        """The agent's response was sent."""


class Addons:
    def __init__(self, addons: Sequence[Addon] = ()) -> None:
        self.addons = list(addons)

    def add(self, addon: Addon) -> None:
        self.addons.append(addon)

    async def _each(self, hook: str, call: Callable[[Addon], Awaitable[None]]) -> None:
        for addon in self.addons:
            try:
                await call(addon)
            except Exception:
                log.exception("addon %s failed in %s", addon.name, hook)

    async def request(self, exchange: Exchange) -> None:
        await self._each("request", lambda a: a.request(exchange))

    async def replied(self, exchange: Exchange, reply: Reply) -> None:
        await self._each("replied", lambda a: a.replied(exchange, reply))

    async def checked(self, exchange: Exchange, checks: list[CallCheck]) -> None:
        await self._each("checked", lambda a: a.checked(exchange, checks))

    async def delivered(self, exchange: Exchange, calls: list[ToolCall]) -> None:
        if calls:
            await self._each("delivered", lambda a: a.delivered(exchange, calls))

    async def repaired(self, exchange: Exchange, outcome: str) -> None:
        await self._each("repaired", lambda a: a.repaired(exchange, outcome))

    async def upstream(self, exchange: Exchange, status: int | None, seconds: float) -> None:
        await self._each("upstream", lambda a: a.upstream(exchange, status, seconds))

    async def done(self, exchange: Exchange, status: int, overhead_s: float, stream: bool) -> None:
        await self._each("done", lambda a: a.done(exchange, status, overhead_s, stream))
