"""Incremental Server-Sent Events parsing that keeps every event's exact bytes.

Events the sidecar does not change are forwarded as the bytes that arrived, so the parser
records each event's raw framing (CR, LF or CRLF line ends, padding, comments) untouched.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import starmap
from operator import itemgetter
from typing import Any

import msgspec
import orjson


class SSEEvent(msgspec.Struct):
    """One event: its bytes as they arrived, its name and its data. A msgspec Struct, not a
    dataclass: a stream makes one per event, and a Struct is built in C (no Python `__init__`)."""

    raw: bytes
    event: str | None
    data: str

    @property
    def is_comment(self) -> bool:
        return self.event is None and not self.data

    def json(self) -> Any:
        return orjson.loads(self.data)


def parse_sse(raw: bytes | str) -> list[SSEEvent]:
    """A complete SSE body as its events, comments left out (what an SDK client sees)."""
    parser = SSEParser()
    events = parser.feed(raw.encode() if isinstance(raw, str) else raw) + parser.flush()
    return [event for event in events if not event.is_comment]


def format_event(data: bytes | str, event: str | None = None) -> bytes:
    """One event in the canonical framing the providers use."""
    payload = data.encode() if isinstance(data, str) else data
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + payload + b"\n\n"


KEEPALIVE_COMMENT = b": keepalive\n\n"
# What a waiting parser needs next (see `SSEParser._waiting`).
_EVENT, _LINE = b"event", b"line"
# The providers' framing, one event per block: an optional `event: NAME` line, one `data:`
# line, a blank line (LF only: a read with a CR goes line by line). Groups: the whole block,
# the event line, the name, the data. `.` is `[^\n]` (no DOTALL), matched faster by `re`: the
# benchmark's streamed replies, 19.9 -> 15.3 us (Chat) and 18.4 -> 16.3 us (Anthropic).
_PROVIDER_EVENT = re.compile(rb"((event: (.*)\n)?data: (.*)\n\n)")
# Event names decoded once: a stream repeats a handful of them (bounded: see `_new_name`).
_NAMES: dict[bytes, str] = {}
_MAX_NAMES = 256
_BLOCK = itemgetter(0)


def _provider_event(block: bytes, head: bytes, name: bytes, data: bytes) -> SSEEvent:
    """One event `_PROVIDER_EVENT` matched (its groups)."""
    return SSEEvent(block, (_NAMES.get(name) or _new_name(name)) if head else None, data.decode("utf-8", "replace"))


def _provider_span(buffer: bytes, start: int, end: int) -> list[SSEEvent] | None:
    """`buffer[start:end]` (whole events) read in one regex pass, when it is all provider-framed
    events one after another (their lengths add up to the span: nothing between them); else
    None. Per event in C (`map`, `starmap`): a stream has many small events."""
    found = _PROVIDER_EVENT.findall(buffer, start, end)
    if sum(map(len, map(_BLOCK, found))) != end - start:
        return None
    return list(starmap(_provider_event, found))


def _new_name(raw: bytes) -> str:
    """A name `_NAMES` does not hold (or an empty one): decoded, and kept while there is room."""
    name = raw.decode("utf-8", "replace")
    if len(_NAMES) < _MAX_NAMES and len(raw) <= 64:
        _NAMES[raw] = name
    return name


class SSEParser:
    """Feed it bytes as they arrive; it returns whole events (WHATWG field rules)."""

    __slots__ = ("_buffer", "_data", "_event", "_has_fields", "_irregular", "_pieces", "_raw", "_waiting")

    def __init__(self) -> None:
        self._buffer = b""
        self._raw = bytearray()
        self._event: str | None = None
        self._data: list[str] = []
        self._has_fields = False
        # What the bytes after `_buffer` must hold to complete anything: a blank line (a
        # partial event, `_EVENT`) or a line end (a partial line, `_LINE`). Reads that cannot
        # are kept in `_pieces` and joined once, so a long event or line arriving in many
        # small reads costs linear time, not a copy of the buffer per read.
        self._waiting: bytes | None = None
        self._pieces: list[bytes] = []
        # Set once a read was not all provider-framed events (see `_provider_events`).
        self._irregular = False

    def _at_event_start(self) -> bool:
        """Nothing of an event is pending and every read so far was provider-framed: the next
        bytes start an event, and the regex paths may read them."""
        return not (self._buffer or self._waiting is not None or self._irregular or self._raw or self._has_fields)

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        # `_at_event_start()`, inline: this runs once per event of a paced stream (the call
        # measured 3-5% of a one-event read's parse).
        if not (self._buffer or self._waiting is not None or self._irregular or self._raw or self._has_fields):
            # Providers send each event as its own read: a read that is exactly one event in
            # their framing, with nothing before it, is that event, as `_provider_events` reads
            # it, without the way there. Over the benchmark's streamed reply (68 events, one per
            # read): 3.9 -> 1.4-1.7 us per event in a loop, 21.7 -> 12.8 k instructions.
            # Only a read whose first blank line is its end can be one event: on a read of
            # many, the regex matched the first, then failed at the rest only after trying
            # every shorter data line (4 us per read of the benchmark's 63 events).
            found = _PROVIDER_EVENT.fullmatch(chunk) if chunk.find(b"\n\n") == len(chunk) - 2 else None
            if found is not None and b"\r" not in chunk:  # a CR ends a line: read line by line
                return [_provider_event(*found.groups())]
        return self._feed(chunk, final=False)

    def batches(self, chunk: bytes, first: int) -> Iterator[list[SSEEvent]]:
        """`feed(chunk)`'s events in order, in batches: a read of many events in the providers'
        framing comes in slices, the first ending at the first event end past `first` bytes,
        each later one twice as long, and what no slice took (the last, or anything else) as
        `feed` reads it. A caller that has what it needs from the first slices (the relay:
        the events before the stream's first call) acts on them before the rest is parsed.
        Each slice is one regex pass over the read in place; what the slices leave is copied
        once, for `feed`. The parser is up to date once the iterator is exhausted."""
        start = 0
        if len(chunk) > first and self._at_event_start() and b"\r" not in chunk:
            cut = chunk.rfind(b"\n\n") + 2
            size = first
            while (end := chunk.find(b"\n\n", start + size) + 2) >= 2 and end < cut:
                events = _provider_span(chunk, start, end)
                if events is None:
                    break  # other framing: `feed` reads the rest
                yield events
                start, size = end, size * 2
        yield self.feed(chunk[start:] if start else chunk)

    def _completes(self, chunk: bytes) -> bool:
        """Whether `chunk`, read after what is waiting, may end a line or an event."""
        if b"\r" in chunk:
            return True
        if self._waiting == _LINE:
            return b"\n" in chunk
        last = self._pieces[-1][-1:] if self._pieces else self._buffer[-1:]
        return b"\n\n" in last + chunk[:1] or b"\n\n" in chunk

    def _feed(self, chunk: bytes, final: bool) -> list[SSEEvent]:
        if self._waiting is not None and not final and not self._completes(chunk):
            self._pieces.append(chunk)
            return []
        if self._pieces:
            self._buffer = b"".join((self._buffer, *self._pieces, chunk))
            self._pieces = []
        else:
            self._buffer += chunk
        self._waiting = None
        events: list[SSEEvent] = []
        buffer = self._buffer
        start = 0
        if b"\r" not in buffer:
            start, partial = self._whole_events(buffer, events)
            if partial and not final:
                # The rest is the start of the next event: keep it whole for the next read (cut
                # line by line it would send every later read of the stream line by line too).
                self._buffer = buffer[start:]
                self._waiting = _EVENT
                return events
        size = len(buffer)
        lf = cr = -2  # -2: not searched yet; -1: none left in the buffer
        while start < size:
            # Search again only past a match already used, so a long read stays linear.
            if lf != -1 and lf < start:
                lf = buffer.find(b"\n", start)
            if cr != -1 and cr < start:
                cr = buffer.find(b"\r", start)
            if cr != -1 and (lf == -1 or cr < lf):
                if cr + 1 == size:  # a CR at the end may be the first half of CRLF: wait for more
                    self._buffer = buffer[start:]
                    return events
                end = cr + 2 if buffer[cr + 1 : cr + 2] == b"\n" else cr + 1
                line_end = cr
            elif lf != -1:
                end = lf + 1
                line_end = lf
            else:
                break
            line = buffer[start:line_end]
            self._raw += buffer[start:end]
            start = end
            event = self._line(line)
            if event is not None:
                events.append(event)
        self._buffer = buffer[start:]
        if self._buffer:
            self._waiting = _LINE  # no CR and no LF in it: only a line end can complete it
        return events

    def _whole_events(self, buffer: bytes, events: list[SSEEvent]) -> tuple[int, bool]:
        """The common case, one block per event: `field: value` lines ended by LF, then a blank
        line, starting at an event boundary. Cut block by block (one search each) with the
        same field rules as `_line`. Returns where the blocks end, and whether the rest is the
        beginning of one more such event (no blank line yet); anything else goes line by line."""
        start = self._provider_events(buffer, events)
        while not self._raw and not self._has_fields:
            end = buffer.find(b"\n\n", start)
            if end == -1:
                return start, start < len(buffer) and buffer[start] != 0x0A
            if end <= start:  # a blank line first: line by line
                break
            # The two framings the providers use are read in place (no copy of the block).
            nl = buffer.find(b"\n", start, end)
            if (
                buffer.startswith(b"event: ", start)
                and nl != -1
                and buffer.startswith(b"data: ", nl + 1)
                and buffer.find(b"\n", nl + 1, end) == -1
            ):
                # `event: NAME` then `data: JSON`, the providers' own framing
                event: str | None = buffer[start + 7 : nl].decode("utf-8", "replace")
                data_text = buffer[nl + 7 : end].decode("utf-8", "replace")
                events.append(SSEEvent(buffer[start : end + 2], event, data_text))
                start = end + 2
                continue
            if nl == -1 and buffer.startswith(b"data: ", start):  # a lone `data: JSON` line
                data_text = buffer[start + 6 : end].decode("utf-8", "replace")
                events.append(SSEEvent(buffer[start : end + 2], None, data_text))
                start = end + 2
                continue
            block = buffer[start:end]
            event = None
            data: list[str] = []
            for line in block.split(b"\n"):
                if line.startswith(b":"):
                    continue
                name, _, value = line.partition(b":")
                if value.startswith(b" "):
                    value = value[1:]
                if name == b"data":
                    data.append(value.decode("utf-8", "replace"))
                elif name == b"event":
                    event = value.decode("utf-8", "replace")
            events.append(SSEEvent(buffer[start : end + 2], event, "\n".join(data)))
            start = end + 2
        return start, False

    def _provider_events(self, buffer: bytes, events: list[SSEEvent]) -> int:
        """The whole events before the buffer's last blank line, in one regex pass, when they
        are all in the providers' framing, one after another (their lengths add up to where
        they end: nothing between them); returns where they end, else 0 and the block loop
        reads the buffer. A stream with other framing (comments, ids) uses the loop from then on."""
        if self._irregular or self._raw or self._has_fields:
            return 0
        cut = buffer.rfind(b"\n\n") + 2
        if cut < 2:
            return 0
        found = _provider_span(buffer, 0, cut)
        if found is None:
            self._irregular = True
            return 0
        events.extend(found)
        return cut

    def flush(self) -> list[SSEEvent]:
        """At end of stream: an unterminated last event still counts (as browsers do not)."""
        events = self._feed(b"", final=True)
        if self._buffer:
            # The last line: a CR at the very end is its line end (no LF can follow any more).
            line, self._buffer = self._buffer, b""
            self._raw += line
            event = self._line(line[:-1] if line.endswith(b"\r") else line)
            if event is not None:
                events.append(event)
        if self._raw:
            # Whatever is left (an unterminated event, or trailing blank lines) keeps its bytes.
            events.append(self._finish())
        return events

    def _line(self, line: bytes) -> SSEEvent | None:
        if not line:
            # A blank line with nothing before it: its bytes stay with the next event.
            return self._finish() if (self._has_fields or self._raw.strip()) else None
        if line.startswith(b":"):
            return None
        name, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data.append(value.decode("utf-8", "replace"))
            self._has_fields = True
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
            self._has_fields = True
        return None

    def _finish(self) -> SSEEvent:
        event = SSEEvent(bytes(self._raw), self._event, "\n".join(self._data))
        self._raw = bytearray()
        self._event = None
        self._data = []
        self._has_fields = False
        return event
