"""Request bodies share their tool lists between requests (sidecar/dialects/request_body.py): the
value read is always the one `loads` reads, a tool list sent again is the frozen list read the
first time, and what the fast path reads is held to the same rules (depth) as the old way."""

from __future__ import annotations

import copy
import pickle
import uuid
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.dialects import ANTHROPIC, OPENAI_CHAT
from sidecar.dialects import request_body as _request_body
from sidecar.dialects.base import MAX_DEPTH, TooDeep, json_object, loads
from sidecar.dialects.request_body import SharedList, edited_shared_lists, request_object
from sidecar.model import FrozenDict, FrozenList


def _tools(tag: str) -> list[dict[str, Any]]:
    """A tool list no other test sends (the shared lists outlive a test)."""
    return [
        {"name": f"search_{tag}", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}},
        {"name": f"fetch_{tag}", "input_schema": {"type": "object", "required": ["url"]}},
    ]


def _body(tools: Any, **extra: Any) -> bytes:
    return orjson.dumps(
        {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "tools": tools, **extra}
    )


def _twice(body: bytes) -> tuple[Any, Any]:
    return request_object(body), request_object(body)


def test_a_tool_list_sent_again_is_the_frozen_list_read_the_first_time() -> None:
    tools = _tools(uuid.uuid4().hex)
    first, again = _twice(_body(tools))
    assert first == again == loads(_body(tools))
    assert isinstance(again["tools"], SharedList) and again["tools"] is first["tools"]
    assert again["messages"] is not first["messages"]  # every other value is read afresh
    again["messages"].append({"role": "user", "content": "mine"})  # and belongs to its request
    # Whitespace elsewhere in the body does not matter; the list's own bytes do.
    spaced = request_object(_body(tools).replace(b'"model":', b'  "model" :  '))
    assert spaced is not None and spaced["tools"] is first["tools"]
    other = request_object(orjson.dumps({"tools": tools}, option=orjson.OPT_INDENT_2))
    assert other is not None and other["tools"] == tools and other["tools"] is not first["tools"]


def test_a_shared_list_refuses_every_edit_and_copies_are_plain() -> None:
    body = _body(_tools(uuid.uuid4().hex))
    shared = _twice(body)[1]["tools"]
    tool = shared[0]
    schema = tool["input_schema"]
    assert isinstance(tool, FrozenDict) and isinstance(schema["properties"], FrozenDict)
    edits = [
        lambda: shared.append({}),
        lambda: shared.__setitem__(0, {}),
        lambda: shared.pop(),
        lambda: shared.sort(key=str),
        lambda: shared.__iadd__([{}]),
        lambda: tool.__setitem__("name", "x"),
        lambda: tool.pop("name"),
        lambda: tool.update(name="x"),
        lambda: schema["properties"].clear(),
        lambda: (
            schema["required"].append("q")
            if "required" in schema
            else shared[1]["input_schema"]["required"].append("q")
        ),
    ]
    for edit in edits:
        with pytest.raises(TypeError, match="shared by every request"):
            edit()
    assert orjson.dumps(shared) == orjson.dumps(loads(body)["tools"])
    for copied in (copy.deepcopy(shared), pickle.loads(pickle.dumps(shared))):
        assert type(copied) is list and type(copied[0]) is dict and type(copied[0]["input_schema"]) is dict
        copied[0]["name"] = "mine"
        copied.append({})
    assert type(copy.copy(tool)) is dict
    assert edited_shared_lists() == []


def test_an_edit_behind_the_freeze_is_found() -> None:
    shared = _twice(_body(_tools(uuid.uuid4().hex)))[1]["tools"]
    dict.__setitem__(shared[0], "name", "edited")
    try:
        assert shared.raw in edited_shared_lists()
    finally:
        dict.__setitem__(shared[0], "name", orjson.loads(shared.raw)[0]["name"])
    assert edited_shared_lists() == []


@pytest.mark.parametrize(
    "body",
    [
        b'{"tools": [1], "tools": [2], "model": "m"}',  # duplicate keys: the last value wins
        b'{"tools": [], "n": 1e400}',  # a number only the stdlib fallback reads
        b'{"tools": [], "n": NaN}',
        b'{"tools": [], "caf\xc3\xa9": "\xe2\x82\xac"}',
        b' \n{"tools" : [ {"name" : "x"} ] }\t',
        b'{"tools": {"not": "a list"}}',
        b'{"functions": [{"name": "f"}], "tools": [{"name": "t"}]}',
        b"\xef\xbb\xbf{}",  # a BOM: the stdlib fallback reads past it
        b"[1, 2]",
        b'"tools"',
        b"{}",
    ],
)
def test_the_value_read_is_the_one_loads_reads(body: bytes) -> None:
    expected = loads(body)
    for _ in range(2):  # the first read and the one that may share
        got = request_object(body)
        assert got == (expected if isinstance(expected, dict) else None)
        if got is not None:
            assert list(got) == list(expected)  # key order too, as forwarded bodies keep it


@pytest.mark.parametrize("body", [b'{"tools": [1],', b'{"tools": [1]} x', b'{"a": 01}', b'{"a": [1,]}'])
def test_what_loads_refuses_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError):
        loads(body)
    assert request_object(body) is None


def test_depth_is_checked_on_the_fast_path_too() -> None:
    body = _body(_tools(uuid.uuid4().hex))
    assert request_object(body) is not None
    deep = b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)
    too_deep = body[:-1] + b', "metadata": ' + deep + b"}"
    with pytest.raises(TooDeep):
        loads(too_deep)
    with pytest.raises(TooDeep):
        request_object(too_deep)  # the tool list is a hit, the rest is read afresh and checked


def test_hiding_tools_and_declarations_work_on_a_shared_list() -> None:
    tag = uuid.uuid4().hex
    body = _body(_tools(tag))
    plain = loads(body)
    shared = _twice(body)[1]
    assert isinstance(shared["tools"], SharedList)
    assert ANTHROPIC.declarations(shared) is ANTHROPIC.declarations(copy.deepcopy(plain))  # one key for both
    hidden = ANTHROPIC.hide_tools(shared, {f"search_{tag}"})
    assert [tool["name"] for tool in hidden["tools"]] == [f"fetch_{tag}"]
    assert len(shared["tools"]) == 2
    chat_tools = [{"type": "function", "function": {"name": f"f_{tag}", "parameters": {"type": "object"}}}]
    chat = orjson.dumps({"model": "m", "messages": [], "functions": [{"name": f"g_{tag}"}], "tools": chat_tools})
    again = _twice(chat)[1]
    assert isinstance(again["functions"], SharedList) and isinstance(again["tools"], SharedList)
    assert OPENAI_CHAT.declarations(again) is OPENAI_CHAT.declarations(loads(chat))
    narrowed = OPENAI_CHAT.hide_tools(again, {f"g_{tag}"})
    assert "functions" not in narrowed and again["functions"] == [{"name": f"g_{tag}"}]


def test_nested_containers_are_frozen_all_the_way_down() -> None:
    tools = [{"name": "n", "input_schema": {"anyOf": [{"type": "array", "items": [{"enum": [uuid.uuid4().hex]}]}]}}]
    shared = _twice(_body(tools))[1]["tools"]
    inner = shared[0]["input_schema"]["anyOf"][0]["items"]
    assert (
        isinstance(inner, FrozenList) and isinstance(inner[0], FrozenDict) and isinstance(inner[0]["enum"], FrozenList)
    )
    with pytest.raises(TypeError):
        inner[0]["enum"].append("x")


def test_dataclass_copies_of_a_shared_list_work() -> None:
    """`dataclasses.asdict` (the state records) copies a list by calling its type on the items."""
    from dataclasses import asdict, dataclass

    @dataclass
    class Record:
        tools: list[Any]

    shared = _twice(_body(_tools(uuid.uuid4().hex)))[1]["tools"]
    copied = asdict(Record(shared))["tools"]
    assert copied == shared and orjson.dumps(copied) == orjson.dumps(shared)


def test_server_tools_of_a_shared_list_are_read_once_and_the_rest_per_request() -> None:
    tag = uuid.uuid4().hex
    tools = [*_tools(tag), {"type": "web_search_20250305", "name": f"web_{tag}"}]
    first, again = _twice(_body(tools, mcp_servers=[{"type": "url", "url": "https://x", "name": "docs"}]))
    assert ANTHROPIC.server_tools(first) == {f"web_{tag}", "mcp:docs"}
    listed = ANTHROPIC.server_tools({"tools": again["tools"]})
    assert listed == {f"web_{tag}"} and ANTHROPIC.server_tools({"tools": again["tools"]}) is listed
    # The MCP servers are the request's own: another request with the same list names its own.
    other = request_object(_body(tools, mcp_servers=[{"name": "wiki"}, {"url": "no name"}]))
    assert other is not None and other["tools"] is first["tools"]
    assert ANTHROPIC.server_tools(other) == {f"web_{tag}", "mcp:wiki"}
    # A list that is not shared (built by a filter, or too large to keep) is read each time.
    assert ANTHROPIC.server_tools({"tools": list(tools)}) == {f"web_{tag}"}


# --- the spliced read (`_spliced`): a known tool list is not parsed again -----------------

SPLICE_TOOLS = _tools("splice-" + uuid.uuid4().hex)
SPLICE_RAW = orjson.dumps(SPLICE_TOOLS)
OTHER_RAW = orjson.dumps(_tools("other-" + uuid.uuid4().hex))
VALUES = st.sampled_from(
    [
        SPLICE_RAW,
        SPLICE_RAW + b" ",
        OTHER_RAW,
        b'{"tools": ' + SPLICE_RAW + b"}",  # the list nested, not the top-level one
        b'{"tools":' + SPLICE_RAW + b', "x": 1}',
        orjson.dumps(SPLICE_RAW.decode()),  # the list's text inside a string
        orjson.dumps(_request_body._PLACEHOLDER_TEXT),  # the placeholder itself
        b'"\\u0000sidecar-shared-tool-list-0"',
        b"1e400",
        b"NaN",
        b"[1,]",
        b'"m"',
        b"[]",
        b"null",
    ]
)
KEYS = st.sampled_from(["tools", "model", "metadata", "messages", "tool", "tools "])
SPACE = st.sampled_from(["", " ", "\n\t", "  "])


@st.composite
def spliceable_bodies(draw: st.DrawFn) -> bytes:
    members = draw(st.lists(st.tuples(KEYS, SPACE, SPACE, VALUES), max_size=5))
    text = b",".join(f'"{key}"{a}:{b}'.encode() + value for key, a, b, value in members)
    return (
        draw(st.sampled_from([b"", b" ", b"\xef\xbb\xbf"]))
        + b"{"
        + text
        + b"}"
        + draw(st.sampled_from([b"", b"\n", b" x"]))
    )


@settings(max_examples=400, deadline=None)
@given(spliceable_bodies())
def test_a_spliced_body_reads_as_loads_reads_it(body: bytes) -> None:
    """Whatever surrounds a shared tool list (the same list nested, in a string, twice, next to
    the placeholder, invalid JSON, numbers only the stdlib reads), the value is `loads`'s."""
    request_object(_body(SPLICE_TOOLS))  # the list is shared (and spliceable) from here on
    expected = json_object(body)  # what the body was read with before the shared lists
    got = request_object(body)
    assert got == expected
    if got is not None:
        assert list(got) == list(expected)


def test_a_known_tool_list_is_spliced_not_split(monkeypatch: pytest.MonkeyPatch) -> None:
    first = request_object(_body(SPLICE_TOOLS))
    assert first is not None and _request_body._SHARED.get(SPLICE_RAW) is not None

    class NoSplit:
        def decode(self, body: bytes) -> Any:
            raise AssertionError("the split read a body the splice should have read")

    monkeypatch.setattr(_request_body, "_SPLIT", NoSplit())
    again = request_object(_body(SPLICE_TOOLS, metadata={"user_id": "u"}))
    assert again is not None and again["tools"] is first["tools"]
    assert again == loads(_body(SPLICE_TOOLS, metadata={"user_id": "u"}))
    spaced = _body(SPLICE_TOOLS).replace(b'"tools":', b'"tools": \n ')
    assert request_object(spaced) == loads(spaced)


def test_a_list_orjson_refuses_is_shared_but_never_spliced() -> None:
    raw = b'[{"name": "n", "limit": 1e400, "tag": "' + uuid.uuid4().hex.encode() + b'"}]'
    body = b'{"model": "m", "tools": ' + raw + b"}"
    first, again = _twice(body)
    assert first == again == loads(body)
    assert isinstance(again["tools"], SharedList) and not again["tools"].spliceable


def test_the_placeholder_where_the_tool_list_belongs_is_read_as_written() -> None:
    """A body whose top-level `tools` is the placeholder itself, with the shared list nested
    elsewhere: the splice lands on the nested list, so the placeholder is there twice."""
    request_object(_body(SPLICE_TOOLS))
    placeholder = orjson.dumps(_request_body._PLACEHOLDER_TEXT)
    for body in (
        b'{"metadata": {"tools": ' + SPLICE_RAW + b'}, "tools": ' + placeholder + b"}",
        b'{"metadata": {"tools":' + SPLICE_RAW + b'}, "tools": ' + placeholder + b', "model": "m"}',
    ):
        got = request_object(body)
        assert got == loads(body) and got is not None and got["tools"] == _request_body._PLACEHOLDER_TEXT
