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

The split still reads every byte, the known tool list's too (112 k of the benchmark body's 312 k
instructions). So a body is first tried another way (`_spliced`): where its `"tools":` value
starts with the bytes of a shared list, those bytes are swapped for a placeholder string and the
rest is parsed by orjson. The result counts only if the placeholder came back as the top-level
`tools` value, and nowhere else: the placeholder holds a random part made when the process
starts, which no body can hold unless its sender knows it, and it must occur in the spliced text
exactly once. A valid JSON value swapped for another leaves the text valid, and orjson read the
list's bytes on their own when it was shared: so the body is what `loads` reads, with the shared
list in place of a fresh one. Anything else (no such key, another list, a parse error, Chat's
legacy `functions` beside the tools) goes the split way. The benchmark body, read again: 312 k
-> 184 k instructions.
"""

from __future__ import annotations

import secrets
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

    __slots__ = ("_read", "raw", "spliceable", "written")

    def __init__(self, items: Iterable[Any] = (), raw: bytes = b"", spliceable: bool = False) -> None:
        # Defaults: `dataclasses.asdict` copies a list by calling its type on the items.
        list.__init__(self, items)
        self.raw = raw
        # orjson reads `raw` on its own: a body holding it can be read by `_spliced`.
        self.spliceable = spliceable
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


# The bytes of a shared list that `_spliced` compares first, to find the candidates quickly. A
# list shorter than this is never found that way (the body's bytes after it differ): it is read
# with the split, as before, and costs little to read.
_HEAD_BYTES: Final = 64
_CANDIDATES_PER_HEAD: Final = 4


class _SharedLists(LRUCache[bytes, SharedList]):
    """The shared lists by their bytes, and the spliceable ones by their first _HEAD_BYTES (at
    most a few per head, the newest first): kept in step as lists come and go."""

    def __init__(self, maxsize: int) -> None:
        super().__init__(maxsize, getsizeof=lambda shared: _BYTES_PER_WIRE_BYTE * len(shared.raw))
        self.heads: dict[bytes, list[bytes]] = {}

    def __setitem__(self, raw: bytes, shared: SharedList) -> None:
        super().__setitem__(raw, shared)
        if shared.spliceable:
            listed = self.heads.setdefault(raw[:_HEAD_BYTES], [])
            if raw not in listed:
                listed.insert(0, raw)
                del listed[_CANDIDATES_PER_HEAD:]

    def __delitem__(self, raw: bytes) -> None:
        super().__delitem__(raw)
        listed = self.heads.get(raw[:_HEAD_BYTES])
        if listed is not None and raw in listed:
            listed.remove(raw)
            if not listed:
                del self.heads[raw[:_HEAD_BYTES]]


_SHARED: _SharedLists = _SharedLists(SHARED_CACHE_BYTES)

# Stands for the tool list in a spliced body (see the module docstring); random per process.
_PLACEHOLDER_TEXT: Final = "\u0000sidecar-shared-tool-list-" + secrets.token_hex(16)
_PLACEHOLDER: Final = orjson.dumps(_PLACEHOLDER_TEXT)
_TOOLS_KEY: Final = b'"tools":'
_FUNCTIONS_KEY: Final = b'"functions"'
_JSON_SPACE: Final = b" \t\r\n"


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
    spliced = _spliced(body)
    if spliced is not None:
        return spliced
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
            spliceable = key == "tools" and _orjson_reads(raw)
            value[key] = _SHARED[raw] = SharedList([_frozen(item) for item in items], raw, spliceable)
    return value


def _orjson_reads(raw: bytes) -> bool:
    """orjson reads these bytes on their own (msgspec also takes what only the stdlib fallback
    reads, such as 1e400): once per new list."""
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return True


def _spliced(body: bytes) -> dict[str, Any] | None:
    """The body read with a shared tool list spliced out (see the module docstring), or None
    when that does not apply. Raises TooDeep (see `loads`)."""
    at = body.find(_TOOLS_KEY)
    if at < 0 or _FUNCTIONS_KEY in body:  # Chat's legacy `functions`: the split shares both lists
        return None
    start = at + len(_TOOLS_KEY)
    while start < len(body) and body[start] in _JSON_SPACE:
        start += 1
    for raw in _SHARED.heads.get(body[start : start + _HEAD_BYTES], ()):
        if not body.startswith(raw, start):
            continue
        shared = _SHARED.get(raw)  # also marks it as recently used
        if shared is None:
            continue
        rest = body[:start] + _PLACEHOLDER + body[start + len(raw) :]
        if rest.count(_PLACEHOLDER) != 1:
            return None
        try:
            value = orjson.loads(rest)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(value, dict) or value.get("tools") != _PLACEHOLDER_TEXT:
            return None
        # The shared list passed the depth check as a top-level value when it was first read.
        check_depth(rest, value)
        value["tools"] = shared
        return value
    return None


def edited_shared_lists() -> list[bytes]:
    """The shared lists that no longer write back to the text they had when frozen (empty if
    none was edited): the tests' check that nothing edits a shared list behind its freeze."""
    return [shared.raw for shared in list(_SHARED.values()) if orjson.dumps(shared) != shared.written]
