"""Every recorded provider transcript in tests/fixtures/wire, parsed by the dialects and checked.

Each file has an entry in exactly one expectation table below (a new file fails until it
gets one). Streams are parsed in many chunkings, assembled, and their held part re-rendered
after edits; the re-rendered downstream is checked structurally and by the official SDKs.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import random
from collections.abc import Callable, Iterable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from aiohttp import web

from sidecar.dialects import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES, Dialect
from sidecar.dialects.anthropic import AnthropicDialect
from sidecar.dialects.base import StreamAssembler
from sidecar.dialects.sse import SSEEvent, SSEParser, format_event
from sidecar.model import Item, ItemKind, Reply, ToolKind, canonical_json
from tests.helpers.serve import serve
from tests.helpers.wire import wire_bytes, wire_json, wire_names

# ---------------------------------------------------------------------------------------
# Expectation tables
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    arguments: dict[str, Any]
    server: bool = False  # run by the provider (observed and decided, never the agent's)


@dataclass(frozen=True)
class StreamCase:
    dialect: Dialect
    items: tuple[str, ...]  # wire type of every assembled item, in order
    calls: tuple[Call, ...]
    cut: int | None  # position where holding started
    forwarded: int  # the first `forwarded` events pass at once ...
    held: int  # ... and the next `held` are held
    texts: dict[int, str]  # exact assembled text by item position
    stop: str | None = None  # stop_reason / finish_reason / status
    usage: dict[str, Any] = field(default_factory=dict)  # subset of the envelope's usage
    error: str | None = None  # the error type of an error stream
    framed: bool = True  # False: one data JSON per line (SSE framing stripped)


CALL_WEATHER = Call("toolu_01NRLabsLyVHZPKxbKvkfSMn", "get_weather", {"location": "Paris"})
CALL_PELICAN_1 = Call("toolu_01LtHJmixrs9NcWQkK8hu8hj", "pelican_name_generator", {})
CALL_PELICAN_2 = Call("toolu_01N8a4jWyf116qKTMqKKmjyt", "pelican_name_generator", {})
CALL_FIXED_VERSION = Call("toolu_01825dXWLSoJwCst1qTsiWdb", "fixed_version", {})
SERVER_SEARCH = Call(
    "srvtoolu_01S5swZdBmTzLDVzwcT5LbHp",
    "tool_search_tool_bm25",
    {"query": "USD EUR exchange rate currency conversion"},
    server=True,
)
CALL_EXCHANGE = Call(
    "toolu_01EFn5wTNBYA8Reni8rbmnHT", "get_exchange_rate", {"from_currency": "USD", "to_currency": "EUR"}
)
CALL_MULTIPLY_CHAT = Call("call_1EYWDzueHEp8OsB8jJSEp7WB", "multiply", {"a": 1231, "b": 2331})
CALL_EDINBURGH = Call(
    "call_JMW1whyEaYG438VE1OIflxA2", "GetWeatherArgs", {"city": "Edinburgh", "country": "GB", "units": "c"}
)
CALL_AAPL = Call("call_DNYTawLBoN8fj3KN6qU9N1Ou", "get_stock_price", {"ticker": "AAPL", "exchange": "NASDAQ"})
CALL_COUNTRY = Call("call_q2UyBRP7eXNTzAoR8lEhjc9Z", "get_country", {})
CALL_PRODUCT = Call("call_b51ijcpFkDiTQG1bQzsrmtW5", "get_product_name", {})
CALL_MULTIPLY_RESPONSES = Call("call_sVidsfFJ6zlzRpelrPkTPlpd", "multiply", {"a": 1231, "b": 2331})

STREAMS: dict[str, StreamCase] = {
    "anthropic-stream-tool-use.sse": StreamCase(
        ANTHROPIC,
        ("text", "tool_use"),
        (CALL_WEATHER,),
        cut=1,
        forwarded=6,
        held=9,
        texts={0: "I'll check the current weather in Paris for you."},
        stop="tool_use",
        usage={"input_tokens": 377, "output_tokens": 65},
    ),
    "anthropic-stream-tool-use-parallel-empty-input.sse": StreamCase(
        ANTHROPIC,
        ("tool_use", "tool_use"),
        (CALL_PELICAN_1, CALL_PELICAN_2),
        cut=0,
        forwarded=1,
        held=9,
        texts={},
        stop="tool_use",
        usage={"input_tokens": 542, "output_tokens": 62},
    ),
    "anthropic-stream-thinking-tool-use.sse": StreamCase(
        ANTHROPIC,
        ("thinking", "tool_use"),
        (CALL_FIXED_VERSION,),
        cut=1,
        forwarded=8,
        held=5,
        texts={},
        stop="tool_use",
        usage={"input_tokens": 598, "output_tokens": 92, "output_tokens_details": {"thinking_tokens": 53}},
    ),
    "anthropic-stream-server-tool-and-client-tool.sse": StreamCase(
        ANTHROPIC,
        ("text", "server_tool_use", "tool_search_tool_result", "text", "tool_use"),
        # The server call is held too: a policy may withhold it (it already ran at the provider).
        (SERVER_SEARCH, CALL_EXCHANGE),
        cut=1,
        forwarded=6,
        held=30,
        texts={
            0: "Let me search for a tool that can provide current exchange rate information.",
            3: "I found the right tool! Let me fetch the current USD to EUR exchange rate for you.",
        },
        stop="tool_use",
        usage={
            "input_tokens": 1591,
            "output_tokens": 175,
            "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
        },
    ),
    "anthropic-stream-error-midstream.sse": StreamCase(
        ANTHROPIC,
        ("text",),
        (),
        cut=None,
        forwarded=4,
        held=0,
        texts={0: ""},
        error="api_error",
        usage={"input_tokens": 18},
    ),
    "openai-chat-stream-tool-call.sse": StreamCase(
        OPENAI_CHAT,
        ("text", "function"),
        (CALL_MULTIPLY_CHAT,),
        cut=1,
        forwarded=0,
        held=15,
        texts={0: ""},
        stop="tool_calls",
        usage={"prompt_tokens": 54, "completion_tokens": 20, "total_tokens": 74},
    ),
    "openai-chat-stream-tool-calls-parallel.sse": StreamCase(
        OPENAI_CHAT,
        ("text", "function", "function"),
        (CALL_EDINBURGH, CALL_AAPL),
        cut=1,
        forwarded=1,
        held=25,
        texts={0: ""},
        stop="tool_calls",
        usage={"prompt_tokens": 149, "completion_tokens": 60, "total_tokens": 209},
    ),
    "openai-chat-stream-tool-calls-parallel-empty-args.sse": StreamCase(
        OPENAI_CHAT,
        ("text", "function", "function"),
        (CALL_COUNTRY, CALL_PRODUCT),
        cut=1,
        forwarded=1,
        held=7,
        texts={0: ""},
        stop="tool_calls",
        usage={"prompt_tokens": 364, "completion_tokens": 40, "total_tokens": 404},
    ),
    "openai-chat-stream-error-midstream.sse": StreamCase(
        OPENAI_CHAT,
        ("text",),
        (),
        cut=None,
        forwarded=5,
        held=0,
        texts={0: 'The question "'},
        error="server_error",
    ),
    "openai-responses-stream-function-call.sse": StreamCase(
        OPENAI_RESPONSES,
        ("function_call",),
        (CALL_MULTIPLY_RESPONSES,),
        cut=0,
        forwarded=2,
        held=15,
        texts={},
        stop="completed",
        usage={"input_tokens": 58, "output_tokens": 23, "total_tokens": 81},
    ),
    "openai-responses-stream-error.chunks.jsonl": StreamCase(
        OPENAI_RESPONSES,
        (),
        (),
        cut=None,
        forwarded=4,
        held=0,
        texts={},
        error="insufficient_quota",
        framed=False,
    ),
}
TAIL_STREAMS = [n for n, c in STREAMS.items() if c.calls]


@dataclass(frozen=True)
class Declared:
    description: str
    schema_hash: str


@dataclass(frozen=True)
class Result:
    call_id: str
    content: Any
    size: int
    is_error: bool = False


@dataclass(frozen=True)
class RequestCase:
    dialect: Dialect
    model: str
    declarations: dict[str, Declared]
    results: tuple[Result, ...]
    echoed: tuple[tuple[str, str, Any], ...]  # call id, tool name, arguments as echoed
    seed: str
    hint: str | None = None
    store: bool = True
    previous_response_id: str | None = None
    stream: bool = True


# sha256 of canonical JSON: pinned, since replay keys and schema hashes are persisted.
EMPTY_OBJECT = "efddc7bd8bbcef73a14eb1ace1ffdaec81e518ef1e13c1e9271d0b8acb694a49"
STRICT_EMPTY_OBJECT = "99334726611ccf58a148b0814696bfa6fe08c1b2d027e946beccf5a74331c9aa"
MULTIPLY = "cca874634a09e8acf64ad48e8e417ba9364da9dec2eb78045787a892871c8834"

NO_SCHEMA = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"  # a tool declared without one: {}

REQUESTS: dict[str, RequestCase] = {
    # Declared by type and name: a provider-defined client tool, no schema (the policy decides).
    "anthropic-request-text-editor-tool.json": RequestCase(
        ANTHROPIC,
        "claude-sonnet-4-5",
        {"str_replace_based_edit_tool": Declared("", NO_SCHEMA)},
        (),
        (),
        seed="\x00Use the text editor to view hello.py",
        stream=False,
    ),
    "openai-responses-request-custom-tool.json": RequestCase(
        OPENAI_RESPONSES,
        "gpt-5",
        {"execute_sql": Declared("Execute SQL query on the database.", NO_SCHEMA)},
        (),
        (),
        seed="\x00Show me all users from the users table",
        stream=False,
    ),
    "anthropic-request-thinking-tool-result.json": RequestCase(
        ANTHROPIC,
        "claude-haiku-4-5-20251001",
        {"fixed_version": Declared("Return a fixed test version string", EMPTY_OBJECT)},
        (Result("toolu_01825dXWLSoJwCst1qTsiWdb", "0.32a0", 6),),
        (("toolu_01825dXWLSoJwCst1qTsiWdb", "fixed_version", {}),),
        seed="\x00Use the fixed_version tool. Then tell me the version and make one short joke about it. "
        "Think about it first.",
    ),
    "anthropic-request-tool-result-parallel.json": RequestCase(
        ANTHROPIC,
        "claude-haiku-4-5-20251001",
        {"pelican_name_generator": Declared("", EMPTY_OBJECT)},
        (Result("toolu_01LtHJmixrs9NcWQkK8hu8hj", "Charles", 7), Result("toolu_01N8a4jWyf116qKTMqKKmjyt", "Sammy", 5)),
        (
            ("toolu_01LtHJmixrs9NcWQkK8hu8hj", "pelican_name_generator", {}),
            ("toolu_01N8a4jWyf116qKTMqKKmjyt", "pelican_name_generator", {}),
        ),
        seed="\x00Two names for a pet pelican",
    ),
    "openai-chat-request-tool-message.json": RequestCase(
        OPENAI_CHAT,
        "gpt-4o-mini",
        {"multiply": Declared("Multiply two numbers.", MULTIPLY)},
        (Result("call_1EYWDzueHEp8OsB8jJSEp7WB", "2869461", 7),),
        (("call_1EYWDzueHEp8OsB8jJSEp7WB", "multiply", '{"a": 1231, "b": 2331}'),),
        seed="\x00What is 1231 * 2331?",
    ),
    "openai-chat-request-tool-messages-parallel.json": RequestCase(
        OPENAI_CHAT,
        "gpt-4o",
        {
            "get_weather": Declared("", "5f118feb63f080e5bd34bc71f32b2e9efba28cc852774cb88f549245301bb7b7"),
            "get_country": Declared("", STRICT_EMPTY_OBJECT),
            "celsius_to_fahrenheit": Declared(
                "Convert Celsius to Fahrenheit.\n\n    Args:\n        celsius: Temperature in Celsius\n\n"
                "    Returns:\n        Temperature in Fahrenheit\n    ",
                "bd3702420a479404f47729b9dd3c50655bac6f69ad8fcf22317aa52304872ece",
            ),
            "get_weather_forecast": Declared(
                "Get the weather forecast for a location.\n\n    Args:\n        location: The location to get the "
                "weather forecast for.\n\n    Returns:\n        The weather forecast for the location.\n    ",
                "457da6988b10a12c01d179ebc343cebd7939eea0bb1f7969d5abd148989c45f3",
            ),
            "get_image_resource": Declared("", STRICT_EMPTY_OBJECT),
            "get_image_resource_link": Declared("", STRICT_EMPTY_OBJECT),
            "get_audio_resource": Declared("", STRICT_EMPTY_OBJECT),
            "get_audio_resource_link": Declared("", STRICT_EMPTY_OBJECT),
            "get_product_name": Declared("", STRICT_EMPTY_OBJECT),
            "get_product_name_link": Declared("", STRICT_EMPTY_OBJECT),
            "get_image": Declared("", STRICT_EMPTY_OBJECT),
            "get_dict": Declared("", STRICT_EMPTY_OBJECT),
            "get_error": Declared("", "4e57e75ea85c623d21a271a0e49adef2e0c8145898c9c8d4555ca21998b7c67a"),
            "get_none": Declared("", STRICT_EMPTY_OBJECT),
            "get_multiple_items": Declared("", STRICT_EMPTY_OBJECT),
            "get_log_level": Declared(
                "Get the current log level.\n\n    Returns:\n        The current log level.\n    ",
                STRICT_EMPTY_OBJECT,
            ),
            "echo_deps": Declared(
                "Echo the run context.\n\n    Args:\n        ctx: Context object containing request and session "
                "information.\n\n    Returns:\n        Dictionary with an echo message and the deps.\n    ",
                STRICT_EMPTY_OBJECT,
            ),
            "use_sampling": Declared(
                "Use sampling callback.", "930bb1a471f0b72cbfc9128e893fb55028cffb5d80499e83d42ed235543a2b0c"
            ),
            "final_result": Declared(
                "The final response which ends this conversation",
                "70b185a80ee9d3aed9db51e3429718caa368a9190303a4c1273019d8de7810b9",
            ),
        },
        (
            Result("call_q2UyBRP7eXNTzAoR8lEhjc9Z", "Mexico", 6),
            Result("call_b51ijcpFkDiTQG1bQzsrmtW5", "Pydantic AI", 11),
        ),
        (
            ("call_q2UyBRP7eXNTzAoR8lEhjc9Z", "get_country", "{}"),
            ("call_b51ijcpFkDiTQG1bQzsrmtW5", "get_product_name", "{}"),
        ),
        seed="\x00Tell me: the capital of the country; the weather there; the product name",
    ),
    "openai-responses-request-function-call-output.json": RequestCase(
        OPENAI_RESPONSES,
        "gpt-5.5",
        {"multiply": Declared("Multiply two numbers.", MULTIPLY)},
        (Result("call_sVidsfFJ6zlzRpelrPkTPlpd", "2869461", 7),),
        (("call_sVidsfFJ6zlzRpelrPkTPlpd", "multiply", '{"a": 1231, "b": 2331}'),),
        seed="\x00What is 1231 * 2331? Use the multiply tool.",
        store=False,
    ),
}


@dataclass(frozen=True)
class ReplyCase:
    dialect: Dialect
    items: tuple[str, ...]
    calls: tuple[Call, ...]
    stop: str


REPLIES: dict[str, ReplyCase] = {
    "anthropic-message-text-editor-tool-use.json": ReplyCase(
        ANTHROPIC,
        ("text", "tool_use"),
        (
            Call(
                "toolu_01RbLnQWMxRzm4KMditMcRiR", "str_replace_based_edit_tool", {"command": "view", "path": "hello.py"}
            ),
        ),
        "tool_use",
    ),
    # A custom tool's call reads as {"input": text}.
    "openai-responses-response-custom-tool-call.json": ReplyCase(
        OPENAI_RESPONSES,
        ("custom_tool_call",),
        (Call("call_ehKeXqQM7YsBXWygeOoDztRm", "execute_sql", {"input": "SELECT * FROM users;"}),),
        "completed",
    ),
    "anthropic-message-tool-use.json": ReplyCase(
        ANTHROPIC,
        ("tool_use",),
        (Call("toolu_01A9HHF5Ezy3oBrKmSgfASm9", "get_weather", {"location": "San Francisco, CA", "units": "f"}),),
        "tool_use",
    ),
    "anthropic-message-tool-use-parallel.json": ReplyCase(
        ANTHROPIC,
        ("text", "tool_use", "tool_use", "tool_use", "tool_use"),
        (
            Call("toolu_0167cfEnoQaPviGdVXA95zcu", "retrieve_entity_info", {"name": "Alice"}),
            Call("toolu_01EEe2V5HD1Ac4rKiUR4HD2T", "retrieve_entity_info", {"name": "Bob"}),
            Call("toolu_01XFyAjstT3966qvRynZyVPo", "retrieve_entity_info", {"name": "Charlie"}),
            Call("toolu_013mnQZbgtK2oe3Mo3XKJsx3", "retrieve_entity_info", {"name": "Daisy"}),
        ),
        "tool_use",
    ),
    "openai-chat-response-tool-call.json": ReplyCase(
        OPENAI_CHAT,
        ("text", "function"),
        (Call("call_TTY8UFNo7rNCaOBUNtlRSvMG", "lookup_population", {"country": "Crumpet"}),),
        "tool_calls",
    ),
    "openai-chat-response-tool-calls-parallel.json": ReplyCase(
        OPENAI_CHAT,
        ("text", "function", "function"),
        (
            Call(
                "call_fdNz3vOBKYgOIpMdWotB9MjY", "GetWeatherArgs", {"city": "Edinburgh", "country": "GB", "units": "c"}
            ),
            Call("call_h1DWI1POMJLb0KwIyQHWXD4p", "get_stock_price", {"ticker": "AAPL", "exchange": "NASDAQ"}),
        ),
        "tool_calls",
    ),
    "openai-responses-response-function-calls-parallel.json": ReplyCase(
        OPENAI_RESPONSES,
        ("reasoning", *["function_call"] * 5),
        (
            Call("call_WbWwKw4J6EXQ7Sn93fgmuZe3", "db_lookup", {"key": "begin"}),
            Call("call_et3hsNc1ipjCfuBylmAwqkEy", "db_lookup", {"key": "value"}),
            Call("call_J4rpPS0QEz4CIdsVGKEKG6k3", "db_lookup", {"key": "the value 7"}),
            Call("call_gd2cYY61KkICSgB6qNd7ZC66", "db_lookup", {"key": "Begin with the value 7."}),
            Call("call_nInKAmdZObYpqc3OR3WC61K3", "db_lookup", {"key": "start2"}),
        ),
        "completed",
    ),
}

ERROR_BODIES: dict[str, tuple[AnthropicDialect, int]] = {
    "anthropic-error-400-orphan-tool-result.json": (ANTHROPIC, 400),
}

TABLES: dict[str, dict[str, Any]] = {
    "streams": STREAMS,
    "requests": REQUESTS,
    "replies": REPLIES,
    "error bodies": ERROR_BODIES,
}


@pytest.mark.parametrize("name", wire_names())
def test_every_wire_file_has_expectations(name: str) -> None:
    tables = [table for table, cases in TABLES.items() if name in cases]
    assert len(tables) == 1, f"{name}: add it to exactly one expectation table in {Path(__file__).name} ({tables})"


def test_every_expectation_has_its_file() -> None:
    expected = {name for cases in TABLES.values() for name in cases}
    assert sorted(expected - set(wire_names())) == []


# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------


def dialect_of(name: str) -> Dialect:
    if name.startswith("anthropic-"):
        return ANTHROPIC
    return OPENAI_CHAT if name.startswith("openai-chat-") else OPENAI_RESPONSES


def stream_bytes(name: str) -> bytes:
    """The stream as it crossed the wire; `.chunks.jsonl` gets its SSE framing back."""
    data = wire_bytes(name)
    if STREAMS[name].framed:
        return data
    out = b""
    for line in data.splitlines():
        if line.strip():
            out += format_event(line, str(json.loads(line)["type"]))
    return out


def parse(data: bytes, sizes: list[int] | None = None) -> list[SSEEvent]:
    parser = SSEParser()
    events: list[SSEEvent] = []
    start, turn = 0, 0
    while start < len(data):
        size = sizes[turn % len(sizes)] if sizes else len(data)
        events += parser.feed(data[start : start + size])
        start, turn = start + size, turn + 1
    return events + parser.flush()


@dataclass
class Assembled:
    assembler: StreamAssembler
    reply: Reply
    forwarded: list[SSEEvent]
    flags: list[bool]


def assemble(dialect: Dialect, events: list[SSEEvent]) -> Assembled:
    assembler = dialect.assembler()
    flags = [assembler.feed(event) for event in events]
    forwarded = [event for event, flag in zip(events, flags, strict=True) if flag]
    return Assembled(assembler, assembler.reply(), forwarded, flags)


def calls_of(reply: Reply) -> list[Call]:
    return [Call(c.id, c.name, c.arguments or {}, not c.kind.runs_on_client) for c in reply.calls]


def client(calls: Iterable[Call]) -> list[Call]:
    """The calls an SDK hands the agent (server calls are blocks of their own kind)."""
    return [c for c in calls if not c.server]


def item_types(reply: Reply) -> tuple[str, ...]:
    return tuple(str(item.wire.get("type")) for item in reply.items)


CALL_TYPES = {"tool_use", "server_tool_use", "function", "function_call", "custom_tool_call"}
TEXT_TYPES = {"text", "message"}


def check_kinds(reply: Reply) -> None:
    """Calls (the client's and the provider's own) are CALL items, text is TEXT, everything
    else (thinking, server tool results, reasoning...) passes as OTHER with no call attached."""
    for item in reply.items:
        kind = str(item.wire.get("type"))
        expected = ItemKind.CALL if kind in CALL_TYPES else ItemKind.TEXT if kind in TEXT_TYPES else ItemKind.OTHER
        assert item.kind is expected, kind
        assert (item.call is not None) is (expected is ItemKind.CALL), kind


def stop_of(dialect: Dialect, envelope: dict[str, Any]) -> Any:
    if dialect is ANTHROPIC:
        return envelope.get("stop_reason")
    if dialect is OPENAI_CHAT:
        return (envelope.get("choices") or [{}])[0].get("finish_reason")
    return envelope.get("status")


def error_type(event: SSEEvent) -> str:
    data = json.loads(event.data)
    error = data.get("error")
    return str(error["type"] if isinstance(error, dict) else data.get("code"))


def subset(expected: dict[str, Any], actual: dict[str, Any]) -> bool:
    return all(
        subset(v, actual.get(k) or {}) if isinstance(v, dict) else actual.get(k) == v for k, v in expected.items()
    )


def all_text(dialect: Dialect, reply: Reply) -> str:
    """Every text the agent reads, in order (Chat keeps all text in its first item)."""
    parts = []
    for item in reply.items:
        if dialect is OPENAI_RESPONSES and item.wire.get("type") == "message":
            parts += [str(p.get("text", "")) for p in item.wire.get("content") or []]
        elif item.kind is ItemKind.TEXT:
            parts.append(str(item.wire.get("text", "")))
    return "".join(parts)


def chunkings(data: bytes) -> dict[str, list[int] | None]:
    rng = random.Random(len(data))
    found: dict[str, list[int] | None] = {"whole": None, "1-byte": [1], "2-byte": [2], "7-byte": [7]}
    for seed in range(4):
        found[f"random-{seed}"] = [rng.randint(1, 64) for _ in range(50)]
    return found


# ---------------------------------------------------------------------------------------
# Streams: exact bytes under any chunking, then assembly
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in STREAMS if STREAMS[n].framed])
def test_stream_bytes_survive_any_chunking(name: str) -> None:
    original = stream_bytes(name)
    reference = [(e.event, e.data) for e in parse(original)]
    assert len(reference) == STREAMS[name].forwarded + STREAMS[name].held
    for newline in (b"\n", b"\r\n", b"\r"):
        data = original.replace(b"\n", newline)
        for label, sizes in chunkings(data).items():
            events = parse(data, sizes)
            assert b"".join(e.raw for e in events) == data, (newline, label)
            assert [(e.event, e.data) for e in events] == reference, (newline, label)


@pytest.mark.parametrize("name", list(STREAMS))
def test_stream_assembly(name: str) -> None:
    case = STREAMS[name]
    data = stream_bytes(name)
    events = parse(data)
    done = assemble(case.dialect, events)
    reply, assembler = done.reply, done.assembler

    assert item_types(reply) == case.items
    assert calls_of(reply) == list(case.calls)
    assert [c.index for c in reply.calls] == list(range(len(case.calls)))
    assert all(c.parse_error is None and not c.truncated for c in reply.calls)
    check_kinds(reply)
    for position, text in case.texts.items():
        assert reply.items[position].kind is ItemKind.TEXT
        assert reply.items[position].wire["text"] == text
    assert assembler.cut == case.cut == reply.first_call_position
    # Forwarded at once: a prefix (all text before the first call); held: everything after.
    assert done.flags == [True] * case.forwarded + [False] * case.held
    assert assembler.held == events[case.forwarded :]
    for item in reply.items[: case.cut]:
        assert all(any(e is f for f in done.forwarded) for e in item.raw_events)

    if case.error is not None:
        assert assembler.error is not None and error_type(assembler.error) == case.error
        assert assembler.error in done.forwarded
        assert not reply.complete and not reply.calls
    else:
        assert assembler.error is None and reply.complete
        assert b"".join(e.raw for e in done.forwarded + assembler.held) == data
        assert stop_of(case.dialect, reply.envelope) == case.stop
    assert subset(case.usage, reply.envelope.get("usage") or {}), reply.envelope.get("usage")


@pytest.mark.parametrize("name", list(STREAMS))
def test_stream_assembly_is_independent_of_chunking_and_line_ends(name: str) -> None:
    case = STREAMS[name]
    reference = assemble(case.dialect, parse(stream_bytes(name)))
    data = stream_bytes(name).replace(b"\n", b"\r\n")
    done = assemble(case.dialect, parse(data, [3, 1, 11]))
    assert [i.wire for i in done.reply.items] == [i.wire for i in reference.reply.items]
    assert done.reply.envelope == reference.reply.envelope
    assert done.flags == reference.flags


def test_thinking_block_is_assembled_exactly_as_the_agent_echoes_it() -> None:
    reply = assemble(ANTHROPIC, parse(wire_bytes("anthropic-stream-thinking-tool-use.sse"))).reply
    thinking = reply.items[0]
    assert thinking.kind is ItemKind.OTHER and thinking.call is None
    echoed = wire_json("anthropic-request-thinking-tool-result.json")["messages"][1]["content"]
    assert thinking.wire == echoed[0]  # text and signature intact, key for key
    assert thinking.wire["signature"].startswith("EoQDCm0IDhgCKkCDzGs2kL2P")
    call = reply.items[1].wire
    assert {k: call[k] for k in ("type", "id", "name", "input")} == echoed[1]


def test_parallel_empty_inputs_are_assembled_as_the_agent_echoes_them() -> None:
    reply = assemble(ANTHROPIC, parse(wire_bytes("anthropic-stream-tool-use-parallel-empty-input.sse"))).reply
    echoed = wire_json("anthropic-request-tool-result-parallel.json")["messages"][1]["content"][1:]
    assert [{k: i.wire[k] for k in ("type", "id", "name", "input")} for i in reply.items] == echoed
    assert [c.raw_arguments for c in reply.calls] == ["{}", "{}"]


def test_server_tool_blocks_are_server_calls_and_results_pass() -> None:
    reply = assemble(ANTHROPIC, parse(wire_bytes("anthropic-stream-server-tool-and-client-tool.sse"))).reply
    server, result = reply.items[1], reply.items[2]
    assert server.kind is ItemKind.CALL and result.kind is ItemKind.OTHER and result.call is None
    assert server.call is not None and server.call.kind is ToolKind.SERVER and not server.call.repairable
    assert server.wire == {
        "type": "server_tool_use",
        "id": "srvtoolu_01S5swZdBmTzLDVzwcT5LbHp",
        "name": "tool_search_tool_bm25",
        "input": {"query": "USD EUR exchange rate currency conversion"},
    }
    assert result.wire == {
        "type": "tool_search_tool_result",
        "tool_use_id": "srvtoolu_01S5swZdBmTzLDVzwcT5LbHp",
        "content": {
            "type": "tool_search_tool_search_result",
            "tool_references": [{"type": "tool_reference", "tool_name": "get_exchange_rate"}],
        },
    }
    assert [c.name for c in reply.calls] == ["tool_search_tool_bm25", "get_exchange_rate"]
    assert [c.name for c in reply.client_calls] == ["get_exchange_rate"]


def test_responses_stream_items_match_the_completed_output() -> None:
    events = parse(wire_bytes("openai-responses-stream-function-call.sse"))
    reply = assemble(OPENAI_RESPONSES, events).reply
    completed = json.loads(events[-1].data)["response"]
    assert [i.wire for i in reply.items] == completed["output"]
    assert reply.envelope == {**completed, "output": []}
    assert reply.calls[0].raw_arguments == '{"a":1231,"b":2331}'


@pytest.mark.parametrize("name", list(STREAMS))
def test_comments_between_events_change_nothing(name: str) -> None:
    """Upstream comments (keepalives, proxies' progress notes) pass and do not disturb assembly."""
    case = STREAMS[name]
    events = parse(stream_bytes(name))
    noisy = b"".join(b": note\n\n" + e.raw for e in events)
    noisy_events = parse(noisy, [13])
    assert b"".join(e.raw for e in noisy_events) == noisy
    reference, done = assemble(case.dialect, events), assemble(case.dialect, noisy_events)
    assert [i.wire for i in done.reply.items] == [i.wire for i in reference.reply.items]
    assert calls_of(done.reply) == calls_of(reference.reply)
    assert done.reply.envelope == reference.reply.envelope
    assert (done.assembler.error is None) is (reference.assembler.error is None)
    assert [e for e in done.forwarded if not e.is_comment] == reference.forwarded


def test_chat_stream_envelope_reads_like_a_completion() -> None:
    reply = assemble(OPENAI_CHAT, parse(wire_bytes("openai-chat-stream-tool-calls-parallel.sse"))).reply
    assert reply.envelope["object"] == "chat.completion"
    assert reply.envelope["id"] == "chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63"
    assert reply.envelope["choices"][0]["message"] == {"role": "assistant", "content": None}
    assert [i.wire["function"]["arguments"] for i in reply.items[1:]] == [
        '{"city": "Edinburgh", "country": "GB", "units": "c"}',
        '{"ticker": "AAPL", "exchange": "NASDAQ"}',
    ]


def test_reasoning_item_passes_intact() -> None:
    body = wire_json("openai-responses-response-function-calls-parallel.json")
    reasoning = OPENAI_RESPONSES.read_reply(copy.deepcopy(body)).items[0]
    assert reasoning.kind is ItemKind.OTHER and reasoning.call is None
    assert reasoning.wire == body["output"][0]
    assert reasoning.wire["encrypted_content"].startswith("gAAAAABp-r_x")


# -- streams derived from the recordings: errors while holding, missing terminators ------

ERROR_FRAMES = {
    ANTHROPIC: lambda: [e for e in parse(wire_bytes("anthropic-stream-error-midstream.sse")) if e.event == "error"],
    OPENAI_CHAT: lambda: parse(wire_bytes("openai-chat-stream-error-midstream.sse"))[-1:],
    OPENAI_RESPONSES: lambda: parse(stream_bytes("openai-responses-stream-error.chunks.jsonl"))[2:],
}


@pytest.mark.parametrize("name", TAIL_STREAMS)
def test_error_while_holding_discards_the_calls(name: str) -> None:
    case = STREAMS[name]
    events = parse(stream_bytes(name))
    upto = case.forwarded + 2  # two events into the held part
    frames = ERROR_FRAMES[case.dialect]()
    done = assemble(case.dialect, events[:upto] + frames)
    # The error passes at once; the held calls, and anything after the error, do not.
    assert done.flags == [True] * case.forwarded + [False] * 2 + [True] + [False] * (len(frames) - 1)
    assert done.assembler.error is frames[0]
    assert not done.reply.complete
    assert done.assembler.held == events[case.forwarded : upto]


@pytest.mark.parametrize("name", TAIL_STREAMS)
def test_stream_without_its_terminator_is_incomplete(name: str) -> None:
    case = STREAMS[name]
    events = parse(stream_bytes(name))
    last = {ANTHROPIC: "message_stop", OPENAI_RESPONSES: "response.completed"}.get(case.dialect)
    cut = [e for e in events if (e.event != last if last else not e.data.startswith("[DONE]"))]
    done = assemble(case.dialect, cut)
    assert not done.reply.complete and done.assembler.error is None
    assert done.flags == [True] * case.forwarded + [False] * (len(cut) - case.forwarded)


def test_anthropic_call_cut_by_max_tokens_is_truncated() -> None:
    data = wire_bytes("anthropic-stream-tool-use.sse")
    events = [e for e in parse(data) if not (e.event == "content_block_stop" and b'"index":1' in e.raw)]
    events = [e for e in events if not (e.event == "content_block_delta" and b'is\\"}' in e.raw)]
    delta = next(e for e in events if e.event == "message_delta")
    events[events.index(delta)] = parse(delta.raw.replace(b'"tool_use"', b'"max_tokens"'))[0]
    reply = assemble(ANTHROPIC, events).reply
    assert reply.complete and reply.envelope["stop_reason"] == "max_tokens"
    call = reply.calls[0]
    assert call.truncated and call.arguments is None and call.raw_arguments == '{"location": "Par'
    assert call.parse_error is not None


# ---------------------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(REQUESTS))
def test_read_request(name: str) -> None:
    case = REQUESTS[name]
    view = case.dialect.read_request(wire_json(name))
    assert view.model == case.model and view.stream is case.stream
    assert list(view.declarations) == list(case.declarations)
    for tool, declared in case.declarations.items():
        found = view.declarations[tool]
        assert found.name == tool
        assert (found.description, found.schema_hash) == (declared.description, declared.schema_hash), tool
        assert found.schema_hash == hashlib.sha256(canonical_json(found.schema)).hexdigest()
    assert [(r.call_id, r.content, r.size, r.is_error) for r in view.results] == [
        (r.call_id, r.content, r.size, r.is_error) for r in case.results
    ]
    assert [(c.call_id, c.name, c.arguments) for c in view.echoed_calls] == list(case.echoed)
    assert view.session_hint == case.hint
    assert view.session_seed == case.seed
    assert view.store is case.store
    assert view.previous_response_id == case.previous_response_id
    # Every result answers a call the same request echoes.
    assert {r.call_id for r in view.results} <= {c.call_id for c in view.echoed_calls}


@pytest.mark.parametrize("name", list(REQUESTS))
def test_schema_hash_ignores_key_order(name: str) -> None:
    case = REQUESTS[name]
    body = wire_json(name)

    def reverse(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: reverse(value[k]) for k in reversed(list(value))}
        return [reverse(v) for v in value] if isinstance(value, list) else value

    view = case.dialect.read_request(reverse(body))
    assert {n: d.schema_hash for n, d in view.declarations.items()} == {
        n: d.schema_hash for n, d in case.declarations.items()
    }


def test_responses_request_state_fields() -> None:
    body = wire_json("openai-responses-request-function-call-output.json")
    stored = OPENAI_RESPONSES.read_request(
        {
            **body,
            "store": True,
            "previous_response_id": "resp_1",
            "input": [{"type": "function_call_output", "call_id": "call_x", "output": '{"ok":true}'}],
        }
    )
    assert stored.store is True and stored.previous_response_id == "resp_1"
    assert [(r.call_id, r.content, r.size) for r in stored.results] == [("call_x", '{"ok":true}', 11)]
    assert OPENAI_RESPONSES.read_request({k: v for k, v in body.items() if k != "store"}).store is True


# ---------------------------------------------------------------------------------------
# Non-streaming replies
# ---------------------------------------------------------------------------------------


def validate_body(dialect: Dialect, body: dict[str, Any]) -> None:
    """The official SDK types accept the body."""
    if dialect is ANTHROPIC:
        anthropic.types.Message.model_validate(body)
    elif dialect is OPENAI_CHAT:
        openai.types.chat.ChatCompletion.model_validate(body)
    else:
        # The recorded usage predates fields this SDK version requires; the rest is validated.
        openai.types.responses.Response.model_validate({k: v for k, v in body.items() if k != "usage"})


@pytest.mark.parametrize("name", list(REPLIES))
def test_read_reply_and_round_trip(name: str) -> None:
    case = REPLIES[name]
    body = wire_json(name)
    reply = case.dialect.read_reply(copy.deepcopy(body))
    assert item_types(reply) == case.items
    check_kinds(reply)
    assert calls_of(reply) == list(case.calls)
    assert [c.index for c in reply.calls] == list(range(len(case.calls)))
    assert stop_of(case.dialect, case.dialect.write_reply(reply)) == case.stop
    written = case.dialect.write_reply(reply)
    assert written == body
    assert json.dumps(written) == json.dumps(body)  # key order kept too
    validate_body(case.dialect, written)


@pytest.mark.parametrize("name", list(REPLIES))
@pytest.mark.parametrize("drop", ["first", "last", "all"])
def test_reply_with_calls_removed(name: str, drop: str) -> None:
    case = REPLIES[name]
    dialect = case.dialect
    body = wire_json(name)
    reply = dialect.read_reply(copy.deepcopy(body))
    calls = [i for i in reply.items if i.kind is ItemKind.CALL]
    removed = {"first": calls[:1], "last": calls[-1:], "all": calls}[drop]
    kept = [i for i in reply.items if not any(i is r for r in removed)]
    written = dialect.write_reply(Reply(reply.envelope, kept))
    validate_body(dialect, written)

    again = dialect.read_reply(copy.deepcopy(written))
    remaining = [c for c in case.calls if c.id not in {r.call.id for r in removed if r.call}]
    assert calls_of(again) == remaining
    assert [c.index for c in again.calls] == list(range(len(remaining)))
    others = {k: v for k, v in body.items() if k not in ("content", "choices", "output", "stop_reason")}
    assert {k: written[k] for k in others} == others  # the envelope is untouched
    if dialect is ANTHROPIC:
        assert written["content"] == [i.wire for i in kept]  # later blocks keep their order
        assert written["stop_reason"] == ("tool_use" if remaining else "end_turn")
    elif dialect is OPENAI_CHAT:
        choice = written["choices"][0]
        assert choice["finish_reason"] == ("tool_calls" if remaining else "stop")
        assert ("tool_calls" in choice["message"]) is bool(remaining)
        assert choice["message"]["content"] is None
    else:
        assert len(written["output"]) == len(body["output"]) - len(removed)
        assert [i for i in written["output"] if i["type"] == "reasoning"] == [
            i for i in body["output"] if i["type"] == "reasoning"
        ]


@pytest.mark.parametrize("name", list(REPLIES))
def test_reply_with_calls_replaced_by_text(name: str) -> None:
    dialect = REPLIES[name].dialect
    reply = dialect.read_reply(wire_json(name))
    items = [i for i in reply.items if i.kind is not ItemKind.CALL] + [dialect.text_item("refused: because")]
    written = dialect.write_reply(Reply(reply.envelope, items))
    validate_body(dialect, written)
    again = dialect.read_reply(written)
    assert again.calls == []
    assert all_text(dialect, again).endswith("refused: because")
    assert stop_of(dialect, written) == {ANTHROPIC: "end_turn", OPENAI_CHAT: "stop"}.get(dialect, "completed")


@pytest.mark.parametrize("name", list(ERROR_BODIES))
def test_error_body_has_the_recorded_shape(name: str) -> None:
    dialect, status = ERROR_BODIES[name]
    recorded = wire_json(name)
    made = dialect.error_body(status, "sidecar: something went wrong")
    assert list(made) == list(recorded)
    assert list(made["error"]) == list(recorded["error"])
    assert made["error"]["type"] == recorded["error"]["type"] == "invalid_request_error"
    assert made["error"]["message"] == "sidecar: something went wrong"
    assert isinstance(made["request_id"], str) and made["request_id"].startswith("req_")
    anthropic.types.ErrorResponse.model_validate(made)


# ---------------------------------------------------------------------------------------
# Re-rendering the held part of a stream after an edit
# ---------------------------------------------------------------------------------------

NOTICE = "The sidecar withheld this tool call: refused by policy."


def keep(reply: Reply) -> tuple[list[Item], list[Call]]:
    return list(reply.items), calls_of(reply)


def drop_first(reply: Reply) -> tuple[list[Item], list[Call]]:
    first = next(i for i in reply.items if i.kind is ItemKind.CALL)
    items = [i for i in reply.items if i is not first]
    return items, [c for c in calls_of(reply) if first.call is None or c.id != first.call.id]


def drop_last(reply: Reply) -> tuple[list[Item], list[Call]]:
    last = [i for i in reply.items if i.kind is ItemKind.CALL][-1]
    items = [i for i in reply.items if i is not last]
    return items, [c for c in calls_of(reply) if last.call is None or c.id != last.call.id]


def rebuilt(reply: Reply) -> tuple[list[Item], list[Call]]:
    """Items after the cut without their stream events (as a repair round delivers them)."""
    cut = reply.first_call_position or 0
    fresh = [Item(i.kind, copy.deepcopy(i.wire), i.call) for i in reply.items[cut:]]
    return reply.items[:cut] + fresh, calls_of(reply)


EDITS: dict[str, Callable[[Reply], tuple[list[Item], list[Call]]]] = {
    "unchanged": keep,
    "drop-first": drop_first,
    "drop-last": drop_last,
    "rebuilt": rebuilt,
}


def edited(name: str, edit: str) -> tuple[Assembled, Reply, list[Call], str]:
    """The assembled stream, the edited reply, the calls it keeps and the text it adds."""
    dialect = STREAMS[name].dialect
    done = assemble(dialect, parse(stream_bytes(name)))
    if edit == "block":
        items = [i for i in done.reply.items if i.kind is not ItemKind.CALL] + [dialect.text_item(NOTICE)]
        return done, Reply(done.reply.envelope, items), [], NOTICE
    items, calls = EDITS[edit](done.reply)
    return done, Reply(done.reply.envelope, items), calls, ""


def downstream(name: str, edit: str) -> tuple[bytes, Reply, list[Call], str]:
    dialect = STREAMS[name].dialect
    done, reply, calls, added = edited(name, edit)
    cut = done.assembler.cut
    assert cut is not None
    tail = dialect.render_tail(reply, cut, done.assembler.tail)
    data = b"".join(e.raw for e in done.forwarded) + dialect.keepalive() + tail
    return data, reply, calls, added


def check_numbering(dialect: Dialect, events: list[SSEEvent]) -> None:
    datas = [json.loads(e.data) for e in events if e.data and not e.data.startswith("[DONE]")]
    if dialect is ANTHROPIC:
        starts = [d["index"] for d in datas if d["type"] == "content_block_start"]
        assert starts == list(range(len(starts)))
        current = -1
        for data in datas:
            if data["type"] == "content_block_start":
                current = data["index"]
            elif data["type"] in ("content_block_delta", "content_block_stop"):
                assert data["index"] == current, data
        for event, data in zip([e for e in events if e.data], datas, strict=True):
            assert event.event == data["type"]  # the Anthropic SDK dispatches on the event name
    elif dialect is OPENAI_CHAT:
        seen: list[int] = []
        for data in datas:
            for choice in data.get("choices") or []:
                for fragment in choice["delta"].get("tool_calls") or []:
                    if "id" in fragment:
                        assert fragment["index"] == len(seen), fragment
                        seen.append(fragment["index"])
                    else:
                        assert fragment["index"] in seen
    else:
        assert [d["sequence_number"] for d in datas] == list(range(len(datas)))
        added = [d["output_index"] for d in datas if d["type"] == "response.output_item.added"]
        assert added == list(range(len(added)))
        current = -1
        for data in datas:
            if data["type"] == "response.output_item.added":
                current = data["output_index"]
            elif "output_index" in data:
                assert data["output_index"] == current, data
        for event, data in zip([e for e in events if e.data], datas, strict=True):
            assert event.event == data["type"]


def check_summary(dialect: Dialect, events: list[SSEEvent], calls: list[Call], items: int) -> None:
    datas = [json.loads(e.data) for e in events if e.data and not e.data.startswith("[DONE]")]
    if dialect is ANTHROPIC:
        deltas = [d for d in datas if d["type"] == "message_delta"]
        client = [c for c in calls if not c.server]
        assert len(deltas) == 1 and deltas[0]["delta"]["stop_reason"] == ("tool_use" if client else "end_turn")
        assert datas[-1]["type"] == "message_stop"
    elif dialect is OPENAI_CHAT:
        finishes = [c["finish_reason"] for d in datas for c in d["choices"] if c["finish_reason"]]
        assert finishes == ["tool_calls" if calls else "stop"]
        assert events[-1].data == "[DONE]"
        assert datas[-1]["choices"] == [] and datas[-1]["usage"]["total_tokens"] > 0
    else:
        assert datas[-1]["type"] == "response.completed"
        output = datas[-1]["response"]["output"]
        assert len(output) == items
        assert [o["call_id"] for o in output if o["type"] == "function_call"] == [c.id for c in calls]


@pytest.mark.parametrize("edit", ["drop-first", "block"])
@pytest.mark.parametrize("name", TAIL_STREAMS)
def test_rendered_summary_has_the_recorded_layout(name: str, edit: str) -> None:
    """The re-rendered ending carries the same keys as the recorded one."""
    dialect = STREAMS[name].dialect
    original = [json.loads(e.data) for e in parse(stream_bytes(name)) if e.data and e.data != "[DONE]"]
    rendered = [json.loads(e.data) for e in parse(downstream(name, edit)[0]) if e.data and e.data != "[DONE]"]
    if dialect is ANTHROPIC:
        was, now = (next(d for d in chunks if d["type"] == "message_delta") for chunks in (original, rendered))
        assert list(now) == list(was) and list(now["delta"]) == list(was["delta"])
    elif dialect is OPENAI_CHAT:

        def keys(chunk: dict[str, Any]) -> list[str]:
            return [k for k in chunk if k != "obfuscation"]  # random padding, safe to drop

        was, now = (
            next(d for d in chunks if d["choices"] and d["choices"][0]["finish_reason"])
            for chunks in (original, rendered)
        )
        assert keys(now) == keys(was)
        assert keys(rendered[-1]) == keys(original[-1])  # the usage chunk
    else:
        assert list(rendered[-1]) == list(original[-1])
        assert list(rendered[-1]["response"]) == list(original[-1]["response"])


@pytest.mark.parametrize("edit", [*EDITS, "block"])
@pytest.mark.parametrize("name", TAIL_STREAMS)
def test_rendered_tail_reparses(name: str, edit: str) -> None:
    dialect = STREAMS[name].dialect
    data, reply, calls, added = downstream(name, edit)
    events = parse(data, [5, 17])
    assert b"".join(e.raw for e in events) == data
    check_numbering(dialect, events)
    check_summary(dialect, events, calls, len(reply.items))

    again = assemble(dialect, events)  # the keepalive comment included
    assert again.assembler.error is None and again.reply.complete
    assert calls_of(again.reply) == calls
    assert [c.index for c in again.reply.calls] == list(range(len(calls)))
    assert all_text(dialect, again.reply) == all_text(dialect, reply)
    if added:
        assert all_text(dialect, again.reply).endswith(added)
    if dialect is not OPENAI_CHAT:
        assert item_types(again.reply) == item_types(reply)
        others = [i.wire for i in reply.items if i.kind is ItemKind.OTHER]
        assert [i.wire for i in again.reply.items if i.kind is ItemKind.OTHER] == others
    assert subset(STREAMS[name].usage, again.reply.envelope.get("usage") or {})


FROM_START = [n for n in TAIL_STREAMS if STREAMS[n].dialect is not OPENAI_CHAT]


def from_start(name: str) -> tuple[bytes, Reply]:
    """The events before the first item, then every item rendered from its wire form alone."""
    dialect = STREAMS[name].dialect
    events = parse(stream_bytes(name))
    reply = assemble(dialect, events).reply
    first = "content_block_start" if dialect is ANTHROPIC else "response.output_item.added"
    prefix = events[: next(n for n, e in enumerate(events) if e.event == first)]
    head = assemble(dialect, prefix)
    bare = Reply(reply.envelope, [Item(i.kind, copy.deepcopy(i.wire), i.call) for i in reply.items])
    data = b"".join(e.raw for e in prefix) + dialect.render_tail(bare, 0, head.assembler.tail)
    return data, bare


@pytest.mark.parametrize("name", FROM_START)
def test_every_item_renders_from_its_wire_form(name: str) -> None:
    dialect = STREAMS[name].dialect
    data, reply = from_start(name)
    events = parse(data)
    check_numbering(dialect, events)
    check_summary(dialect, events, calls_of(reply), len(reply.items))
    again = assemble(dialect, events).reply
    assert [i.wire for i in again.items] == [i.wire for i in reply.items]
    assert calls_of(again) == list(STREAMS[name].calls)


@pytest.mark.parametrize("name", FROM_START)
async def test_sdk_reads_items_rendered_from_their_wire_form(name: str) -> None:
    dialect = STREAMS[name].dialect
    data, reply = from_start(name)
    view = await read_with_sdk(dialect, data)
    assert view.calls == client(STREAMS[name].calls)
    assert tuple(view.types) == STREAMS[name].items
    assert view.text == "".join(STREAMS[name].texts.values())
    for other in view.others:
        assert other in [i.wire for i in reply.items]


def test_unchanged_raw_replay_is_the_original_stream() -> None:
    for name in TAIL_STREAMS:
        done = assemble(STREAMS[name].dialect, parse(stream_bytes(name)))
        assert b"".join(e.raw for e in done.forwarded + done.assembler.held) == stream_bytes(name)


# ---------------------------------------------------------------------------------------
# The official SDKs read the downstream
# ---------------------------------------------------------------------------------------


def serve_stream(payload: bytes) -> AbstractAsyncContextManager[str]:
    """A server that answers any request with `payload` as an event stream, in small writes."""

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for start in range(0, len(payload), 97):
            await response.write(payload[start : start + 97])
        await response.write_eof()
        return response

    return serve(handler)


@dataclass
class SDKView:
    types: list[str]
    calls: list[Call]
    text: str
    stop: Any
    others: list[dict[str, Any]]


async def read_with_sdk(dialect: Dialect, payload: bytes) -> SDKView:
    """What the official SDK assembles from `payload` (its client closed on this loop, so no
    garbage-collected client logs 'Event loop is closed' in a later test)."""
    async with contextlib.AsyncExitStack() as stack:
        return await _read_with_sdk(dialect, payload, stack)


async def _read_with_sdk(dialect: Dialect, payload: bytes, stack: contextlib.AsyncExitStack) -> SDKView:
    async with serve_stream(payload) as url:
        if dialect is ANTHROPIC:
            client = anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
            stack.push_async_callback(client.close)
            async with client.messages.stream(
                model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
            ) as stream:
                message = await stream.get_final_message()
            blocks = [b.to_dict() for b in message.content]
            return SDKView(
                [b["type"] for b in blocks],
                [Call(b["id"], b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"],
                "".join(b["text"] for b in blocks if b["type"] == "text"),
                message.stop_reason,
                [b for b in blocks if b["type"] not in ("text", "tool_use")],
            )
        oa = openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
        stack.push_async_callback(oa.close)
        if dialect is OPENAI_CHAT:
            async with oa.chat.completions.stream(model="gpt-test", messages=[{"role": "user", "content": "hi"}]) as s:
                completion = await s.get_final_completion()
            choice = completion.choices[0]
            tool_calls = choice.message.tool_calls or []
            return SDKView(
                ["function"] * len(tool_calls),
                [Call(t.id, t.function.name, json.loads(t.function.arguments or "{}")) for t in tool_calls],
                choice.message.content or "",
                choice.finish_reason,
                [],
            )
        async with oa.responses.stream(model="gpt-test", input="hi") as rs:
            response = await rs.get_final_response()
        output = [o.to_dict() for o in response.output]
        return SDKView(
            [o["type"] for o in output],
            [
                Call(o["call_id"], o["name"], json.loads(o["arguments"] or "{}"))
                for o in output
                if o["type"] == "function_call"
            ],
            response.output_text,
            response.status,
            [o for o in output if o["type"] not in ("function_call", "message")],
        )


@pytest.mark.parametrize("name", [n for n, c in STREAMS.items() if c.error is None])
async def test_sdk_reads_the_recorded_stream(name: str) -> None:
    case = STREAMS[name]
    view = await read_with_sdk(case.dialect, stream_bytes(name))
    assert view.calls == client(case.calls)
    assert view.stop == case.stop
    assert view.text == "".join(case.texts.values())
    if case.dialect is not OPENAI_CHAT:
        assert tuple(view.types) == case.items


@pytest.mark.parametrize("name", [n for n, c in STREAMS.items() if c.error is not None])
async def test_sdk_raises_on_the_recorded_error_stream(name: str) -> None:
    error: type[Exception] = anthropic.APIStatusError if STREAMS[name].dialect is ANTHROPIC else openai.APIError
    message = {
        "anthropic-stream-error-midstream.sse": "Overloaded",
        "openai-chat-stream-error-midstream.sse": "The server had an error",
        "openai-responses-stream-error.chunks.jsonl": "You exceeded your current quota",
    }[name]
    with pytest.raises(error, match=message):
        await read_with_sdk(STREAMS[name].dialect, stream_bytes(name))


@pytest.mark.parametrize("edit", ["drop-first", "rebuilt", "block"])
@pytest.mark.parametrize("name", TAIL_STREAMS)
async def test_sdk_reads_the_rendered_tail(name: str, edit: str) -> None:
    dialect = STREAMS[name].dialect
    data, reply, calls, added = downstream(name, edit)
    view = await read_with_sdk(dialect, data)
    assert view.calls == client(calls)
    assert view.text == all_text(dialect, reply)
    if added:
        assert view.text.endswith(added)
    if dialect is ANTHROPIC:
        assert view.stop == ("tool_use" if client(calls) else "end_turn")
        assert tuple(view.types) == item_types(reply)
        for other in view.others:  # thinking and server-tool blocks arrive intact
            assert other in [i.wire for i in reply.items]
    elif dialect is OPENAI_CHAT:
        assert view.stop == ("tool_calls" if calls else "stop")
    else:
        assert view.stop == "completed"
        assert tuple(view.types) == item_types(reply)
