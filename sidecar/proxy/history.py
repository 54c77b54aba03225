"""Listings of stored items (docs/coverage.md, HISTORY rows): the refused calls are removed.

`GET /v1/responses/{id}/input_items`, `GET /v1/conversations/{id}/items[/{item_id}]` and
`POST /v1/responses/compact` return items the provider keeps, calls among them. A call the
sidecar refused is still in the provider's copy: it is removed from the listing, by call id
(`RefusedCalls`). Every other item passes as it came. A listing the sidecar cannot read is
refused, not forwarded.
"""

from __future__ import annotations

from typing import Any

import orjson

from sidecar.dialects import OPENAI_RESPONSES
from sidecar.dialects.base import TooDeep, as_list, loads
from sidecar.model import ItemKind, RefusalReason
from sidecar.state.refused import RefusedCalls

# Where a listing keeps its items: lists (`data`), a compaction (`output`).
_ITEM_KEYS = ("data", "output")


class Unscreenable(Exception):
    def __init__(self, reason: RefusalReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class HistoryScreen:
    def __init__(self, refused: RefusedCalls) -> None:
        self.refused = refused

    async def screen(self, raw: bytes) -> bytes:
        """The listing without the calls the sidecar refused (the same bytes when none).
        Raises Unscreenable, or StateUnavailable (the caller fails closed)."""
        try:
            body = loads(raw)
        except (TooDeep, ValueError):
            raise Unscreenable(RefusalReason.FRAMING, "the upstream listing is not JSON the sidecar can read") from None
        if not isinstance(body, dict):
            raise Unscreenable(RefusalReason.FRAMING, "the upstream listing is not a JSON object")
        if _call_id(body) is not None:  # one item, read on its own
            refused = await self.refused.refused([str(_call_id(body))])
            if refused:
                raise Unscreenable(RefusalReason.UNSUPPORTED_PATH, "this item is a call the sidecar refused")
            return raw
        key = next((k for k in _ITEM_KEYS if isinstance(body.get(k), list)), None)
        if key is None:
            return raw
        items = as_list(body[key])
        ids = [str(i) for i in (_call_id(item) for item in items) if i is not None]
        refused = await self.refused.refused(ids) if ids else set()
        if not refused:
            return raw
        kept = [item for item in items if _call_id(item) not in refused]
        return orjson.dumps({**body, key: kept})


def _call_id(item: Any) -> str | None:
    """The call id of an item the agent would run (None for everything else)."""
    if not isinstance(item, dict):
        return None
    reply = OPENAI_RESPONSES.read_reply({"output": [item]})
    calls = [i.call for i in reply.items if i.kind is ItemKind.CALL and i.call is not None]
    return calls[0].id if calls and calls[0].kind.runs_on_client and calls[0].id else None
