"""Chat Completions with `n > 1`: only choice 0 is enforced, so the tool calls of the other
choices never reach the agent (removed and explained), while everything else passes as it came.

The shapes follow the recorded n=1 transcripts in tests/fixtures/wire; the e2e test reuses them.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from sidecar.dialects import OPENAI_CHAT
from sidecar.dialects.openai_chat import OTHER_CHOICE_NOTE
from sidecar.dialects.sse import format_event, parse_sse
from sidecar.model import Reply

ENVELOPE = {
    "id": "chatcmpl-n2ChoicesRecordedShape",
    "created": 1747148049,
    "model": "gpt-4o-mini-2024-07-18",
    "service_tier": "default",
    "system_fingerprint": "fp_dbaca60df0",
}
USAGE = {"prompt_tokens": 92, "completion_tokens": 40, "total_tokens": 132}
PARIS = '{"city":"Paris"}'


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def completion(first_call: str | None = PARIS, other_calls: bool = True) -> bytes:
    """A whole n=2 completion, pretty-printed as OpenAI sends it."""

    def choice(index: int, text: str | None, calls: list[dict[str, Any]]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = calls
        message.update({"refusal": None, "annotations": []})
        finish = "tool_calls" if calls else "stop"
        return {"index": index, "message": message, "logprobs": None, "finish_reason": finish}

    first = [call("call_a0", "get_weather", first_call)] if first_call else []
    others = [call("call_b0", "get_weather", '{"city":"Oslo"}'), call("call_b1", "list_cities", "{}")]
    choices = [
        choice(0, None if first else "Sunny.", first),
        choice(1, "Let me check.", others if other_calls else []),
    ]
    body = {**ENVELOPE, "object": "chat.completion", "choices": choices, "usage": USAGE}
    return json.dumps(body, indent=2).encode()


def _chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {**ENVELOPE, "object": "chat.completion.chunk", "choices": [choice], "usage": None}


def _header(index: int, call_id: str, name: str) -> dict[str, Any]:
    return {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}


def _args(index: int, fragment: str) -> dict[str, Any]:
    return {"index": index, "function": {"arguments": fragment}}


def stream(first_call: str | None = PARIS, other_calls: bool = True) -> bytes:
    """An n=2 stream with include_usage: chunks of choice 0 and 1 interleaved."""
    start = {"role": "assistant", "content": "", "refusal": None}
    chunks = [_chunk(0, start), _chunk(1, start), _chunk(1, {"content": "Let me check."})]
    if first_call:
        half = len(first_call) // 2
        chunks += [
            _chunk(0, {"tool_calls": [_header(0, "call_a0", "get_weather")]}),
            _chunk(0, {"tool_calls": [_args(0, first_call[:half])]}),
        ]
    else:
        chunks.append(_chunk(0, {"content": "Sunny."}))
    if other_calls:
        chunks += [
            _chunk(1, {"tool_calls": [_header(0, "call_b0", "get_weather")]}),
            _chunk(1, {"tool_calls": [_args(0, '{"city":')]}),
        ]
    if first_call:
        chunks.append(_chunk(0, {"tool_calls": [_args(0, first_call[half:])]}))
    if other_calls:
        chunks += [
            _chunk(1, {"tool_calls": [_args(0, '"Oslo"}')]}),
            _chunk(1, {"tool_calls": [_header(1, "call_b1", "list_cities")]}),
            _chunk(1, {"tool_calls": [_args(1, "{}")]}),
        ]
    chunks += [
        _chunk(0, {}, "tool_calls" if first_call else "stop"),
        _chunk(1, {}, "tool_calls" if other_calls else "stop"),
        {**ENVELOPE, "object": "chat.completion.chunk", "choices": [], "usage": USAGE},
    ]
    return b"".join(format_event(json.dumps(c, separators=(",", ":"))) for c in chunks) + b"data: [DONE]\n\n"


def chunks_of(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(e.data) for e in parse_sse(data) if e.data and e.data != "[DONE]"]


def accumulate(data: bytes) -> ChatCompletion:
    """What the SDK's stream helper makes of a stream (it rejects inconsistent ones)."""
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    for chunk in chunks_of(data):
        list(state.handle_chunk(ChatCompletionChunk.model_validate(chunk)))
    return state.get_final_completion()


def other_choice_calls(data: bytes) -> list[Any]:
    """Tool-call deltas of choices >= 1 anywhere in a stream."""
    return [
        c["delta"]["tool_calls"]
        for chunk in chunks_of(data)
        for c in chunk["choices"]
        if c["index"] != 0 and c["delta"].get("tool_calls")
    ]


def feed_all(data: bytes) -> tuple[Any, bytes, bytes]:
    """(assembler, bytes forwarded at once, bytes held) for a stream."""
    assembler = OPENAI_CHAT.assembler()
    events = parse_sse(data)
    flags = [assembler.feed(event) for event in events]
    forwarded = b"".join(e.raw for e, flag in zip(events, flags, strict=True) if flag)
    held = b"".join(e.raw for e in assembler.held)
    return assembler, forwarded, held


# -- whole completions -----------------------------------------------------------------------


def test_whole_other_choice_calls_are_removed_and_explained(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="sidecar"):
        reply = OPENAI_CHAT.read_reply(json.loads(completion()))
    assert [c.id for c in reply.calls] == ["call_a0"]  # choice 0 is enforced as before
    assert reply.rewritten
    body = OPENAI_CHAT.write_reply(reply)
    ChatCompletion.model_validate(body)
    first, other = body["choices"]
    assert first["message"]["tool_calls"] == [call("call_a0", "get_weather", PARIS)]
    assert first["finish_reason"] == "tool_calls"
    assert "tool_calls" not in other["message"]
    assert other["message"]["content"] == "Let me check.\n\n" + OTHER_CHOICE_NOTE
    assert other["finish_reason"] == "stop"
    assert other["index"] == 1 and other["logprobs"] is None
    assert reply.removed_calls == 2  # reported (counted and logged) by the telemetry filter


def test_whole_other_choice_without_text_gets_the_note_alone() -> None:
    body = json.loads(completion())
    body["choices"][1]["message"]["content"] = None
    other = OPENAI_CHAT.write_reply(OPENAI_CHAT.read_reply(body))["choices"][1]
    assert other["message"]["content"] == OTHER_CHOICE_NOTE


def test_whole_without_other_choice_calls_is_not_rewritten() -> None:
    body = json.loads(completion(other_calls=False))
    reply = OPENAI_CHAT.read_reply(body)
    assert not reply.rewritten
    assert reply.envelope == body


def test_repair_rounds_continue_choice_zero_only() -> None:
    request = {"model": "gpt-test", "n": 2, "messages": [{"role": "user", "content": "Weather?"}]}
    first = OPENAI_CHAT.read_reply(json.loads(completion()))
    repair = OPENAI_CHAT.repair_request(request, first, [(first.calls[0], {"status": "invalid_arguments"})])
    assert "n" not in repair

    last = json.loads(completion(first_call='{"city":"Lyon"}'))
    last["choices"] = last["choices"][:1]  # a repair round samples one choice
    merged = OPENAI_CHAT.merge_envelopes(first.envelope, OPENAI_CHAT.read_reply(last).envelope)
    assert merged["choices"][0] == last["choices"][0]
    assert merged["choices"][1] == first.envelope["choices"][1]  # as first sampled, screened
    assert "tool_calls" not in merged["choices"][1]["message"]


# -- streams -----------------------------------------------------------------------------------


def test_stream_other_choice_calls_never_pass(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="sidecar"):
        assembler, forwarded, held = feed_all(stream())
        reply = assembler.reply()
    assert [c.id for c in reply.calls] == ["call_a0"]
    assert reply.calls[0].arguments == {"city": "Paris"}
    out = forwarded + held  # what the agent gets when choice 0's calls are allowed
    assert other_choice_calls(out) == []
    final = accumulate(out)
    first, other = final.choices
    assert [(c.id, c.function.arguments) for c in first.message.tool_calls or []] == [("call_a0", PARIS)]
    assert first.finish_reason == "tool_calls"
    assert other.message.tool_calls is None
    assert other.message.content == "Let me check.\n\n" + OTHER_CHOICE_NOTE
    assert other.finish_reason == "stop"
    assert final.usage is not None and final.usage.total_tokens == USAGE["total_tokens"]
    assert reply.removed_calls == 2  # reported (counted and logged) by the telemetry filter


def test_stream_other_choice_text_passes_at_once_and_empty_chunks_are_dropped() -> None:
    _, forwarded, _ = feed_all(stream(first_call=None))
    # choice 0 has no call: nothing is held, choice 1's text and finish pass at once
    assert other_choice_calls(forwarded) == []
    sent = [c for chunk in chunks_of(forwarded) for c in chunk["choices"] if c["index"] == 1]
    assert [c["delta"] for c in sent] == [
        {"role": "assistant", "content": "", "refusal": None},
        {"content": "Let me check."},
        {"content": "\n\n" + OTHER_CHOICE_NOTE},
    ]
    assert sent[-1]["finish_reason"] == "stop"
    assert accumulate(forwarded).choices[0].message.content == "Sunny."


@pytest.mark.parametrize("first_call", [PARIS, None])
def test_stream_without_other_choice_calls_passes_byte_for_byte(first_call: str | None) -> None:
    data = stream(first_call=first_call, other_calls=False)
    _, forwarded, held = feed_all(data)
    assert forwarded + held == data


def test_stream_rerendered_tail_keeps_the_other_choices() -> None:
    """After a repair or block, choice 0's held part is re-rendered: choice 1's held chunks
    (screened) still reach the agent, so both choices finish."""
    assembler, forwarded, _ = feed_all(stream())
    reply = assembler.reply()
    blocked = Reply(reply.envelope, [reply.items[0], OPENAI_CHAT.text_item("[sidecar] blocked")], reply.complete)
    out = forwarded + OPENAI_CHAT.render_tail(blocked, assembler.cut, assembler.tail)
    assert other_choice_calls(out) == []
    final = accumulate(out)
    assert [c.finish_reason for c in final.choices] == ["stop", "stop"]
    assert final.choices[0].message.tool_calls is None
    assert final.choices[1].message.content == "Let me check.\n\n" + OTHER_CHOICE_NOTE


@pytest.mark.parametrize("index", [False, 0.0], ids=["false", "float"])
def test_a_choice_zero_written_oddly_is_read_as_the_sdk_reads_it(index: Any) -> None:
    """`"index": false` (or `0.0`) is choice 0 to the SDK's stream helper: the sidecar checks
    its calls as choice 0's and passes them on as such, instead of cutting them from what it
    forwards while counting them as delivered."""
    start = {"role": "assistant", "content": "", "refusal": None}
    chunks = [
        _chunk(index, start),
        _chunk(index, {"tool_calls": [_header(0, "call_a0", "get_weather")]}),
        _chunk(index, {"tool_calls": [_args(0, PARIS)]}),
        _chunk(index, {}, "tool_calls"),
    ]
    data = b"".join(format_event(json.dumps(c, separators=(",", ":"))) for c in chunks) + b"data: [DONE]\n\n"
    assembler, forwarded, held = feed_all(data)
    reply = assembler.reply()
    assert [(c.id, c.arguments) for c in reply.calls] == [("call_a0", {"city": "Paris"})]
    sdk = accumulate(forwarded + held)
    calls = sdk.choices[0].message.tool_calls or []
    assert [(c.id, c.function.arguments) for c in calls] == [("call_a0", PARIS)]
