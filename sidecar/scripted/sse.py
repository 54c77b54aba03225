"""A small, strict-enough SSE reader for tests that inspect raw streams.

It follows the WHATWG rules the SDK decoders follow (one optional space after the colon,
`data:` lines joined with newlines, comment lines ignored, CRLF accepted), so what it reads is
what a client would see.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class SSEEvent:
    event: str | None
    data: str

    def json(self) -> Any:
        return orjson.loads(self.data)


def parse_sse(raw: bytes | str) -> list[SSEEvent]:
    """Split a complete SSE body into events (a final event without a blank line counts)."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    events: list[SSEEvent] = []
    name: str | None = None
    data: list[str] = []
    for line in [*text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), ""]:
        if not line:
            if data or name is not None:
                events.append(SSEEvent(name, "\n".join(data)))
            name, data = None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    return events
