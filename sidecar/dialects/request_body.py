"""Request bodies read with their tool lists shared between requests.

An agent declares the same tools on every request of a session: the benchmark's 16 KB body is
half tool list, and most of the JSON objects in it. Parsing that list again, and freeing it again
after the exchange, was the largest part of reading a request. Here the body is split into its
top-level values first (msgspec, which validates the whole body and only locates the values); a
tool list whose bytes equal those of a list read earlier is that earlier list, and every other
value is parsed afresh by orjson, as the whole body used to be. Anything unusual (a body msgspec
or orjson refuses, a number orjson cannot read) is read the old way, by `json_object`.

A shared list is one object used by every request that declares it, so it is frozen: its lists
and objects raise on any edit (a filter that narrows the tools builds a new list, as
`hide_tools` does), and `edited_shared_lists` lets the tests check, after each test, that none was
edited behind the freeze.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any, Final, TypeVar

import msgspec
import orjson
from cachetools import LRUCache

from sidecar.dialects.base import check_depth, json_object
from sidecar.model import FrozenDict, FrozenList

# The top-level keys whose values are tool lists (Chat's legacy `functions` too).
SHARED_KEYS: Final = frozenset({"tools", "functions"})

# Shared lists kept, bounded by their bytes on the wire times a factor for the parsed objects
# (a parsed JSON object takes several times its text) and the canonical copy `edited_shared_lists` checks
# against. A list larger than a tenth of the bound is read with its body, every time.
SHARED_CACHE_BYTES: Final = 32 * 1024 * 1024
_BYTES_PER_WIRE_BYTE: Final = 8

_SPLIT: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])

T = TypeVar("T")


class SharedList(FrozenList[Any]):
    """A top-level tool list shared by the requests that declare it with these bytes.

    `written` is orjson's text of it when it was frozen: the declarations cache keys on it
    (its hash is computed once), and `edited_shared_lists` compares against it. Values read
    from the list alone are kept with it (`read_once`)."""

    __slots__ = ("_read", "raw", "written")

    def __init__(self, items: Iterable[Any] = (), raw: bytes = b"") -> None:
        # Defaults: `dataclasses.asdict` copies a list by calling its type on the items.
        list.__init__(self, items)
        self.raw = raw
        self.written = orjson.dumps(self)
        self._read: dict[Hashable, Any] = {}


def read_once(value: Any, key: Hashable, read: Callable[[Any], T]) -> T:
    """`read(value)`, computed once per shared list (under `key`, one per kind of reading) and
    afresh for any other value. `read` must depend on the list alone, and its result must be
    immutable: every request that declares the list gets the same object."""
    if not isinstance(value, SharedList):
        return read(value)
    known = value._read
    if key not in known:
        known[key] = read(value)
    return known[key]  # type: ignore[no-any-return]


_SHARED: LRUCache[bytes, SharedList] = LRUCache(
    SHARED_CACHE_BYTES, getsizeof=lambda shared: _BYTES_PER_WIRE_BYTE * len(shared.raw)
)


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return FrozenDict({key: _frozen(item) for key, item in value.items()})
    if isinstance(value, list):
        return FrozenList(_frozen(item) for item in value)
    return value


def request_object(body: bytes) -> dict[str, Any] | None:
    """The request body as a JSON object; None for anything else. Raises TooDeep (see `loads`).

    The same value `json_object` reads, except that a top-level tool list seen before (the
    same bytes) is the shared, frozen list read then."""
    try:
        parts = _SPLIT.decode(body)
    except (msgspec.DecodeError, RecursionError):  # not an object msgspec reads (or too deep for it)
        return json_object(body)
    hits = ((key, _SHARED.get(bytes(parts[key]))) for key in SHARED_KEYS.intersection(parts))
    shared = {key: hit for key, hit in hits if hit is not None}
    if not shared:
        return _read_and_share(body, parts)
    value: dict[str, Any] = {}
    fresh: dict[str, Any] = {}
    try:
        for key, raw in parts.items():
            if key in shared:
                value[key] = shared[key]
            else:
                value[key] = fresh[key] = orjson.loads(memoryview(raw))
    except orjson.JSONDecodeError:  # e.g. 1e400, which only the stdlib fallback reads
        return json_object(body)
    # The shared lists passed the depth check at this same place (a top-level value) when
    # they were first read; the values read afresh are checked here.
    check_depth(body, fresh)
    return value


def _read_and_share(body: bytes, parts: dict[str, msgspec.Raw]) -> dict[str, Any] | None:
    """Read the whole body (`json_object`), and share its tool lists with later requests."""
    value = json_object(body)
    if value is None:
        return None
    for key in SHARED_KEYS.intersection(parts):
        items = value.get(key)
        raw = bytes(parts[key])
        if isinstance(items, list) and _BYTES_PER_WIRE_BYTE * len(raw) <= SHARED_CACHE_BYTES // 10:
            value[key] = _SHARED[raw] = SharedList([_frozen(item) for item in items], raw)
    return value


def edited_shared_lists() -> list[bytes]:
    """The shared lists that no longer write back to the text they had when frozen (empty if
    none was edited): the tests' check that nothing edits a shared list behind its freeze."""
    return [shared.raw for shared in list(_SHARED.values()) if orjson.dumps(shared) != shared.written]
