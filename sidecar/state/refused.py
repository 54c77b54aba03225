"""What the sidecar refused or withheld, remembered where a provider keeps the response.

The Responses API stores every response and hands it out again: `GET /v1/responses/{id}`,
the stream resume, the input items of later responses, conversation items. A call the sidecar
refused (answered in a repair round, blocked, withdrawn, or not run with a refused sibling) is
still in the provider's copy; it must never reach the agent through one of those paths.

Kept in the state store as held records (`remember_held` / `held`, keys of their own): by
response id (a read-back of that response refuses them again) and by call id (a listing
removes them).
"""

from __future__ import annotations

from collections.abc import Iterable

from sidecar.state.base import HeldState, StateStore

_BY_RESPONSE = "\x00refused-response:"
_BY_CALL = "\x00refused-call:"


class RefusedCalls:
    def __init__(self, store: StateStore) -> None:
        self.store = store

    async def remember(self, response_id: str, call_ids: Iterable[str]) -> None:
        """Raises StateUnavailable (the caller decides how much that matters)."""
        ids = [c for c in call_ids if c]
        if not ids:
            return
        key = _BY_RESPONSE + response_id
        known = await self.store.held(key)
        refused = {**(known.withheld if known is not None else {}), **dict.fromkeys(ids, "refused")}
        await self.store.remember_held(key, HeldState(withheld=refused))
        for call_id in ids:
            await self.store.remember_held(_BY_CALL + call_id, HeldState(root=response_id))

    async def for_response(self, response_id: str) -> set[str]:
        """The call ids refused in this response. Raises StateUnavailable."""
        held = await self.store.held(_BY_RESPONSE + response_id)
        return set(held.withheld) if held is not None else set()

    async def refused(self, call_ids: Iterable[str]) -> set[str]:
        """Which of these call ids the sidecar refused (in any response). Raises StateUnavailable."""
        found: set[str] = set()
        for call_id in set(call_ids):
            if await self.store.held(_BY_CALL + call_id) is not None:
                found.add(call_id)
        return found
