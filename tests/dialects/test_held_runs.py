"""Held runs (`StreamAssembler.hold`): once a stream holds its first call, the rest of each read
goes to the assembler at once, and the Anthropic dialect takes runs of argument pieces to one
block in one step (`delta_runs`, `take_pieces`) instead of reading each event's JSON. Whatever
the stream and however it is cut into reads, the assembler decides and assembles exactly what
it does when every event is fed: the same events forwarded, the same refusal, the same held
events, the same reply. The streams mix pieces written every way JSON allows (escapes, white
space, Anthropic's padding), events that only look alike (another name, index or delta type, an
index JSON does not allow, a second key, a data of two lines), and the events after which a
piece means something else (a block's stop, message_stop, an error)."""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.dialects import ANTHROPIC
from sidecar.dialects.base import StreamAssembler
from sidecar.dialects.sse import SSEEvent, format_event, parse_sse
from tests.helpers.assembling import count_applied, outcome

EXAMPLES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WIRE = Path(__file__).parent.parent / "fixtures" / "wire"

texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8)


def _head(index: int | str) -> str:
    """An argument piece's data up to the piece."""
    return f'{{"type":"content_block_delta","index":{index},"delta":{{"type":"input_json_delta","partial_json":'


# How an argument piece's event is written, as (index, token, text) -> data, where the token
# is the text as orjson writes it. The first two are the API's own (compact; padded before the
# last brace); the others are read the same by a JSON reader, or not at all. "two lines" and
# "other name" are framed so by `_piece`.
WRITTEN: dict[str, Callable[[int, str, str], str]] = {
    "compact": lambda i, token, text: f"{_head(i)}{token}}}}}",
    "padded": lambda i, token, text: f"{_head(i)}{token}}}      }}",
    "ascii escapes": lambda i, token, text: f"{_head(i)}{json.dumps(text)}}}}}",
    "spaced": lambda i, token, text: f"{_head(i)} {token} }}}}",
    "slash": lambda i, token, text: f"{_head(i)}{token.replace('/', chr(92) + '/')}}}}}",
    "second key": lambda i, token, text: f'{_head(i)}{token},"partial_json":"again"}}}}',  # the last counts
    "index 01": lambda i, token, text: f"{_head(f'0{i}')}{token}}}}}",
    "index true": lambda i, token, text: f"{_head('true')}{token}}}}}",
    "lone surrogate": lambda i, token, text: f'{_head(i)}"\\ud800{text}"}}}}',
    "bad escape": lambda i, token, text: f'{_head(i)}"\\q"}}}}',
    "number": lambda i, token, text: f"{_head(i)}5}}}}",
    "two lines": lambda i, token, text: f"{_head(i)}{token}}}}}",
    "other name": lambda i, token, text: f"{_head(i)}{token}}}}}",
    "text delta": lambda i, token, text: (
        f'{{"type":"content_block_delta","index":{i},"delta":{{"type":"text_delta","text":{token}}}}}'
    ),
}
WRITINGS = list(WRITTEN)


def _piece_data(index: int, text: str, writing: str) -> str:
    return WRITTEN[writing](index, orjson.dumps(text).decode(), text)


def _piece(index: int, text: str, writing: str) -> bytes:
    data = _piece_data(index, text, writing)
    if writing == "two lines":  # one event, two `data:` lines: its data is both, joined by a line end
        return f"event: content_block_delta\ndata: {data}\ndata: {data}\n\n".encode()
    return format_event(data, "ping" if writing == "other name" else "content_block_delta")


def _event(data: dict[str, Any], name: str | None = None) -> bytes:
    return format_event(orjson.dumps(data), name or data["type"])


def _start(index: int, kind: str) -> bytes:
    block = (
        {"type": "tool_use", "id": f"toolu_{index}", "name": "grep", "input": {}}
        if kind == "tool_use"
        else {"type": "text", "text": ""}
    )
    return _event({"type": "content_block_start", "index": index, "content_block": block})


pieces = st.lists(
    st.tuples(texts, st.sampled_from(WRITINGS[:2] * 8 + WRITINGS[2:])),
    min_size=1,
    max_size=12,
)
steps = st.one_of(
    st.tuples(st.just("pieces"), st.integers(0, 3), pieces),
    st.tuples(st.just("start"), st.integers(0, 3), st.sampled_from(["tool_use", "text"])),
    st.tuples(st.just("stop"), st.integers(0, 3)),
    st.tuples(st.just("ping")),
    st.tuples(st.just("error")),
    st.tuples(st.just("message_delta")),
    st.tuples(st.just("message_stop")),
)


def _stream(steps: list[tuple[Any, ...]]) -> bytes:
    """message_start, a text block, a call block (holding starts there), then the steps."""
    events = [
        _event(
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "usage": {"input_tokens": 1},
                },
            }
        ),
        _start(0, "text"),
        _piece(0, "", "text delta"),
        _start(1, "tool_use"),
    ]
    for step in steps:
        if step[0] == "pieces":
            events += [_piece(step[1], text, writing) for text, writing in step[2]]
        elif step[0] == "start":
            events.append(_start(step[1], step[2]))
        elif step[0] == "stop":
            events.append(_event({"type": "content_block_stop", "index": step[1]}))
        elif step[0] == "ping":
            events.append(_event({"type": "ping"}))
        elif step[0] == "error":
            events.append(_event({"type": "error", "error": {"type": "overloaded_error", "message": "x"}}))
        elif step[0] == "message_delta":
            events.append(_event({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}}))
        else:
            events.append(_event({"type": "message_stop"}))
    return b"".join(events)


def _fed(events: list[SSEEvent]) -> tuple[list[bytes], StreamAssembler, int]:
    """Every event fed; the events forwarded, the assembler, and how many events `apply` read."""
    assembler = ANTHROPIC.assembler()
    applied = count_applied(assembler)
    forwarded = []
    for event in events:
        if assembler.feed(event):
            forwarded.append(event.raw)
        elif assembler.violation is not None:
            break
    return forwarded, assembler, applied[0]


def _held(events: list[SSEEvent], cuts: list[int]) -> tuple[list[bytes], StreamAssembler, int]:
    """Fed until holding starts, then taken by `hold` in reads cut at `cuts`, as the relay does;
    the events forwarded, the assembler, and how many events `apply` read."""
    assembler = ANTHROPIC.assembler()
    applied = count_applied(assembler)
    forwarded = []
    at = 0
    while at < len(events) and not assembler.holding and assembler.violation is None:
        if assembler.feed(events[at]):
            forwarded.append(events[at].raw)
        at += 1
    bounds = sorted({at, len(events), *(cut for cut in cuts if at < cut < len(events))})
    for start, end in pairwise(bounds):
        if assembler.violation is not None:
            break
        forwarded += [event.raw for event in assembler.hold(events[start:end])]
    return forwarded, assembler, applied[0]


def _same_either_way(stream: bytes, cuts: list[int]) -> int:
    """The outcome taken in runs is the outcome fed event by event; returns the events saved."""
    events = parse_sse(stream)
    forwarded, assembler, applied = _held(events, cuts)
    plain_forwarded, plain, plain_applied = _fed(events)
    assert outcome(forwarded, assembler) == outcome(plain_forwarded, plain)
    return plain_applied - applied


@EXAMPLES
@given(st.lists(steps, max_size=12), st.lists(st.integers(0, 80), max_size=4))
def test_anthropic_streams_read_the_same_in_held_runs(steps: list[tuple[Any, ...]], cuts: list[int]) -> None:
    _same_either_way(_stream(steps), cuts)


def test_argument_pieces_written_as_the_api_writes_them_are_taken_in_runs() -> None:
    texts = ['{"pa', 'th": ', '"a/', "b/c", "d/e", '"}']
    written = [(text, ["compact", "padded"][at % 2]) for at, text in enumerate(texts)]
    stream = _stream([("pieces", 1, written), ("stop", 1), ("message_delta",), ("message_stop",)])
    assert _same_either_way(stream, []) == len(written)  # not one of them read by `apply`
    _, assembler, _ = _held(parse_sse(stream), [])
    (call,) = [call for call in assembler.reply().calls if call is not None]
    assert call.arguments == {"path": "a/b/cd/e"}


# A piece among five before and five after, written one way: how many of the eleven are taken
# in runs (not read by `apply`). Escapes JSON allows keep the run whole. A piece the pattern does
# not match cuts it in two runs of five; if the stream is refused there, as when fed, the five
# after it are not read either way. A group that cannot be taken as a whole (a text orjson
# refuses, another SSE name) is fed event by event, and a data of two lines has the read fed.
TAKEN = {
    "ascii escapes": 11,
    "slash": 11,
    "spaced": 10,
    "second key": 10,
    "number": 10,
    "text delta": 10,
    "index 01": 5,  # refused: not JSON
    "index true": 5,  # refused: not an open block
    "lone surrogate": 0,
    "bad escape": 0,  # refused at the piece, fed
    "other name": 0,  # refused at the piece, fed
    "two lines": 0,  # refused at the piece, fed
}


def test_a_piece_written_otherwise_is_taken_as_json_reads_it_or_read_in_full() -> None:
    assert set(TAKEN) == set(WRITINGS[2:])
    for writing, taken in TAKEN.items():
        written = [("a", "compact")] * 5 + [("\u00e9/b", writing)] + [("c", "compact")] * 5
        stream = _stream([("pieces", 1, written), ("stop", 1), ("message_stop",)])
        assert _same_either_way(stream, []) == taken, writing


def test_a_run_written_otherwise_throughout_reads_as_when_fed() -> None:
    for writing in WRITINGS[2:]:
        written = [(text, writing) for text in ("a", "\u00e9", "\x01", "b\\")] * 2
        _same_either_way(_stream([("pieces", 1, written), ("stop", 1), ("message_stop",)]), [])


def test_a_read_with_a_data_of_two_lines_is_fed_event_by_event() -> None:
    written = [("a", "compact")] * 5 + [("b", "two lines")] + [("c", "compact")] * 5
    stream = _stream([("pieces", 1, written), ("stop", 1), ("message_stop",)])
    # The read ends with the pieces (the four events before them are fed): each line of the
    # two-line data looks like a piece, and must not be taken for one.
    for cuts in ([15], [4, 15], []):
        assert _same_either_way(stream, cuts) == 0


def test_pieces_to_a_block_that_is_not_open_are_read_one_by_one() -> None:
    for steps in (
        [("stop", 1), ("pieces", 1, [("a", "compact")] * 6)],  # stopped
        [("pieces", 2, [("a", "compact")] * 6)],  # not started
        [("message_stop",), ("pieces", 1, [("a", "compact")] * 6)],  # after message_stop
        [("error",), ("pieces", 1, [("a", "compact")] * 6)],  # after an upstream error
    ):
        assert _same_either_way(_stream(steps), []) == 0, steps


def test_an_upstream_error_among_held_events_is_forwarded_at_once() -> None:
    stream = _stream([("pieces", 1, [("a", "compact")] * 6), ("error",), ("pieces", 1, [("b", "compact")] * 6)])
    forwarded, assembler, _ = _held(parse_sse(stream), [])
    assert assembler.error is not None
    assert b"overloaded_error" in forwarded[-1]
    _same_either_way(stream, [])


def test_the_recorded_anthropic_streams_read_the_same_in_held_runs() -> None:
    files = sorted(WIRE.glob("anthropic-stream-*.sse"))
    assert files
    for path in files:
        stream = path.read_bytes()
        for cuts in ([], [20], [7, 9, 30]):
            _same_either_way(stream, cuts)
