"""What each MCP server listed, per caller: the declarations a `tools/call` is judged against.

A model request declares its tools itself; an MCP `tools/call` does not, so the sidecar keeps
the latest `tools/list` answer of each server, per caller credentials (a server may show each
caller other tools), and judges calls against it. A listing of several pages (`nextCursor`)
is put together page by page; a first page starts a new listing. When the sidecar has no
listing for a call (after a restart), the runner asks the server itself before judging.

Bounded: the least recently used listings go first (`mcp.max_catalogs`).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sidecar.model import ToolDeclaration

# Headers that carry a caller's credentials to an MCP server (hashed into the key, never kept).
_CREDENTIAL_HEADERS = ("authorization", "x-api-key", "cookie")


def caller_key(server: str, headers: Mapping[str, str]) -> tuple[str, str]:
    """(server, hash of the caller's credentials): whose listing a call is judged against."""
    digest = hashlib.sha256()
    for name in _CREDENTIAL_HEADERS:
        digest.update(name.encode() + b"\0" + (headers.get(name) or "").encode() + b"\0")
    return server, digest.hexdigest()[:32]


@dataclass(slots=True)
class Listing:
    """One server's tools as it listed them to one caller (before the policy hides any: hiding
    is decided again for every exchange, as on the model path)."""

    declarations: dict[str, ToolDeclaration] = field(default_factory=dict)


class Catalog:
    def __init__(self, max_entries: int = 256) -> None:
        self.max_entries = max_entries
        self._listings: OrderedDict[tuple[str, str], Listing] = OrderedDict()

    def get(self, key: tuple[str, str]) -> Listing | None:
        listing = self._listings.get(key)
        if listing is not None:
            self._listings.move_to_end(key)
        return listing

    def record(self, key: tuple[str, str], page: dict[str, ToolDeclaration], first_page: bool) -> Listing:
        """A `tools/list` page as the server sent it."""
        listing = self._listings.get(key)
        if listing is None or first_page:
            listing = Listing()
            self._listings[key] = listing
        listing.declarations.update(page)
        self._listings.move_to_end(key)
        while len(self._listings) > self.max_entries:
            self._listings.popitem(last=False)
        return listing

    def forget(self, key: tuple[str, str]) -> None:
        self._listings.pop(key, None)


def is_first_page(params: dict[str, Any]) -> bool:
    return not isinstance(params.get("cursor"), str)
