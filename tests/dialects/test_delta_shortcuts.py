"""Delta shortcuts (`StreamAssembler.learn`): a Chat chunk of a shape read in full before is read
as its one piece (of a call's arguments, or of the text). Whatever the stream, the assembler
decides and assembles exactly what it does with every chunk read in full: the same forward /
hold answer per chunk, the same refusal, the same reply and the same count of text forwarded.
The streams mix pieces written every way JSON allows (escapes, white space), chunks that only
look alike (two values, a number, text beside a piece, usage), the random `obfuscation` padding
(valid, invalid, not a string), and the chunks after which a piece means something else
([DONE])."""

from __future__ import annotations

import gc
import json
import weakref
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.dialects import OPENAI_CHAT
from sidecar.dialects.base import StreamAssembler
from sidecar.dialects.sse import format_event, parse_sse
from tests.helpers.assembling import count_applied, outcome

EXAMPLES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# How the delta's string is written: as orjson writes it (the shortcut's own reading), with
# \u escapes, with white space around it, with an escaped slash; or not as a string at all.
WRITINGS = ["orjson", "ascii", "spaced", "slash", "two values", "number"]
texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)


def _token(text: str, writing: str, key: str) -> str:
    if writing == "ascii":
        return json.dumps(text)
    if writing == "spaced":
        return f" {orjson.dumps(text).decode()}\n "
    if writing == "slash":
        return orjson.dumps(text).decode().replace("/", "\\/")
    if writing == "two values":  # the key again: JSON readers keep the last value
        return f'{orjson.dumps(text).decode()},"{key}":"again"'
    if writing == "number":
        return "5"
    return orjson.dumps(text).decode()


def _read(stream: bytes, shortcuts: bool) -> tuple[list[bool], StreamAssembler, int]:
    """Feed every event; the answers, the assembler, and how many events `apply` read."""
    assembler = OPENAI_CHAT.assembler()
    if not shortcuts:
        assembler._learned = 10**9  # nothing is learned: every event is read in full
    applied = count_applied(assembler)
    answers = [assembler.feed(event) for event in parse_sse(stream)]
    return answers, assembler, applied[0]


def _same_either_way(stream: bytes) -> int:
    """The outcome with shortcuts is the outcome without; returns how many events they saved."""
    with_answers, with_shortcuts, applied = _read(stream, shortcuts=True)
    plain_answers, plain, all_applied = _read(stream, shortcuts=False)
    assert outcome(with_answers, with_shortcuts) == outcome(plain_answers, plain)
    return all_applied - applied


# -- Chat ----------------------------------------------------------------------------------------

CHUNK_HEAD = (
    '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":'
)


def _chat_chunk(delta: str, finish: str = "null", extra: str = "") -> bytes:
    return format_event(f'{CHUNK_HEAD}{delta},"logprobs":null,"finish_reason":{finish}}}]{extra}}}')


# The padding OpenAI adds to chunks: none, a random string, or what no reader takes (an escape
# JSON does not have, a number, text after the chunk's end).
PADDINGS = [
    "",
    ',"obfuscation":"Ab3x"',
    ',"obfuscation":"q"',
    ',"obfuscation":"bad\\qescape"',
    ',"obfuscation":7',
    ',"obfuscation":"q"}x',
    "} ",
]


def _chat_more(index: int, text: str, writing: str, padding: str = "") -> bytes:
    token = _token(text, writing, "arguments")
    return _chat_chunk(f'{{"tool_calls":[{{"index":{index},"function":{{"arguments":{token}}}}}]}}', extra=padding)


chat_steps = st.one_of(
    st.tuples(
        st.just("more"),
        st.integers(0, 2),
        texts,
        st.sampled_from(WRITINGS[:4] * 4 + WRITINGS[4:]),
        st.sampled_from(PADDINGS[:3] * 3 + PADDINGS[3:]),
    ),
    st.tuples(st.just("start"), st.integers(0, 2)),
    st.tuples(st.just("content"), texts, st.sampled_from(PADDINGS[:3] * 3 + PADDINGS[3:])),
    st.tuples(st.just("usage"), st.integers(0, 2), texts),
    st.tuples(st.just("with content"), st.integers(0, 2), st.sampled_from(["a", "b"]), st.sampled_from(["x", "y"])),
    st.tuples(st.just("finish")),
    st.tuples(st.just("done")),
)


def _chat_stream(steps: list[tuple[Any, ...]]) -> bytes:
    events = [_chat_chunk('{"role":"assistant","content":""}')]
    for step in steps:
        if step[0] == "more":
            events.append(_chat_more(*step[1:]))
        elif step[0] == "start":
            start = {
                "index": step[1],
                "id": f"call_{step[1]}",
                "type": "function",
                "function": {"name": "grep", "arguments": ""},
            }
            events.append(_chat_chunk(orjson.dumps({"tool_calls": [start]}).decode()))
        elif step[0] == "content":
            events.append(_chat_chunk(orjson.dumps({"content": step[1]}).decode(), extra=step[2]))
        elif step[0] == "usage":  # a piece of arguments in a chunk that also reports usage
            more = {"tool_calls": [{"index": step[1], "function": {"arguments": step[2]}}]}
            events.append(_chat_chunk(orjson.dumps(more).decode(), extra=',"usage":{"completion_tokens":3}'))
        elif step[0] == "with content":  # a piece of arguments and of text in one chunk
            more = {"content": step[3], "tool_calls": [{"index": step[1], "function": {"arguments": step[2]}}]}
            events.append(_chat_chunk(orjson.dumps(more).decode()))
        elif step[0] == "finish":
            events.append(_chat_chunk("{}", finish='"tool_calls"'))
        else:
            events.append(format_event(b"[DONE]"))
    return b"".join(events)


@EXAMPLES
@given(st.lists(chat_steps, max_size=40))
def test_chat_streams_read_the_same_with_shortcuts(steps: list[tuple[Any, ...]]) -> None:
    _same_either_way(_chat_stream(steps))


def test_chat_argument_pieces_of_a_learned_shape_skip_the_full_reading() -> None:
    padded = ',"obfuscation":"Xy"'
    steps: list[tuple[Any, ...]] = [("start", 0)]
    steps += [("more", 0, f"p{n}", "orjson", f',"obfuscation":"{"x" * n}"') for n in range(8)]  # random
    steps += [
        ("start", 1),
        *[("more", 1, f"q{n}", "orjson", padded) for n in range(4)],
        ("more", 0, "r", "orjson", padded),
    ]
    steps += [("finish",), ("done",), ("more", 0, "late", "orjson", padded)]  # after [DONE]: refused
    stream = _chat_stream(steps)
    assert _same_either_way(stream) == 7 + 3 + 1  # every piece but the first of each call
    _, assembler, _ = _read(stream, shortcuts=True)
    assert assembler.violation is not None and "[DONE]" in assembler.violation


@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("writing", WRITINGS)
def test_a_piece_after_a_learned_shape_reads_as_in_full_however_it_is_written(writing: str, padding: str) -> None:
    """Each way of writing the piece (or not a string), and each padding, right after the
    shape was learned (with the padding the stream has, or without)."""
    for learned_padding in ("", ',"obfuscation":"Zz9"'):
        chat: list[tuple[Any, ...]] = [("start", 0)]
        chat += [("more", 0, text, "orjson", learned_padding) for text in ("a", "b")]
        chat += [("more", 0, 'é/\\"x', writing, padding), ("more", 0, "c", "orjson", learned_padding)]
        chat += [("finish",), ("done",)]
        _same_either_way(_chat_stream(chat))


def test_a_string_also_found_past_the_delta_is_not_taken_for_it() -> None:
    """The learned event's piece is "logprobs", which the chunk also holds as a key after the
    piece: the last "logprobs" in the text is the key, and the probe proves that is not where
    the piece is. A later chunk with that piece and another key then reads as in full."""
    chunk = _chat_more(0, "logprobs", "orjson").decode()
    other_key = chunk.replace('"logprobs":null', '"other":null').encode()
    stream = b"".join([_chat_stream([("start", 0)]), chunk.encode(), other_key])
    _same_either_way(stream)
    _, assembler, _ = _read(stream + format_event(b"[DONE]"), shortcuts=True)
    assert [c.raw_arguments for c in assembler.reply().calls] == ["logprobslogprobs"]


def test_an_assembler_with_shortcuts_is_freed_without_the_cyclic_collector() -> None:
    """A shortcut never holds its assembler: a stream's memory goes when its exchange ends,
    not at the next cyclic collection (which walks everything the process holds)."""
    streams = [_chat_stream([("start", 0), *[("more", 0, t, "orjson", "") for t in "abc"]])]
    gc.disable()
    try:
        for stream in streams:
            _, assembler, applied = _read(stream, shortcuts=True)
            assert assembler._shortcuts and applied < len(parse_sse(stream))  # learned and used
            del assembler.apply  # the test's own counting wrapper holds it
            freed = weakref.ref(assembler)
            del assembler
            assert freed() is None
    finally:
        gc.enable()


def test_text_pieces_of_a_learned_shape_count_as_forwarded_until_a_call_is_held() -> None:
    steps: list[tuple[Any, ...]] = [("content", f"t{n} ", "") for n in range(6)]
    steps += [("start", 0), ("more", 0, "{}", "orjson", ""), *[("content", "late ", "") for _ in range(3)]]
    steps += [("finish",), ("done",)]
    stream = _chat_stream(steps)
    assert _same_either_way(stream) >= 5 + 3  # the text pieces after the first
    answers, assembler, _ = _read(stream, shortcuts=True)
    assert assembler.tail.forwarded_text == len("".join(f"t{n} " for n in range(6)))  # not the held text
    assert answers[1:7] == [True] * 6 and answers[8:12] == [False] * 4


@pytest.mark.parametrize("padding", ["", ',"obfuscation":"Zz9"'])
def test_a_chunk_that_differs_only_after_the_piece_reads_as_in_full(padding: str) -> None:
    """`"finish_reason":"ab"` where the learned chunk has `null`: the same length, so the piece
    sits where it did, but the text after it is not the learned text."""
    piece = '{"tool_calls":[{"index":0,"function":{"arguments":"b"}}]}'
    stream = b"".join(
        [
            _chat_stream([("start", 0), ("more", 0, "a", "orjson", padding)]),
            _chat_chunk(piece, finish='"ab"', extra=padding),
            _chat_chunk(piece, extra=padding.replace("}", "]")),
            format_event(b"[DONE]"),
        ]
    )
    _same_either_way(stream)
    _, assembler, _ = _read(stream, shortcuts=True)
    assert assembler.reply().envelope["choices"][0]["finish_reason"] == "ab"
