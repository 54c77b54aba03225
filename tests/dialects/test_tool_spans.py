"""What the dialects tell the cost filter: usage in neutral form, and every tool call and result of
a request with its size (compact JSON of its core fields) and whether it is the newest turn."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sidecar.dialects import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES
from sidecar.dialects.base import json_length
from sidecar.model import SpanKind, TokenUsage


def compact(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


@pytest.mark.parametrize(
    "value",
    ["plain", 'quotes " and \\ and\nnewlines', {"a": [1, 2.5, None, True, False, {}], "b": []}, [], {}, -3, "é"],
)
def test_json_length_is_the_compact_json_length(value: Any) -> None:
    assert json_length(value) == compact(value)


def test_anthropic_spans_sizes_and_newest_turn() -> None:
    old_use = {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "a"}, "caller": {"type": "direct"}}
    old_result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "hit"}]}
    new_use = {"type": "tool_use", "id": "toolu_2", "name": "fetch", "input": {}}
    new_result = {"type": "tool_result", "tool_use_id": "toolu_2", "content": "page", "is_error": True}
    body = {
        "messages": [
            {"role": "user", "content": "find it"},
            {"role": "assistant", "content": [{"type": "text", "text": "Looking."}, old_use]},
            {"role": "user", "content": [old_result]},
            {"role": "assistant", "content": [new_use]},
            {"role": "user", "content": [new_result, {"type": "text", "text": "go on"}]},
        ]
    }
    spans = ANTHROPIC.tool_spans(body)
    assert [(s.kind, s.call_id, s.name, s.latest) for s in spans] == [
        (SpanKind.CALL, "toolu_1", "search", False),
        (SpanKind.RESULT, "toolu_1", None, False),
        (SpanKind.CALL, "toolu_2", "fetch", True),
        (SpanKind.RESULT, "toolu_2", None, True),
    ]
    # The core of each block: type, id, name and payload (extra keys like `caller` not counted).
    core = [
        {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "a"}},
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "hit"}]},
        {"type": "tool_use", "id": "toolu_2", "name": "fetch", "input": {}},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "page"},
    ]
    assert [s.size for s in spans] == [compact(c) for c in core]


def test_anthropic_spans_skip_what_is_not_a_message_or_blocks() -> None:
    use = {"type": "tool_use", "id": "toolu_2", "name": "fetch", "input": {}}
    body = {
        "messages": [
            "junk",
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a"}]},
            {"role": "assistant", "content": [use, "not a block"]},
            42,
            {"role": "user", "content": "text only"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "b"}]},
            {"role": "assistant"},
        ]
    }
    spans = ANTHROPIC.tool_spans(body)
    # The latest model turn is the last assistant message, whatever lies between the messages.
    assert [(s.kind, s.call_id, s.latest) for s in spans] == [
        (SpanKind.RESULT, "toolu_1", False),
        (SpanKind.CALL, "toolu_2", False),
        (SpanKind.RESULT, "toolu_2", False),
    ]
    body["messages"].pop()
    assert [s.latest for s in ANTHROPIC.tool_spans(body)] == [False, True, True]
    assert ANTHROPIC.tool_spans({"messages": "nope"}) == []


def test_chat_spans_with_legacy_functions() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"k": "v"}'}}
    body = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "42"},
            {"role": "assistant", "content": None, "function_call": {"name": "legacy", "arguments": "{}"}},
            {"role": "function", "name": "legacy", "content": "ok"},
        ]
    }
    spans = OPENAI_CHAT.tool_spans(body)
    assert [(s.kind, s.call_id, s.name, s.latest) for s in spans] == [
        (SpanKind.CALL, "call_1", "lookup", False),
        (SpanKind.RESULT, "call_1", None, False),
        (SpanKind.CALL, "function_call@3", "legacy", True),
        (SpanKind.RESULT, "function_call@3", "legacy", True),
    ]
    assert spans[0].size == compact(call)
    assert spans[1].size == compact({"role": "tool", "tool_call_id": "call_1", "content": "42"})


def test_responses_spans_newest_turn_is_the_last_run_of_model_items() -> None:
    body = {
        "input": [
            {"role": "user", "content": "go"},
            {"type": "function_call", "call_id": "c1", "name": "step", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "next"},
            {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAA"},
            {"type": "function_call", "call_id": "c2", "name": "step", "arguments": '{"n": 2}'},
            {"type": "function_call_output", "call_id": "c2", "output": "done"},
        ]
    }
    spans = OPENAI_RESPONSES.tool_spans(body)
    assert [(s.call_id, s.kind, s.latest) for s in spans] == [
        ("c1", SpanKind.CALL, False),
        ("c1", SpanKind.RESULT, False),
        ("c2", SpanKind.CALL, True),
        ("c2", SpanKind.RESULT, True),
    ]
    assert spans[3].size == compact({"type": "function_call_output", "call_id": "c2", "output": "done"})
    assert OPENAI_RESPONSES.tool_spans({"input": "just text"}) == []


def test_history_at_the_provider() -> None:
    assert OPENAI_RESPONSES.history_at_provider({"previous_response_id": "resp_1", "input": []})
    assert OPENAI_RESPONSES.history_at_provider({"conversation": "conv_1", "input": []})
    assert not OPENAI_RESPONSES.history_at_provider({"input": [], "store": False})
    assert not ANTHROPIC.history_at_provider({"messages": []})


def test_usage_in_neutral_form() -> None:
    anthropic = {
        "input_tokens": 10,
        "cache_read_input_tokens": 700,
        "cache_creation_input_tokens": 90,
        "output_tokens": 50,
        "output_tokens_details": {"thinking_tokens": 20},
    }
    assert ANTHROPIC.usage({"usage": anthropic}) == TokenUsage(800, 700, 90, 50, 20)
    chat = {
        "prompt_tokens": 800,
        "completion_tokens": 50,
        "prompt_tokens_details": {"cached_tokens": 700},
        "completion_tokens_details": {"reasoning_tokens": 20},
    }
    assert OPENAI_CHAT.usage({"usage": chat}) == TokenUsage(800, 700, 0, 50, 20)
    responses = {
        "input_tokens": 800,
        "input_tokens_details": {"cached_tokens": 700},
        "output_tokens": 50,
        "output_tokens_details": {"reasoning_tokens": 20},
    }
    assert OPENAI_RESPONSES.usage({"usage": responses}) == TokenUsage(800, 700, 0, 50, 20)
    assert TokenUsage(800, 700, 90, 50, 20).uncached == 10


@pytest.mark.parametrize("dialect", [ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES])
def test_usage_absent_or_odd(dialect: Any) -> None:
    assert dialect.usage({}) is None
    assert dialect.usage({"usage": None}) is None
    odd = {
        "input_tokens": "12",
        "prompt_tokens": True,
        "output_tokens": -4,
        "completion_tokens": float("nan"),
        "prompt_tokens_details": "x",
    }
    assert dialect.usage({"usage": odd}) == TokenUsage()
