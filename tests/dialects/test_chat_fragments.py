"""Chat `tool_calls` fragments as the stream assembler reads them: continuations of a call's
arguments (most events, read in fewer steps) assemble what the OpenAI SDK assembles, and a
later fragment that changes a call's type or gives its id or name again is refused.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from sidecar.dialects import OPENAI_CHAT
from sidecar.dialects.sse import format_event, parse_sse

ENVELOPE = {
    "id": "chatcmpl-fragments",
    "created": 1747148049,
    "model": "gpt-4o-mini",
    "object": "chat.completion.chunk",
}


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {**ENVELOPE, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **extra}


def _fragment(index: int, **fields: Any) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, **fields}]}


def _stream(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(format_event(orjson.dumps(c)) for c in chunks) + format_event(b"[DONE]")


def _assemble(chunks: list[dict[str, Any]]) -> Any:
    assembler = OPENAI_CHAT.assembler()
    for event in parse_sse(_stream(chunks)):
        assembler.feed(event)
    return assembler


def _start(index: int, call_id: str, name: str, kind: str = "function") -> dict[str, Any]:
    text_key = "input" if kind == "custom" else "arguments"
    return _fragment(index, id=call_id, type=kind, **{kind: {"name": name, text_key: ""}})


def _more(index: int, text: str) -> dict[str, Any]:
    return _fragment(index, function={"arguments": text})


def test_continuations_assemble_what_the_sdk_assembles() -> None:
    chunks = [
        _chunk({"role": "assistant", "content": ""}, usage=None),
        _chunk({"content": "Looking."}, usage=None),
        _chunk(_start(0, "call_a", "read_file"), usage=None),
        *(_chunk(_more(0, piece), usage=None) for piece in ['{"pa', 'th": "a', '.py"}']),
        _chunk(_start(1, "call_b", "grep")),
        *(_chunk(_more(1, piece)) for piece in ['{"pat', 'tern": "x"}']),
        _chunk({}, "tool_calls"),
    ]
    assembler = _assemble(chunks)
    assert assembler.violation is None
    reply = assembler.reply()
    calls = [(c.id, c.name, c.arguments) for c in reply.calls]
    assert calls == [("call_a", "read_file", {"path": "a.py"}), ("call_b", "grep", {"pattern": "x"})]
    state = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    sdk = state.get_final_completion().choices[0].message.tool_calls or []
    assert [(c.id, c.function.name, c.function.arguments) for c in sdk] == [
        (c.id, c.name, c.raw_arguments) for c in reply.calls
    ]


def test_a_continuation_may_start_a_call_the_stream_had_not_named() -> None:
    """Arguments for an index no fragment opened: the call is opened (no id, no name), as the
    general reading does; its name stays empty, so the call is judged as undeclared."""
    assembler = _assemble([_chunk(_more(0, "{}")), _chunk({}, "tool_calls")])
    assert assembler.violation is None
    assert [(c.id, c.name) for c in assembler.reply().calls] == [("", "")]


@pytest.mark.parametrize(
    ("later", "why"),
    [
        (_more(0, '"}'), "changes its type"),  # a custom call continued as a function
        (_fragment(0, function={"name": "x"}), "changes its type"),
    ],
)
def test_a_custom_call_continued_as_a_function_is_refused(later: dict[str, Any], why: str) -> None:
    assembler = _assemble([_chunk(_start(0, "call_c", "patch", kind="custom")), _chunk(later)])
    assert assembler.violation is not None and why in assembler.violation


@pytest.mark.parametrize(
    ("later", "field"),
    [
        (_fragment(0, function={"name": "read_file"}), "name"),
        (_fragment(0, id="call_a", function={"arguments": "{}"}), "id"),
        (_fragment(0, function={"name": "_all", "arguments": "{}"}), "name"),
    ],
)
def test_a_later_fragment_that_names_the_call_again_is_refused(later: dict[str, Any], field: str) -> None:
    assembler = _assemble([_chunk(_start(0, "call_a", "read_file")), _chunk(later)])
    assert assembler.violation is not None and f"gives its {field} again" in assembler.violation
