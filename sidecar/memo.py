"""A small memory of values worked out from short texts, forgotten whole when it is full.

Hot paths remember what they work out from a request's text: a route per path, an upstream URL,
a redacted string, a log key's plan, a ledger field, a schema's hash. Each such memory is read
on every request, so a hit must be one dict lookup, in C; and it must stay small whatever an
agent or a model sends, so it is bounded by its number of entries and by the length of the text
each entry stands for (a longer one is worked out every time). When it is full it is emptied at
once: the entries come back on the next requests, and nothing has to track their order.
"""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class ShortMemo(dict[K, V]):
    """Read it as the dict it is (`memo.get(key)`); on a miss, `keep` what was worked out."""

    __slots__ = ("max_entries", "max_length")

    def __init__(self, max_entries: int, max_length: int) -> None:
        super().__init__()
        self.max_entries = max_entries
        self.max_length = max_length

    def keep(self, key: K, value: V, length: int) -> V:
        """`value`, kept under `key` when the text it stands for (`length` characters or bytes)
        is at most `max_length` long; a full memory is emptied first."""
        if length <= self.max_length:
            if len(self) >= self.max_entries:
                self.clear()
            self[key] = value
        return value
