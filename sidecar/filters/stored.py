"""Stored responses read back: a call the sidecar refused is never handed out again.

The provider keeps what the model first wrote (Responses `store`), so a call the sidecar
refused is still there when the agent reads the response back (`GET /v1/responses/{id}`,
the stream resume, `POST …/cancel`). This filter remembers, for every response of a stateful
dialect, the calls that did not reach the agent (`on_checked`), and refuses them again when
that response is read back (`on_call`), whatever the other guards would say now: an approval
granted since, a ledger that forgot. A read-back is never repaired (docs/coverage.md): the
refused calls are removed and explained.

First of the call checks. Critical: a read-back whose memo cannot be read is refused (fail
closed); a memo that cannot be written is logged and counted by the store (the read-back then
still runs every other guard).
"""

from __future__ import annotations

import logging

from sidecar.exchange.filters import Filter
from sidecar.exchange.state import Action, CallCheck, Exchange, ExchangeKey, Origin
from sidecar.model import Reply, Verdict, VerdictKind
from sidecar.state import StateUnavailable
from sidecar.state.refused import RefusedCalls

log = logging.getLogger("sidecar.coverage")

_NOT_DELIVERED = (Action.REPAIR, Action.BLOCKED, Action.WITHDRAWN, Action.NOT_RUN)
_LATEST: ExchangeKey[str] = ExchangeKey("stored.reply")  # id of the reply being judged
_REFUSED: ExchangeKey[set[str]] = ExchangeKey("stored.refused")  # call ids refused before


class StoredRepliesFilter(Filter):
    name = "stored_replies"
    critical = True

    def __init__(self, refused: RefusedCalls) -> None:
        self.refused = refused

    async def on_reply(self, ex: Exchange, reply: Reply) -> None:
        response_id = ex.model_dialect.response_id(reply)
        if response_id is None or not ex.dialect.server_side_state:
            return
        ex.put(_LATEST, response_id)
        if ex.origin is Origin.RETRIEVE:
            ex.put(_REFUSED, await self.refused.for_response(response_id))  # raises: fail closed

    async def on_call(self, check: CallCheck) -> Verdict | None:
        earlier = check.exchange.get(_REFUSED)
        if earlier is None or check.call.id not in earlier:
            return None
        reason = (
            f"the sidecar refused {check.call.name} ({check.call.id}) when this response was created; "
            "a stored response read back never hands it out"
        )
        return Verdict(VerdictKind.DENY, "denied", reasons=[reason], retryable=False)

    async def on_checked(self, ex: Exchange, checks: list[CallCheck]) -> None:
        response_id = ex.get(_LATEST)
        held = [c.call.id for c in checks if c.action in _NOT_DELIVERED]
        if response_id is None or not held:
            return
        try:
            await self.refused.remember(response_id, held)
        except StateUnavailable as exc:
            log.warning("could not remember the calls refused in %s: %s", response_id, exc)
