"""Strings a stream grows one delta at a time (text, thinking, arguments) are kept as pieces
and joined when the reply is read: linear in the stream, whatever its length."""

from __future__ import annotations

from typing import Any

from sidecar.dialects.base import StreamAssembler
from sidecar.dialects.sse import SSEEvent
from sidecar.model import Item, ItemKind


class _Text(StreamAssembler):
    """Every event's data is one more piece of item 0's text."""

    def __init__(self) -> None:
        super().__init__()
        self.items.append(Item(ItemKind.TEXT, {"type": "text", "text": "Hello"}))

    def apply(self, event: SSEEvent) -> tuple[int | None, bool]:
        self.grow(self.items[0].wire, "text", event.data)
        return 0, False


def _event(data: str) -> SSEEvent:
    return SSEEvent(b"data: " + data.encode() + b"\n\n", None, data)


def test_pieces_are_joined_when_the_reply_is_read_and_keep_growing_after() -> None:
    stream = _Text()
    for piece in (", ", "wor", "ld"):
        stream.feed(_event(piece))
    assert stream.reply().items[0].wire["text"] == "Hello, world"
    stream.feed(_event("!"))
    wire: dict[str, Any] = stream.reply().items[0].wire
    assert wire["text"] == "Hello, world!"


def test_a_long_stream_is_assembled_whole() -> None:
    stream = _Text()
    pieces = [f"<{i}>" for i in range(40_000)]
    for piece in pieces:
        stream.feed(_event(piece))
    assert stream.reply().items[0].wire["text"] == "Hello" + "".join(pieces)
