"""What providers hold between turns, and the sidecar must remember too.

Three provider-held conversations, one memo (`HeldState` records in the state store):

- `turn:<id>`: one model turn of a Responses `previous_response_id` chain or of an Anthropic
  message thread, by the id the agent continues from: the conversation it belongs to (`root`),
  the id the provider continues from instead (a repair round's, `continue_from`), outputs for
  calls the agent never saw (`withheld`), the calls delivered in it (`calls`) and, for a
  chain's first turn, the session its calls were recorded under (`session`).
- `thread:<root>`: what a message thread was created with (its tools and system), which every
  `continue` leaves out.
- `conversation:<id>`: an OpenAI conversation's withheld outputs, answered on its next turn.

With a state store the memo lives there, so it survives a restart (SQLite) and is shared by
replicas (Redis), with the ledger's TTL and total bound. A bounded local copy is always kept
too: a store that is down degrades to what this process saw (counted by the store).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from sidecar.state.base import HeldCall, HeldState, StateStore, StateUnavailable

log = logging.getLogger("sidecar.state")


def turn_key(turn_id: str) -> str:
    return "turn:" + turn_id


def thread_key(root: str) -> str:
    return "thread:" + root


def conversation_key(conversation: str) -> str:
    return "conversation:" + conversation


@dataclass(slots=True)
class Continuation:
    """Where a continuation from `asked` stands: the id the provider continues from, the
    conversation's root, the outputs to add for withheld calls, the calls of that turn."""

    response_id: str
    root: str
    outputs: dict[str, str] = field(default_factory=dict)
    calls: list[HeldCall] = field(default_factory=list)
    known: bool = False  # the sidecar remembers this turn (else: `root` is a guess, the asked id)
    session: str | None = None  # a chain's first turn: the session its calls were recorded under


class Continuations:
    """The memo of what providers hold (see the module docstring)."""

    def __init__(
        self,
        capacity: int = 10_000,
        store: StateStore | None = None,
        on_state_error: Callable[[StateUnavailable], None] | None = None,
    ) -> None:
        self._entries: OrderedDict[str, HeldState] = OrderedDict()
        self._capacity = capacity
        self._store = store
        self._on_state_error = on_state_error

    def _failed(self, exc: StateUnavailable) -> None:
        log.warning("state backend unavailable for what providers hold: %s", exc)
        if self._on_state_error is not None:
            self._on_state_error(exc)

    async def put(self, key: str, state: HeldState) -> None:
        self._entries[key] = replace(state)
        self._entries.move_to_end(key)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        if self._store is not None:
            try:
                await self._store.remember_held(key, state)
            except StateUnavailable as exc:
                self._failed(exc)

    async def get(self, key: str) -> HeldState | None:
        """The store's record; this process's copy only while the store cannot answer (another
        replica may have changed or forgotten the record since)."""
        if self._store is not None:
            try:
                return await self._store.held(key)
            except StateUnavailable as exc:
                self._failed(exc)
        local = self._entries.get(key)
        return replace(local) if local is not None else None

    async def forget(self, key: str) -> None:
        self._entries.pop(key, None)
        if self._store is not None:
            try:
                await self._store.forget_held(key)
            except StateUnavailable as exc:
                self._failed(exc)

    async def resolve(self, asked: str) -> Continuation:
        """Where to continue from when the agent names `asked`, and what that turn holds."""
        shown = await self.get(turn_key(asked))
        if shown is None:
            return Continuation(asked, asked)
        actual, outputs = asked, dict(shown.withheld)
        held = shown
        if shown.continue_from and shown.continue_from != asked:
            actual = shown.continue_from
            later = await self.get(turn_key(actual))
            if later is not None:
                outputs.update(later.withheld)
                held = later
        root = held.root or shown.root or asked
        return Continuation(actual, root, outputs, list(held.calls), True, held.session or shown.session)
