"""Properties of the dialects on arbitrary input: reading requests and replies, assembling
streams and rendering their tails never raise, whatever the JSON holds."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.dialects import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES, Dialect
from sidecar.dialects.sse import SSEParser, format_event
from tests.helpers.strategies import JSON, WIRE_JSON, WIRE_TYPES, mutated
from tests.helpers.wire import WIRE

DIALECTS = {"anthropic": ANTHROPIC, "openai-chat": OPENAI_CHAT, "openai-responses": OPENAI_RESPONSES}
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _seed(kind: str) -> list[tuple[Dialect, dict[str, Any]]]:
    """Recorded request or response bodies, each with the dialect that reads it."""
    out = []
    for path in sorted(WIRE.glob(f"*-{kind}-*.json")):
        prefix = next(p for p in DIALECTS if path.name.startswith(p + "-"))
        out.append((DIALECTS[prefix], json.loads(path.read_text())))
    return out


REQUESTS = _seed("request")
REPLIES = _seed("response") + _seed("message")
STREAMS = [
    (DIALECTS[next(p for p in DIALECTS if path.name.startswith(p + "-"))], path.read_bytes())
    for path in sorted(WIRE.glob("*.sse"))
]


def test_seeds_were_found() -> None:
    assert len(REQUESTS) >= 4 and len(REPLIES) >= 4 and len(STREAMS) >= 8


def _exercise_request(dialect: Dialect, body: dict[str, Any]) -> None:
    dialect.read_request(body)
    dialect.hide_tools(body, {"get_weather", "a"})
    dialect.forced_tool(body.get("tool_choice"))


def _exercise_reply(dialect: Dialect, body: dict[str, Any]) -> None:
    reply = dialect.read_reply(body)
    for call in reply.calls:
        assert isinstance(call.name, str) and isinstance(call.id, str)
        assert call.arguments is None or isinstance(call.arguments, dict)
        assert call.arguments is not None or call.parse_error
    orjson.dumps(dialect.write_reply(reply))
    blocked = type(reply)(reply.envelope, [*reply.items, dialect.text_item("refused")], reply.complete)
    orjson.dumps(dialect.write_reply(blocked))
    if reply.calls:
        dialect.repair_request({"messages": [], "input": []}, reply, [(reply.calls[0], {"status": "x"})])


@FAST
@given(data=st.data())
def test_mutated_requests_are_read(data: st.DataObject) -> None:
    dialect, body = data.draw(st.sampled_from(REQUESTS))
    _exercise_request(dialect, data.draw(mutated(body)))


@FAST
@given(dialect=st.sampled_from(list(DIALECTS.values())), body=st.dictionaries(st.text(max_size=10), WIRE_JSON))
def test_arbitrary_requests_are_read(dialect: Dialect, body: dict[str, Any]) -> None:
    _exercise_request(dialect, body)


@FAST
@given(data=st.data())
def test_mutated_replies_are_read_and_written(data: st.DataObject) -> None:
    dialect, body = data.draw(st.sampled_from(REPLIES))
    _exercise_reply(dialect, data.draw(mutated(body)))


@FAST
@given(dialect=st.sampled_from(list(DIALECTS.values())), body=st.dictionaries(st.text(max_size=10), WIRE_JSON))
def test_arbitrary_replies_are_read_and_written(dialect: Dialect, body: dict[str, Any]) -> None:
    _exercise_reply(dialect, body)


def _run_stream(dialect: Dialect, chunks: list[bytes]) -> None:
    parser = SSEParser()
    assembler = dialect.assembler()
    for chunk in [*chunks, b""]:
        for event in parser.feed(chunk) if chunk else parser.flush():
            assert isinstance(assembler.feed(event), bool)
    reply = assembler.reply()
    if assembler.held and reply.complete:
        start = assembler.cut if assembler.cut is not None else len(reply.items)
        dialect.render_tail(reply, start, assembler.tail)
        edited = type(reply)(reply.envelope, [i for i in reply.items if i.call is None], reply.complete)
        edited.items.append(dialect.text_item("refused"))
        dialect.render_tail(edited, min(start, len(edited.items)), assembler.tail)


def _event(event: str | None, data: Any) -> bytes:
    return format_event(data if isinstance(data, bytes) else orjson.dumps(data), event)


EVENT_DATA = st.one_of(
    WIRE_JSON,
    st.builds(
        lambda t, rest: {**rest, "type": t},
        WIRE_TYPES,
        st.dictionaries(
            st.sampled_from(
                ["index", "delta", "content_block", "message", "choices", "output_index", "item", "response", "usage"]
            ),
            WIRE_JSON,
            max_size=3,
        ),
    ),
)
RAW_DATA = st.sampled_from([b"[DONE]", b"{", b"not json", b"", b'{"type": "message_stop"}', b"NaN"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dialect=st.sampled_from(list(DIALECTS.values())),
    events=st.lists(
        st.tuples(st.none() | WIRE_TYPES | st.text(max_size=5), EVENT_DATA.map(orjson.dumps) | RAW_DATA),
        max_size=12,
    ),
)
def test_arbitrary_event_sequences_never_raise(dialect: Dialect, events: list[tuple[str | None, bytes]]) -> None:
    _run_stream(dialect, [_event(name, data) for name, data in events])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_recorded_streams_with_one_event_changed(data: st.DataObject) -> None:
    dialect, raw = data.draw(st.sampled_from(STREAMS))
    parser = SSEParser()
    events = parser.feed(raw) + parser.flush()
    chunks = [e.raw for e in events]
    if chunks:
        where = data.draw(st.integers(0, len(chunks) - 1))
        action = data.draw(st.sampled_from(["mutate", "drop", "duplicate", "swap", "garbage", "cut"]))
        original = events[where]
        if action == "mutate":
            try:
                parsed = json.loads(original.data)
            except ValueError:
                parsed = None
            value = data.draw(mutated(parsed)) if isinstance(parsed, dict) and parsed else data.draw(JSON)
            chunks[where] = _event(original.event, value)
        elif action == "drop":
            del chunks[where]
        elif action == "duplicate":
            chunks.insert(where, chunks[where])
        elif action == "swap" and where + 1 < len(chunks):
            chunks[where], chunks[where + 1] = chunks[where + 1], chunks[where]
        elif action == "garbage":
            chunks.insert(where, data.draw(st.binary(max_size=30)) + b"\n\n")
        elif action == "cut":
            chunks = [*chunks[:where], chunks[where][: len(chunks[where]) // 2]]
    _run_stream(dialect, chunks)


@FAST
@given(chunks=st.lists(st.binary(max_size=40), max_size=8))
def test_sse_parser_keeps_every_byte(chunks: list[bytes]) -> None:
    parser = SSEParser()
    events = [e for chunk in chunks for e in parser.feed(chunk)] + parser.flush()
    assert b"".join(e.raw for e in events) == b"".join(chunks)
