"""Responses API chains: what the provider remembers by response id, and the sidecar must too."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from sidecar.state.base import StateStore, StateUnavailable

log = logging.getLogger("sidecar.state")


@dataclass(slots=True)
class Continuation:
    response_id: str
    outputs: dict[str, str] = field(default_factory=dict)
    session: str | None = None


class Continuations:
    """What a stateful provider remembers that the agent never saw, keyed by response id.

    The Responses API with `store` keeps the original output. The agent's next turn
    (`previous_response_id`) must still answer calls the sidecar withheld, and when a repair
    round produced a newer response, the chain must continue from that one.

    With a state store the memo lives there (`remember_withheld` / `withheld_for`), so a chain
    survives a restart (SQLite) and continues on another replica (Redis). A bounded local
    copy is always kept too: a store that is down degrades to what this process saw.
    """

    _ALIAS = "\x00continue-from"
    _SESSION = "\x00session"

    def __init__(
        self,
        capacity: int = 10_000,
        store: StateStore | None = None,
        on_state_error: Callable[[StateUnavailable], None] | None = None,
    ) -> None:
        self._entries: OrderedDict[str, dict[str, str]] = OrderedDict()
        self._capacity = capacity
        self._store = store
        self._on_state_error = on_state_error

    def _failed(self, exc: StateUnavailable) -> None:
        log.warning("state backend unavailable for the Responses memo: %s", exc)
        if self._on_state_error is not None:
            self._on_state_error(exc)

    async def _put(self, response_id: str, entry: dict[str, str]) -> None:
        merged = {**self._entries.get(response_id, {}), **entry}
        self._entries[response_id] = merged
        self._entries.move_to_end(response_id)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        if self._store is not None:
            try:
                stored = await self._store.withheld_for(response_id)
                await self._store.remember_withheld(response_id, {**stored, **merged})
            except StateUnavailable as exc:
                self._failed(exc)

    async def _get(self, response_id: str) -> dict[str, str]:
        local = self._entries.get(response_id, {})
        if self._store is None:
            return dict(local)
        try:
            return {**local, **await self._store.withheld_for(response_id)}
        except StateUnavailable as exc:
            self._failed(exc)
            return dict(local)

    async def withhold(self, response_id: str, outputs: dict[str, str]) -> None:
        await self._put(response_id, outputs)

    async def alias(self, shown_id: str, actual_id: str) -> None:
        await self._put(shown_id, {self._ALIAS: actual_id})

    async def remember_session(self, response_id: str, session: str) -> None:
        """Later turns of a chain carry only new items: the session must come from here."""
        await self._put(response_id, {self._SESSION: session})

    async def resolve(self, response_id: str) -> Continuation:
        """Where to continue from, the outputs to add for withheld calls, and the session."""
        entry = await self._get(response_id)
        actual = entry.pop(self._ALIAS, response_id)
        session = entry.pop(self._SESSION, None)
        if actual != response_id:
            later = await self._get(actual)
            session = later.pop(self._SESSION, session)
            entry.update({k: v for k, v in later.items() if k != self._ALIAS})
        return Continuation(actual, entry, session)
