"""Legacy function calling in Chat Completions (`functions` / `function_call`): the call is one
more CALL item, enforced, repaired and written back in its own wire shape.

The shapes follow OpenAI's legacy replies (whole: `message.function_call` with
`finish_reason: "function_call"`; streamed: `delta.function_call` with the name first, then
argument pieces); the e2e test reuses these builders.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.chat import ChatCompletion

from sidecar.dialects import OPENAI_CHAT
from sidecar.dialects.openai_chat import OTHER_CHOICE_NOTE, legacy_call_id, legacy_history_id
from sidecar.dialects.sse import format_event
from sidecar.model import ItemKind, Reply
from tests.dialects.test_chat_choices import accumulate, chunks_of, feed_all

RESPONSE_ID = "chatcmpl-legacyFunctionCallShape"
ENVELOPE = {
    "id": RESPONSE_ID,
    "created": 1747148049,
    "model": "gpt-4o-mini-2024-07-18",
    "service_tier": "default",
    "system_fingerprint": "fp_dbaca60df0",
}
USAGE = {"prompt_tokens": 71, "completion_tokens": 18, "total_tokens": 89}
SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
    "required": ["query"],
}
FUNCTIONS = [
    {"name": "search", "description": "Search tickets", "parameters": SCHEMA},
    {"name": "send", "parameters": {"type": "object", "properties": {}}},
]
GOOD = '{"query":"refund","limit":10}'
BAD = '{"query":"refund","limit":"10"}'


def completion(
    arguments: str | None = GOOD, name: str = "search", response_id: str = RESPONSE_ID, others: bool = False
) -> bytes:
    """A whole legacy completion, pretty-printed as OpenAI sends it (others: an n=2 reply whose
    choice 1 makes a legacy call too)."""

    def choice(index: int, call: str | None) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": None if call else "Nothing to do."}
        if call is not None:
            message["function_call"] = {"name": name, "arguments": call}
        message.update({"refusal": None, "annotations": []})
        finish = "function_call" if call is not None else "stop"
        return {"index": index, "message": message, "logprobs": None, "finish_reason": finish}

    choices = [choice(0, arguments)] + ([choice(1, '{"query":"other"}')] if others else [])
    body = {**ENVELOPE, "id": response_id, "object": "chat.completion", "choices": choices, "usage": USAGE}
    return json.dumps(body, indent=2).encode()


def _chunk(
    delta: dict[str, Any], finish: str | None = None, index: int = 0, response_id: str = RESPONSE_ID
) -> dict[str, Any]:
    choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {**ENVELOPE, "id": response_id, "object": "chat.completion.chunk", "choices": [choice], "usage": None}


def stream(
    arguments: str | None = GOOD,
    name: str = "search",
    text: str = "",
    response_id: str = RESPONSE_ID,
    others: bool = False,
) -> bytes:
    """A legacy stream with include_usage: optional text, then the call in pieces."""
    start: dict[str, Any] = {"role": "assistant", "content": "", "refusal": None}
    chunks = [_chunk(start, response_id=response_id)]
    if others:
        chunks.append(_chunk(start, index=1, response_id=response_id))
    if text:
        chunks.append(_chunk({"content": text}, response_id=response_id))
    if arguments is not None:
        chunks.append(_chunk({"function_call": {"name": name, "arguments": ""}}, response_id=response_id))
        for piece in (arguments[:7], arguments[7:18], arguments[18:]):
            chunks.append(_chunk({"function_call": {"arguments": piece}}, response_id=response_id))
    else:
        chunks.append(_chunk({"content": "Nothing to do."}, response_id=response_id))
    if others:
        chunks += [
            _chunk({"function_call": {"name": "send", "arguments": ""}}, index=1, response_id=response_id),
            _chunk({"function_call": {"arguments": "{}"}}, index=1, response_id=response_id),
            _chunk({}, "function_call", index=1, response_id=response_id),
        ]
    chunks += [
        _chunk({}, "function_call" if arguments is not None else "stop", response_id=response_id),
        {**ENVELOPE, "id": response_id, "object": "chat.completion.chunk", "choices": [], "usage": USAGE},
    ]
    return b"".join(format_event(json.dumps(c, separators=(",", ":"))) for c in chunks) + b"data: [DONE]\n\n"


def blocked(reply: Reply, text: str = "[sidecar] blocked") -> Reply:
    items = [item for item in reply.items if item.kind is not ItemKind.CALL]
    return Reply(reply.envelope, [*items, OPENAI_CHAT.text_item(text)], reply.complete)


# -- requests ----------------------------------------------------------------------------------


def test_functions_are_declarations() -> None:
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    declared = OPENAI_CHAT.declarations({"functions": FUNCTIONS, "tools": [tool]})
    assert set(declared) == {"search", "send", "lookup"}
    assert declared["search"].schema == SCHEMA
    assert declared["search"].description == "Search tickets"
    assert OPENAI_CHAT.read_request({"messages": [], "functions": FUNCTIONS}).declarations.keys() == {"search", "send"}


def test_hide_tools_filters_functions_and_the_function_call_forcing_one() -> None:
    body = {"model": "m", "functions": FUNCTIONS, "function_call": {"name": "send"}}
    out = OPENAI_CHAT.hide_tools(body, {"send"})
    assert out["functions"] == FUNCTIONS[:1]
    assert "function_call" not in out
    assert set(OPENAI_CHAT.declarations(out)) == {"search"}
    assert body["functions"] == FUNCTIONS  # the agent's body is not mutated
    kept = OPENAI_CHAT.hide_tools(body, {"search"})
    assert kept["function_call"] == {"name": "send"}
    assert OPENAI_CHAT.hide_tools({**body, "function_call": "auto"}, {"search"})["function_call"] == "auto"
    empty = OPENAI_CHAT.hide_tools({**body, "function_call": "auto"}, {"search", "send"})
    assert not {"functions", "function_call", "tools"} & set(empty)


def test_function_results_match_the_latest_legacy_call_by_name() -> None:
    messages = [
        {"role": "user", "content": "Refunds?"},
        {"role": "assistant", "content": None, "function_call": {"name": "search", "arguments": GOOD}},
        {"role": "function", "name": "search", "content": '{"tickets":[]}'},
        {"role": "assistant", "content": None, "function_call": {"name": "send", "arguments": "{}"}},
        {"role": "function", "name": "send", "content": "sent"},
        {"role": "function", "name": "search", "content": "stray"},
    ]
    view = OPENAI_CHAT.read_request({"model": "m", "functions": FUNCTIONS, "messages": messages})
    assert [(c.call_id, c.name, c.arguments) for c in view.echoed_calls] == [
        (legacy_history_id(1), "search", GOOD),
        (legacy_history_id(3), "send", "{}"),
    ]
    # Only the results after the latest model turn; a name answering no legacy call of that
    # turn gets an id no call has (the ledger counts it as an unknown call).
    assert [(r.call_id, r.tool_name, r.content, r.size) for r in view.results] == [
        (legacy_history_id(3), "send", "sent", 4),
        ("function:search", "search", "stray", 5),
    ]


# -- whole replies -----------------------------------------------------------------------------


def test_function_call_is_a_call_item_with_a_synthesized_id() -> None:
    body = json.loads(completion())
    reply = OPENAI_CHAT.read_reply(body)
    [call] = reply.calls
    assert (call.id, call.name, call.arguments, call.raw_arguments) == (
        f"function_call:{RESPONSE_ID}",
        "search",
        {"query": "refund", "limit": 10},
        GOOD,
    )
    assert call.id == legacy_call_id(body, {})
    assert reply.first_call_position == 1
    assert not reply.rewritten
    assert OPENAI_CHAT.write_reply(reply) == body  # written back as it came


def test_synthesized_id_without_a_response_id_is_stable_and_differs_by_time() -> None:
    body = json.loads(completion())
    del body["id"]
    first = OPENAI_CHAT.read_reply(body).calls[0].id
    assert first == OPENAI_CHAT.read_reply(json.loads(json.dumps(body))).calls[0].id
    assert first.startswith("function_call:")
    later = OPENAI_CHAT.read_reply({**body, "created": body["created"] + 1}).calls[0].id
    assert later != first


def test_a_replaced_call_is_written_as_function_call() -> None:
    first = OPENAI_CHAT.read_reply(json.loads(completion(BAD)))
    fixed = OPENAI_CHAT.read_reply(json.loads(completion(GOOD, response_id="chatcmpl-round1")))
    merged = Reply(first.envelope, first.items[:1] + fixed.items)
    body = OPENAI_CHAT.write_reply(merged)
    ChatCompletion.model_validate(body)
    message = body["choices"][0]["message"]
    assert message["function_call"] == {"name": "search", "arguments": GOOD}
    assert "tool_calls" not in message
    assert body["choices"][0]["finish_reason"] == "function_call"


def test_blocked_call_becomes_the_explanation_with_finish_stop() -> None:
    reply = OPENAI_CHAT.read_reply(json.loads(completion(BAD)))
    body = OPENAI_CHAT.write_reply(blocked(reply))
    parsed = ChatCompletion.model_validate(body)
    assert parsed.choices[0].message.function_call is None
    assert parsed.choices[0].message.tool_calls is None
    assert parsed.choices[0].message.content == "[sidecar] blocked"
    assert parsed.choices[0].finish_reason == "stop"


def test_repair_request_is_legacy_shaped() -> None:
    request = {
        "model": "m",
        "functions": FUNCTIONS,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "Refunds?"}],
    }
    reply = OPENAI_CHAT.read_reply(json.loads(completion(BAD)))
    error = {"status": "invalid_arguments", "errors": [{"field": "limit"}], "retryable": True}
    body = OPENAI_CHAT.repair_request(request, reply, [(reply.calls[0], error)])
    assert body["messages"][1:] == [
        {"role": "assistant", "content": None, "function_call": {"name": "search", "arguments": BAD}},
        {"role": "function", "name": "search", "content": json.dumps(error, separators=(",", ":"))},
    ]
    assert body["functions"] == FUNCTIONS and body["stream"] is False and "stream_options" not in body
    # The repair request is itself a valid history: its result answers the echoed call.
    view = OPENAI_CHAT.read_request(body)
    assert [r.call_id for r in view.results] == [c.call_id for c in view.echoed_calls]


def test_other_choice_legacy_calls_are_removed() -> None:
    reply = OPENAI_CHAT.read_reply(json.loads(completion(others=True)))
    assert [c.name for c in reply.calls] == ["search"] and reply.rewritten
    other = OPENAI_CHAT.write_reply(reply)["choices"][1]
    assert "function_call" not in other["message"]
    assert other["message"]["content"] == OTHER_CHOICE_NOTE
    assert other["finish_reason"] == "stop"


# -- streams -----------------------------------------------------------------------------------


@pytest.mark.parametrize("arguments", [GOOD, BAD, None])
def test_stream_passes_byte_for_byte_when_nothing_changes(arguments: str | None) -> None:
    data = stream(arguments, text="Let me look.")
    _, forwarded, held = feed_all(data)
    assert forwarded + held == data
    assert bool(held) == (arguments is not None)
    assert b"function_call" not in forwarded  # the call is held from its first fragment on


def test_stream_assembles_the_call() -> None:
    assembler, forwarded, _ = feed_all(stream(BAD, text="Let me look."))
    reply = assembler.reply()
    [call] = reply.calls
    assert (call.id, call.name, call.raw_arguments) == (f"function_call:{RESPONSE_ID}", "search", BAD)
    assert call.arguments == {"query": "refund", "limit": "10"}
    assert assembler.cut == 1 and reply.complete
    assert accumulate(forwarded).choices[0].message.content == "Let me look."


def test_stream_tail_with_a_replaced_call_is_legacy_shaped() -> None:
    assembler, forwarded, _ = feed_all(stream(BAD))
    reply = assembler.reply()
    fixed = OPENAI_CHAT.read_reply(json.loads(completion(GOOD, response_id="chatcmpl-round1")))
    merged = Reply(reply.envelope, reply.items[:1] + fixed.items)
    tail = OPENAI_CHAT.render_tail(merged, assembler.cut, assembler.tail)
    deltas = [c["choices"][0]["delta"] for c in chunks_of(tail) if c["choices"]]
    assert {"name": "search", "arguments": GOOD} in [d.get("function_call") for d in deltas]
    assert not any("tool_calls" in d for d in deltas)
    final = accumulate(forwarded + tail)
    assert final.choices[0].message.function_call is not None
    assert final.choices[0].message.function_call.arguments == GOOD
    assert final.choices[0].finish_reason == "function_call"
    assert final.usage is not None and final.usage.total_tokens == USAGE["total_tokens"]


def test_stream_tail_when_blocked_ends_with_stop() -> None:
    assembler, forwarded, _ = feed_all(stream(BAD, text="Let me look."))
    tail = OPENAI_CHAT.render_tail(blocked(assembler.reply()), assembler.cut, assembler.tail)
    assert b"function_call" not in tail
    final = accumulate(forwarded + tail)
    assert final.choices[0].message.function_call is None
    assert final.choices[0].message.content == "Let me look.[sidecar] blocked"
    assert final.choices[0].finish_reason == "stop"


def test_stream_other_choice_legacy_calls_never_pass() -> None:
    assembler, forwarded, held = feed_all(stream(GOOD, others=True))
    assert [c.name for c in assembler.reply().calls] == ["search"]
    out = forwarded + held
    assert all(
        "function_call" not in c["delta"] for chunk in chunks_of(out) for c in chunk["choices"] if c["index"] == 1
    )
    first, other = accumulate(out).choices
    assert first.message.function_call is not None and first.finish_reason == "function_call"
    assert other.message.function_call is None
    assert other.message.content == OTHER_CHOICE_NOTE and other.finish_reason == "stop"
