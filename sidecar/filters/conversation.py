"""What a stateful provider remembers, and the agent's next turn must agree with.

The Responses API with `store` keeps every response by id; the agent's next turn names one
(`previous_response_id`) and sends only new items. The sidecar's edits must stay consistent
with what the provider holds:

- calls the sidecar removed from a reply (blocked, withdrawn) are still in the provider's
  copy, so the next turn must answer them: their outputs are remembered (`on_checked`) and
  added to the agent's next request (`on_request`);
- a stream keeps the response id it announced first, while a repair round produced a newer
  response: the chain must continue from the newer one (`on_delivered` remembers the alias,
  `on_request` follows it);
- later turns of a chain carry no first user message, so a derived session would change:
  the session is remembered by response id and restored (`on_request`).

First in the chain: the session it restores is the one every later filter works with.
Best-effort: the memo is in the state store (counted when it fails); a lost entry makes the
provider refuse the agent's next turn (a visible error), never lets a call through.
"""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.exchange.filters import Filter
from sidecar.exchange.state import Action, CallCheck, Exchange, ExchangeKey
from sidecar.identity import is_derived
from sidecar.model import NOT_RUN_PAYLOAD, Reply, ToolCall
from sidecar.state.continuations import Continuations


@dataclass(slots=True)
class _Replies:
    first: str | None = None  # id of the upstream's first reply
    last: str | None = None  # id of the latest reply (a repair round's)


_REPLIES: ExchangeKey[_Replies] = ExchangeKey("conversation.replies")


class ProviderStateFilter(Filter):
    name = "conversation"

    def __init__(self, continuations: Continuations) -> None:
        self.continuations = continuations

    async def on_request(self, ex: Exchange) -> None:
        previous = ex.view.previous_response_id
        if not previous or not ex.dialect.server_side_state:
            return
        chain = await self.continuations.resolve(previous)
        if chain.response_id != previous:
            ex.request = {**ex.request, "previous_response_id": chain.response_id}
        if chain.outputs:
            ex.request = ex.dialect.add_withheld_outputs(ex.request, chain.outputs)
        if chain.session and is_derived(ex.session):
            ex.session = chain.session

    async def on_reply(self, ex: Exchange, reply: Reply) -> None:
        replies = ex.setdefault(_REPLIES, _Replies)
        response_id = ex.dialect.response_id(reply)
        if replies.first is None:
            replies.first = response_id
        replies.last = response_id

    async def on_checked(self, ex: Exchange, checks: list[CallCheck]) -> None:
        """A turn removed from the agent's view is still the provider's: remember its answers."""
        if not ex.dialect.server_side_state or not any(c.action in (Action.BLOCKED, Action.WITHDRAWN) for c in checks):
            return
        replies = ex.get(_REPLIES)
        if replies is None or replies.last is None:
            return
        outputs: dict[str, str] = {}
        for c in checks:
            payload = c.verdict.model_payload() if not c.verdict.allowed else NOT_RUN_PAYLOAD
            answer = ex.dialect.withheld_output(c.call, payload)  # in kind; none for server calls
            if answer is not None:
                outputs[c.call.id] = answer
        if outputs:
            await self.continuations.withhold(replies.last, outputs)

    async def on_delivered(self, ex: Exchange, reply: Reply, calls: list[ToolCall]) -> None:
        if not ex.dialect.server_side_state:
            return
        shown = ex.dialect.response_id(reply)
        if not shown:
            return
        if is_derived(ex.session):
            await self.continuations.remember_session(shown, ex.session)
        replies = ex.get(_REPLIES)
        if replies is not None and replies.last and replies.last != shown:
            await self.continuations.alias(shown, replies.last)
