"""OpenAI Chat Completions (`POST /v1/chat/completions`) as the real API writes it (§2).

Streams are `data:`-only chunks: a role chunk, content deltas, per call a header chunk (id,
name, `arguments:""`) then argument fragments, one finish chunk, the usage chunk when
`stream_options.include_usage`, then `data: [DONE]`. Non-streaming bodies are pretty-printed,
as OpenAI sends them.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sidecar.scripted.script import OPENAI_CHAT, UpstreamError
from sidecar.scripted.wire import (
    Event,
    HttpReply,
    Part,
    Reply,
    WireFormat,
    compact_json,
    obfuscation,
)


def openai_error_type(status: int) -> str:
    """OpenAI's error `type` for an HTTP status (shared by Chat and Responses)."""
    if status == 429:
        return "requests"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def openai_error_body(message: str, type_: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


class OpenAIFormat(WireFormat):
    """What Chat Completions and Responses share: ids, error shapes, model list."""

    default_model = "gpt-4o-mini"
    pretty_body = True
    models: ClassVar[list[str]] = ["gpt-4o-mini", "gpt-4.1", "gpt-5.5"]

    def call_id(self) -> str:
        return "call_" + self.ids.alnum(24)

    def request_id(self) -> str:
        return "req_" + self.ids.hex(32)

    def error_type(self, status: int) -> str:
        return openai_error_type(status)

    def http_error(self, err: UpstreamError, request_id: str) -> HttpReply:
        reply = super().http_error(err, request_id)
        if err.status == 429 and err.code is None:
            reply.body["error"]["code"] = "rate_limit_exceeded"
        return reply

    def error_body(
        self, status: int, type_: str, message: str, code: str | None, param: str | None, request_id: str
    ) -> dict[str, Any]:
        return openai_error_body(message, type_, param, code)


def _call_kind(part: Part) -> tuple[str, str]:
    """A tool call's `type` and the field of its text: a custom tool takes `input` text."""
    if part.spec is not None and part.spec.item == "custom":
        return "custom", "input"
    return "function", "arguments"


class ChatFormat(OpenAIFormat):
    protocol = OPENAI_CHAT
    path = "/v1/chat/completions"
    named_events = False

    def reply_id(self) -> str:
        return "chatcmpl-" + self.ids.alnum(29)

    # ---- pairing ---------------------------------------------------------------------------

    def check(self, body: dict[str, Any]) -> HttpReply | None:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return None
        pending: list[str] = []  # call ids of the last assistant message still to be answered
        run_ids: set[str] = set()  # ids the current run of tool messages may answer
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                continue
            if message.get("role") == "tool":
                call_id = str(message.get("tool_call_id"))
                if call_id not in run_ids:
                    return self.invalid_request(
                        "Invalid parameter: messages with role 'tool' must be a response to a "
                        "preceeding message with 'tool_calls'.",
                        param=f"messages.[{i}].role",
                    )
                pending = [p for p in pending if p != call_id]
                continue
            if pending:
                return self._unanswered(i, pending)
            calls = message.get("tool_calls") if message.get("role") == "assistant" else None
            pending = [str(c.get("id")) for c in calls or [] if isinstance(c, dict)]
            run_ids = set(pending)
        return self._unanswered(len(messages), pending) if pending else None

    def _unanswered(self, index: int, ids: list[str]) -> HttpReply:
        return self.invalid_request(
            "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {', '.join(ids)}",
            param=f"messages.[{index}].role",
        )

    def stream_error(self, reply: Reply, err: UpstreamError) -> list[Event]:
        error: dict[str, Any] = {
            "message": err.message or "The server had an error while processing your request. Sorry about that!",
            "type": err.type or openai_error_type(err.status),
        }
        if err.code is not None:
            error["code"] = err.code
        return [Event(None, {"error": error})]

    # ---- rendering -------------------------------------------------------------------------

    def _finish_reason(self, reply: Reply) -> str:
        if reply.stop_reason:
            return reply.stop_reason
        if reply.truncated:
            return "length"
        return "tool_calls" if reply.calls else "stop"

    def _usage(self, reply: Reply) -> dict[str, Any]:
        return {
            "prompt_tokens": reply.input_tokens,
            "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
            "prompt_tokens_details": {"cached_tokens": reply.cache_read_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": reply.reasoning_tokens,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
            **reply.usage_extra,
        }

    def _options(self, reply: Reply) -> dict[str, Any]:
        options = reply.request.get("stream_options")
        return options if isinstance(options, dict) else {}

    def _chunk(self, reply: Reply, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> Event:
        chunk: dict[str, Any] = {
            "id": reply.id,
            "object": "chat.completion.chunk",
            "created": reply.created,
            "model": reply.model,
            "service_tier": "default",
            "system_fingerprint": "fp_5c7a1e0b9d",
            "choices": choices,
        }
        options = self._options(reply)
        if options.get("include_usage"):
            chunk["usage"] = usage
        if options.get("include_obfuscation", True):
            chunk["obfuscation"] = obfuscation(compact_json(choices))
        return Event(None, chunk)

    def _delta(self, reply: Reply, delta: dict[str, Any], finish_reason: str | None = None) -> list[Event]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return [self._chunk(reply, [choice])]

    def head(self, reply: Reply) -> list[Event]:
        first_is_text = bool(reply.parts) and reply.parts[0].kind == "text"
        delta = {"role": "assistant", "content": "" if first_is_text else None, "refusal": None}
        return self._delta(reply, delta)

    def open_part(self, reply: Reply, part: Part, index: int) -> list[Event]:
        if part.kind != "call":
            return []
        kind, key = _call_kind(part)
        header = {"index": part.ordinal, "id": part.call_id, "type": kind, kind: {"name": part.name, key: ""}}
        return self._delta(reply, {"tool_calls": [header]})

    def delta(self, reply: Reply, part: Part, index: int, fragment: str) -> list[Event]:
        if part.kind == "text":
            return self._delta(reply, {"content": fragment})
        if part.kind == "call":
            kind, key = _call_kind(part)
            piece = {"index": part.ordinal, kind: {key: fragment}}
            return self._delta(reply, {"tool_calls": [piece]})
        return []  # Chat Completions never shows reasoning; it only counts its tokens

    def close_part(self, reply: Reply, part: Part, index: int) -> list[Event]:
        return []

    def tail(self, reply: Reply) -> list[Event]:
        events = self._delta(reply, {}, self._finish_reason(reply))
        if self._options(reply).get("include_usage"):
            events.append(self._chunk(reply, [], self._usage(reply)))
        return [*events, Event(None, "[DONE]")]

    def body(self, reply: Reply) -> dict[str, Any]:
        texts = [p.text for p in reply.parts if p.kind == "text"]
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
        if reply.calls:
            message["tool_calls"] = [
                {"id": p.call_id, "type": kind, kind: {"name": p.name, key: p.text}}
                for p in reply.calls
                for kind, key in [_call_kind(p)]
            ]
        message["refusal"] = None
        message["annotations"] = []
        return {
            "id": reply.id,
            "object": "chat.completion",
            "created": reply.created,
            "model": reply.model,
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": self._finish_reason(reply)}
            ],
            "usage": self._usage(reply),
            "service_tier": "default",
            "system_fingerprint": "fp_5c7a1e0b9d",
        }
