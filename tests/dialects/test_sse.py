"""The incremental SSE parser: WHATWG field rules, any line ending, any chunking, exact bytes."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.dialects.sse import KEEPALIVE_COMMENT, SSEEvent, SSEParser, format_event

Parsed = list[tuple[str | None, str]]


def parse(data: bytes, sizes: list[int] | None = None, parser: SSEParser | None = None) -> list[SSEEvent]:
    """Feed `data` in chunks of the given sizes (cycled), or at once, then flush."""
    parser = parser if parser is not None else SSEParser()
    events: list[SSEEvent] = []
    if not sizes:
        events += parser.feed(data)
    else:
        start, turn = 0, 0
        while start < len(data):
            size = sizes[turn % len(sizes)]
            events += parser.feed(data[start : start + size])
            start, turn = start + size, turn + 1
    return events + parser.flush()


def fields(events: list[SSEEvent]) -> Parsed:
    return [(e.event, e.data) for e in events]


def raw(events: list[SSEEvent]) -> bytes:
    return b"".join(e.raw for e in events)


SAMPLE = (
    b"event: message_start\n"
    b'data: {"type":"message_start"}\n'
    b"\n"
    b": a comment between events\n"
    b"\n"
    b"event: ping\n"
    b"data: first\n"
    b"data: second\n"
    b"\n"
    b'data: {"choices":[]}   \n'
    b"\n"
    b"data: [DONE]\n"
    b"\n"
)
SAMPLE_FIELDS: Parsed = [
    ("message_start", '{"type":"message_start"}'),
    (None, ""),
    ("ping", "first\nsecond"),
    (None, '{"choices":[]}   '),
    (None, "[DONE]"),
]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_line_endings_give_the_same_events(newline: bytes) -> None:
    data = SAMPLE.replace(b"\n", newline)
    events = parse(data)
    assert fields(events) == SAMPLE_FIELDS
    assert raw(events) == data
    assert events[0].raw == b"event: message_start" + newline + b'data: {"type":"message_start"}' + newline * 2


def test_mixed_line_endings_in_one_stream() -> None:
    data = b"event: a\r\ndata: 1\n\rdata: 2\r\r\ndata: 3\r\n\n"
    events = parse(data)
    assert fields(events) == [("a", "1"), (None, "2"), (None, "3")]
    assert raw(events) == data


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_split_at_every_byte(newline: bytes) -> None:
    data = SAMPLE.replace(b"\n", newline)
    for cut in range(len(data) + 1):
        parser = SSEParser()
        events = parser.feed(data[:cut]) + parser.feed(data[cut:]) + parser.flush()
        assert fields(events) == SAMPLE_FIELDS, cut
        assert raw(events) == data, cut


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_one_byte_reads(newline: bytes) -> None:
    data = SAMPLE.replace(b"\n", newline)
    events = parse(data, [1])
    assert fields(events) == SAMPLE_FIELDS
    assert raw(events) == data


def test_events_are_returned_as_soon_as_their_blank_line_arrives() -> None:
    parser = SSEParser()
    assert parser.feed(b"event: a\ndata: 1\n") == []
    assert fields(parser.feed(b"\ndata: 2")) == [("a", "1")]
    assert fields(parser.feed(b"\n\n")) == [(None, "2")]
    assert parser.flush() == []


def test_cr_at_the_end_of_a_read_waits_for_a_possible_lf() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\n\r") == []
    events = parser.feed(b"\n")
    assert fields(events) == [(None, "a")]
    assert events[0].raw == b"data: a\r\n\r\n"


def test_comments_and_keepalives() -> None:
    data = b": keepalive\n\n" + b"data: x\n: inside an event\ndata: y\n\n" + KEEPALIVE_COMMENT + b":\n\n"
    events = parse(data)
    assert fields(events) == [(None, ""), (None, "x\ny"), (None, ""), (None, "")]
    assert [e.is_comment for e in events] == [True, False, True, True]
    assert [e.raw for e in events] == [
        b": keepalive\n\n",
        b"data: x\n: inside an event\ndata: y\n\n",
        KEEPALIVE_COMMENT,
        b":\n\n",
    ]


def test_multi_line_data_is_joined_with_newlines() -> None:
    events = parse(b"data: a\ndata:\ndata: c\ndata\n\n")
    assert fields(events) == [(None, "a\n\nc\n")]


def test_field_value_rules() -> None:
    data = b"event:nospace\ndata:tight\n\nevent:  two\ndata:  two spaces\n\n"
    events = parse(data)
    assert fields(events) == [("nospace", "tight"), (" two", " two spaces")]


def test_unknown_fields_are_ignored_but_kept_in_raw() -> None:
    data = b"id: 7\nretry: 100\nfoo: bar\ndata: x\n\n"
    events = parse(data)
    assert fields(events) == [(None, "x")]
    assert raw(events) == data


def test_blank_lines_before_an_event_stay_with_it() -> None:
    data = b"\n\n\r\ndata: x\n\n"
    events = parse(data)
    assert fields(events) == [(None, "x")]
    assert events[0].raw == data


@pytest.mark.parametrize(
    ("tail", "last"),
    [
        (b"data: last", "last"),
        (b"data: last\n", "last"),
        (b"data: last\r", "last"),
        (b"data: last\r\n", "last"),
        (b"event: e\ndata: last\r", "last"),
    ],
)
def test_missing_trailing_blank_line_is_flushed(tail: bytes, last: str) -> None:
    data = b"data: first\n\n" + tail
    for sizes in (None, [1], [3]):
        events = parse(data, sizes)
        assert [e.data for e in events] == ["first", last]
        assert raw(events) == data


def test_flush_keeps_trailing_blank_lines() -> None:
    data = b"data: x\n\n\n\r\n"
    events = parse(data)
    assert [e.data for e in events if not e.is_comment] == ["x"]
    assert raw(events) == data


def test_flush_of_an_empty_stream() -> None:
    assert SSEParser().flush() == []
    parser = SSEParser()
    assert parser.feed(b"") == []
    assert parser.flush() == []


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    events = parse(b"data: \xff\xfe ok\n\n")
    assert events[0].data == "\ufffd\ufffd ok"


def test_format_event_round_trips() -> None:
    data = format_event(b'{"type":"ping"}', "ping") + format_event('{"a":1}')
    assert data == b'event: ping\ndata: {"type":"ping"}\n\ndata: {"a":1}\n\n'
    assert fields(parse(data)) == [("ping", '{"type":"ping"}'), (None, '{"a":1}')]


# -- property: any chunking of a valid stream yields the same events and bytes --------------

_text = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12)
_event = st.tuples(
    st.one_of(st.none(), _text),  # event name
    st.lists(_text, min_size=1, max_size=3),  # data lines
    st.lists(_text, max_size=2),  # comment lines
)


def _render(events: list[tuple[str | None, list[str], list[str]]], newline: bytes, terminated: bool) -> bytes:
    out = b""
    for name, data, comments in events:
        lines = [b":" + c.encode() for c in comments]
        if name is not None:
            lines.append(b"event: " + name.encode())
        lines += [b"data: " + d.encode() for d in data]
        out += b"".join(line + newline for line in lines) + newline
    return out if terminated else out[: -len(newline)]


@settings(max_examples=150, deadline=None)
@given(
    events=st.lists(_event, min_size=1, max_size=5),
    newline=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    terminated=st.booleans(),
    sizes=st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=8),
)
def test_any_chunking_yields_the_same_events_and_bytes(
    events: list[tuple[str | None, list[str], list[str]]], newline: bytes, terminated: bool, sizes: list[int]
) -> None:
    data = _render(events, newline, terminated)
    expected = [(name, "\n".join(lines)) for name, lines, _ in events]
    whole = parse(data)
    chunked = parse(data, sizes)
    assert fields(whole) == expected
    assert fields(chunked) == expected
    assert raw(whole) == data
    assert [e.raw for e in chunked] == [e.raw for e in whole]


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_random_reads_of_the_sample(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [rng.randint(1, 20) for _ in range(30)]
    for newline in (b"\n", b"\r\n", b"\r"):
        data = SAMPLE.replace(b"\n", newline)
        events = parse(data, sizes)
        assert fields(events) == SAMPLE_FIELDS
        assert raw(events) == data


class _LineByLine(SSEParser):
    """The parser without its fast paths (one event per read, whole events): every line goes
    through `_line`."""

    __slots__ = ()

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        return self._feed(chunk, final=False)

    def _whole_events(self, buffer: bytes, events: list[SSEEvent]) -> tuple[int, bool]:
        return 0, False


_LINE = st.sampled_from(
    [
        *(b"data: x", b"data:y", b"data", b"event: e", b"event:", b": note", b":", b"id: 7", b"", b"retry: 1"),
        *(b"data:  two", b'data: {"k": 1}', b"event: a:b", b"event:  pad", b"event: ", b"data: "),
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(_LINE, max_size=14),
    sizes=st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=6),
)
def test_whole_event_fast_path_agrees_with_line_by_line(lines: list[bytes], sizes: list[int]) -> None:
    """LF-only streams take the block fast path: same events, same bytes, any chunking."""
    data = b"\n".join(lines) + b"\n"
    for chunking in (None, sizes):
        fast = parse(data, chunking)
        reference = parse(data, chunking, _LineByLine())
        assert [(e.raw, e.event, e.data) for e in fast] == [(e.raw, e.event, e.data) for e in reference]


_NAME = st.sampled_from([b"content_block_delta", b"ping", b"", b"a:b", b" pad", "caf\u00e9".encode()])
_DATA = st.sampled_from([b'{"type":"ping"}', b"", b" two", b"[DONE]", b'{"t":"\\n"}', "\u00e9t\u00e9".encode()])
# Mostly the providers' framing (`event: NAME` or not, one `data:` line), now and then another.
_BLOCK = st.one_of(
    st.tuples(st.one_of(st.none(), _NAME), _DATA).map(
        lambda e: (b"" if e[0] is None else b"event: " + e[0] + b"\n") + b"data: " + e[1] + b"\n\n"
    ),
    st.sampled_from(
        [
            *(b": keepalive\n\n", b"id: 7\ndata: x\n\n", b"data: a\ndata: b\n\n", b"\n", b"data:x\n\n"),
            # A CR ends a line, even inside what looks like one provider event.
            *(b"data: a\rb\n\n", b"event: e\rdata: x\n\n", b"event: e\ndata: x\r\n\n"),
        ]
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    blocks=st.lists(_BLOCK, max_size=12),
    sizes=st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=6),
)
def test_provider_framed_reads_agree_with_line_by_line(blocks: list[bytes], sizes: list[int]) -> None:
    """Reads of provider-framed events are cut in one regex pass; the events and their bytes
    are the line-by-line parser's, whatever the reads and whatever other framing comes along."""
    data = b"".join(blocks)
    for chunking in (None, sizes, [len(block) for block in blocks] or None):  # the last: a read per block
        fast = parse(data, chunking)
        reference = parse(data, chunking, _LineByLine())
        assert [(e.raw, e.event, e.data) for e in fast] == [(e.raw, e.event, e.data) for e in reference]


def _batched(data: bytes, sizes: list[int] | None, first: int, parser: SSEParser | None = None) -> list[list[SSEEvent]]:
    """`parse`, each read through `batches`: every read's batches, in order (the flush last)."""
    parser = parser if parser is not None else SSEParser()
    reads = [data] if not sizes else [data[i : i + sizes[0]] for i in range(0, len(data), sizes[0])]
    out = [batch for chunk in reads for batch in parser.batches(chunk, first)]
    return [*out, parser.flush()]


@settings(max_examples=300, deadline=None)
@given(
    blocks=st.lists(_BLOCK, max_size=24),
    sizes=st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=1),
    first=st.integers(min_value=1, max_value=40),
)
def test_batches_are_the_events_feed_gives_in_order(blocks: list[bytes], sizes: list[int], first: int) -> None:
    """Whatever the framing and the reads, a read's batches joined are the events `feed` gives
    for it, with their bytes, and the parser goes on as after `feed`."""
    data = b"".join(blocks)
    for chunking in (None, sizes):
        batched = [event for batch in _batched(data, chunking, first) for event in batch]
        fed = parse(data, chunking)
        assert [(e.raw, e.event, e.data) for e in batched] == [(e.raw, e.event, e.data) for e in fed]


def test_a_burst_of_provider_events_comes_in_growing_slices() -> None:
    """A read of many provider-framed events: the first slice ends at the first event end past
    `first` bytes, each later one twice as long, the last takes the rest, a partial event
    waits for the next read."""
    event = b'event: content_block_delta\ndata: {"i":0000}\n\n'  # 46 bytes
    burst = b"".join(event.replace(b"0000", b"%04d" % i) for i in range(40)) + b"event: message_stop\nda"
    parser = SSEParser()
    sizes = [len(batch) for batch in parser.batches(burst, 100)]
    # Past 100 bytes: 3 events (138 bytes); then past 200 bytes more: 5 (230); past 400: 9 (414);
    # past 800: 18 (828); 1,600 more would pass the read's last event end: `feed` reads the rest.
    assert sizes == [3, 5, 9, 18, 5]
    rest = parser.feed(b"ta: {}\n\n")
    assert [(e.event, e.data) for e in rest] == [("message_stop", "{}")]


def test_a_short_read_or_a_parser_mid_event_is_one_batch() -> None:
    event = b"data: {}\n\n"
    assert [len(batch) for batch in SSEParser().batches(event * 3, 100)] == [3]
    parser = SSEParser()
    assert parser.feed(b"data: {") == []
    assert [len(batch) for batch in parser.batches(b"}\n\n" + event * 30, 10)] == [31]


def test_a_provider_burst_then_other_framing() -> None:
    """A burst of provider events, then a comment and an `id:` field in a later read: every
    event comes out once, in order, with its bytes."""
    burst = b"event: a\ndata: 1\n\ndata: 2\n\nevent: b\ndata: 3\n\nevent: c\nda"
    later = b"ta: 4\n\n: note\n\nid: 9\ndata: 5\n\ndata: 6\n\n"
    parser = SSEParser()
    first = parser.feed(burst)
    assert [(e.event, e.data) for e in first] == [("a", "1"), (None, "2"), ("b", "3")]
    rest = parser.feed(later) + parser.flush()
    assert [(e.event, e.data) for e in rest] == [("c", "4"), (None, ""), (None, "5"), (None, "6")]
    assert b"".join(e.raw for e in first + rest) == burst + later


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("read", [1, 7, 1024])
def test_a_long_event_in_small_reads_is_one_event_with_its_bytes(end: bytes, read: int) -> None:
    """Reads that cannot complete a line or an event wait in pieces (joined once): the event
    is the same as from one read, with every byte kept."""
    body = b"event: big" + end + b"data: " + b"x" * 50_000 + end + b"data: y" + end + end + b"data: next" + end + end
    whole = parse(body, None)
    pieces = parse(body, [read] if read > 1 else [1] * 3)
    assert [(e.raw, e.event, e.data) for e in pieces] == [(e.raw, e.event, e.data) for e in whole]
    assert [e.data for e in whole] == ["x" * 50_000 + "\ny", "next"] and whole[0].event == "big"


@pytest.mark.parametrize(("before", "end"), [(b"\n", b"\n"), (b"\r\n", b"\r\n"), (b"\r", b"\r"), (b"\r\n", b"\n")])
def test_a_waiting_event_comes_out_with_the_read_that_completes_it(before: bytes, end: bytes) -> None:
    """A partial event (LF streams) or a partial line (once a CR was read) waits in pieces."""
    parser = SSEParser()
    line = b"data: " + b"x" * 5_000
    first = parser.feed(b"data: a" + before + before + line[:100])  # a CR alone at the end waits a byte
    assert [e.data for e in first] == ["a"]
    got = [parser.feed(line[i : i + 100]) for i in range(100, len(line), 100)]
    assert not any(got)  # nothing complete yet: the reads wait in pieces
    assert parser.feed(end) == []
    done = parser.feed(end) + parser.feed(b": more")  # (after a lone CR, one more byte tells)
    assert [e.data for e in done] == ["x" * 5_000]
