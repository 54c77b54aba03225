"""Anthropic Messages (`POST /v1/messages`) as the real API writes it (PROTOCOLS.md §1).

Layout follows the 2025-26 recordings: `model` first in the message, `caller` on tool_use,
`stop_details`, a `ping` after the first block start, tool input as `input_json_delta`
fragments starting with `""`, and JSON padded with spaces before the closing brace.

Message threads (`anthropic-beta: message-threads-2026-08-12`) as the API documents them: a
`thread: {"type": "create"}` request is held under its response's `id`; a `{"type":
"continue", "previous_message_id": …}` request sends only the new messages, without `system`
and `tools` (the thread keeps the create request's), and is checked against the whole held
conversation (every `tool_use` answered). Each response can be continued once
(`thread_already_continued`); an unknown id is `thread_not_found` (404); a `thread` without
the beta header is refused.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from sidecar.scripted.script import ANTHROPIC, ToolCallSpec, UpstreamError
from sidecar.scripted.wire import (
    Event,
    HttpReply,
    Ids,
    Part,
    PartKind,
    Reply,
    WireFormat,
    spaced_json,
    split_fragments,
)

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}

_DELTA_KEYS: dict[PartKind, tuple[str, str]] = {
    "thinking": ("thinking_delta", "thinking"),
    "text": ("text_delta", "text"),
    "call": ("input_json_delta", "partial_json"),
}

PING = Event("ping", '{"type": "ping"}')

THREADS_BETA = "message-threads-2026-08-12"
# Fields a thread takes from its create request; a `continue` must not repeat them.
THREAD_FIELDS = ("system", "tools")


@dataclass(slots=True)
class HeldThread:
    """A thread as the server holds it after one response: the whole conversation up to and
    including that response, what it was created with, and whether it was continued."""

    messages: list[Any]
    model: str
    system: Any
    tools: Any
    continued: bool = False


class AnthropicFormat(WireFormat):
    protocol = ANTHROPIC
    path = "/v1/messages"
    default_model = "claude-sonnet-4-5"
    empty_arguments = ""
    request_id_header = "request-id"
    models: ClassVar[list[str]] = ["claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-1"]

    def __init__(self, ids: Ids, pad_json: bool = True) -> None:
        super().__init__(ids)
        self.pad_json = pad_json
        self.threads: dict[str, HeldThread] = {}  # response id -> the thread held under it

    def reset(self) -> None:
        self.threads.clear()

    # ---- message threads -------------------------------------------------------------------

    def check_headers(self, body: dict[str, Any], headers: dict[str, str]) -> HttpReply | None:
        if "thread" in body and THREADS_BETA not in headers.get("anthropic-beta", ""):
            return self.invalid_request("thread: Extra inputs are not permitted")
        return None

    def _held(self, body: dict[str, Any]) -> tuple[HeldThread | None, HttpReply | None]:
        """The thread a `continue` resumes, or the error the API gives for it."""
        thread = body.get("thread")
        if not isinstance(thread, dict) or thread.get("type") != "continue":
            return None, None
        previous = str(thread.get("previous_message_id"))
        held = self.threads.get(previous)
        if held is None:
            message = f"No thread state was found for previous_message_id {previous}; replay the conversation."
            return None, self.invalid_request(message, status=404, code="thread_not_found", type_="not_found_error")
        if held.continued:
            message = (
                f"The response {previous} has already been continued, and each response can be continued "
                "only once. Continue from the thread's most recent response id."
            )
            return None, self.invalid_request(message, code="thread_already_continued")
        repeated = [f"`{f}`" for f in THREAD_FIELDS if f in body]
        if repeated:
            message = (
                f"{' and '.join(repeated)} cannot be sent on a thread continue: the thread keeps the values "
                "of its create request."
            )
            return None, self.invalid_request(message, code="thread_fingerprint_mismatch")
        if body.get("model") != held.model:
            message = "`model` differs from the value stored with the thread."
            return None, self.invalid_request(message, code="thread_fingerprint_mismatch")
        return held, None

    def remember(self, reply: Reply) -> None:
        request = reply.request
        thread = request.get("thread")
        if not isinstance(thread, dict):
            return
        held, _ = self._held(request)
        answer = {"role": "assistant", "content": self.body(reply)["content"]}
        new = [m for m in request.get("messages") or [] if isinstance(m, dict)]
        if held is not None:
            held.continued = True
            history = [*held.messages, *new, answer]
            self.threads[reply.id] = HeldThread(history, held.model, held.system, held.tools)
        else:
            model = request.get("model")
            self.threads[reply.id] = HeldThread([*new, answer], str(model), request.get("system"), request.get("tools"))

    def reply_id(self) -> str:
        return "msg_01" + self.ids.alnum(22)

    def call_id(self) -> str:
        return "toolu_01" + self.ids.alnum(22)

    def request_id(self) -> str:
        return "req_011C" + self.ids.alnum(20)

    def arguments_text(self, spec: ToolCallSpec) -> str:
        if spec.raw_arguments is not None:
            return spec.raw_arguments
        return spaced_json(spec.arguments) if spec.arguments else ""

    def argument_fragments(self, text: str) -> list[str]:
        # The first fragment is always "" and a no-argument call sends nothing else.
        return ["", *split_fragments(text)]

    # ---- pairing ---------------------------------------------------------------------------

    def check(self, body: dict[str, Any]) -> HttpReply | None:
        held, refused = self._held(body)
        if refused is not None:
            return refused
        messages = body.get("messages")
        if not isinstance(messages, list):
            return None
        if held is not None:  # checked as the whole conversation the thread holds
            messages = [*held.messages, *messages]
        uses: list[str] = []  # tool_use ids of the previous message when it was the assistant's
        use_index = -1
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                continue
            blocks = [b for b in _blocks(message) if isinstance(b, dict)]
            role = message.get("role")
            answered: set[str] = set()
            if role == "user":
                for k, block in enumerate(_blocks(message)):
                    if not isinstance(block, dict) or block.get("type") != "tool_result":
                        continue
                    tid = str(block.get("tool_use_id"))
                    if tid not in uses:
                        return self.invalid_request(
                            f"messages.{i}.content.{k}: unexpected `tool_use_id` found in "
                            f"`tool_result` blocks: {tid}. Each `tool_result` block must have "
                            "a corresponding `tool_use` block in the previous message."
                        )
                    answered.add(tid)
            missing = [u for u in uses if u not in answered]
            if missing:
                return self._unanswered(use_index, missing)
            uses = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]
            uses = uses if role == "assistant" else []
            use_index = i
        return self._unanswered(use_index, uses) if uses else None

    def _unanswered(self, index: int, ids: list[str]) -> HttpReply:
        return self.invalid_request(
            f"messages.{index}: `tool_use` ids were found without `tool_result` blocks "
            f"immediately after: {', '.join(ids)}. Each `tool_use` block must have a "
            "corresponding `tool_result` block in the next message."
        )

    # ---- errors ----------------------------------------------------------------------------

    def error_type(self, status: int) -> str:
        return _ERROR_TYPES.get(status, "api_error")

    def error_body(
        self, status: int, type_: str, message: str, code: str | None, param: str | None, request_id: str
    ) -> dict[str, Any]:
        error: dict[str, Any] = {"type": type_, "message": message}
        if code:  # `error.details.error_code`, which the SDK reads as `error_code`
            error["details"] = {"error_code": code}
        return {"type": "error", "error": error, "request_id": request_id}

    def stream_error(self, reply: Reply, err: UpstreamError) -> list[Event]:
        type_ = err.type or ("overloaded_error" if err.status in (500, 529) else self.error_type(err.status))
        message = err.message or ("Overloaded" if type_ == "overloaded_error" else "Error")
        return [
            Event(
                "error",
                {
                    "type": "error",
                    "error": {"details": None, "type": type_, "message": message},
                    "request_id": reply.request_id,
                },
            )
        ]

    # ---- rendering -------------------------------------------------------------------------

    def _stop_reason(self, reply: Reply) -> str:
        if reply.stop_reason:
            return reply.stop_reason
        if reply.truncated:
            return "max_tokens"
        return "tool_use" if any(not _server(p) for p in reply.calls) else "end_turn"

    def _usage(self, reply: Reply, output_tokens: int) -> dict[str, Any]:
        return {
            "input_tokens": reply.input_tokens,
            "cache_creation_input_tokens": reply.cache_write_tokens,
            "cache_read_input_tokens": reply.cache_read_tokens,
            "cache_creation": {"ephemeral_5m_input_tokens": reply.cache_write_tokens, "ephemeral_1h_input_tokens": 0},
            "output_tokens": output_tokens,
            "service_tier": "standard",
            "inference_geo": "not_available",
            **reply.usage_extra,
        }

    def _message(
        self,
        reply: Reply,
        content: list[dict[str, Any]],
        stop_reason: str | None,
        usage: dict[str, Any],
        streaming: bool,
    ) -> dict[str, Any]:
        message: dict[str, Any] = {
            "model": reply.model,
            "id": reply.id,
            "type": "message",
            "role": "assistant",
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
        }
        if streaming:
            message["stop_details"] = None
        message["usage"] = usage
        return message

    def head(self, reply: Reply) -> list[Event]:
        message = self._message(reply, [], None, self._usage(reply, 1), streaming=True)
        events = [Event("message_start", {"type": "message_start", "message": message})]
        return events if reply.parts else [*events, PING]

    def _initial_block(self, part: Part) -> dict[str, Any]:
        if part.kind == "thinking":
            return {"type": "thinking", "thinking": "", "signature": ""}
        if part.kind == "text":
            return {"type": "text", "text": ""}
        if _server(part):
            return {"type": "server_tool_use", "id": "srvtoolu_01" + part.call_id[8:], "name": part.name, "input": {}}
        return {"type": "tool_use", "id": part.call_id, "name": part.name, "input": {}, "caller": {"type": "direct"}}

    def open_part(self, reply: Reply, part: Part, index: int) -> list[Event]:
        start = Event(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": self._initial_block(part)},
        )
        return [start, PING] if index == 0 else [start]

    def delta(self, reply: Reply, part: Part, index: int, fragment: str) -> list[Event]:
        delta_type, key = _DELTA_KEYS[part.kind]
        return [
            Event(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": {"type": delta_type, key: fragment}},
            )
        ]

    def close_part(self, reply: Reply, part: Part, index: int) -> list[Event]:
        if part.truncated:
            return []  # max_tokens inside the input: the block never stops
        stop = Event("content_block_stop", {"type": "content_block_stop", "index": index})
        if part.kind != "thinking":
            return [stop]
        signature = Event(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "signature_delta", "signature": part.signature},
            },
        )
        return [signature, stop]

    def tail(self, reply: Reply) -> list[Event]:
        usage: dict[str, Any] = {
            "input_tokens": reply.input_tokens,
            "cache_creation_input_tokens": reply.cache_write_tokens,
            "cache_read_input_tokens": reply.cache_read_tokens,
            "output_tokens": reply.output_tokens,
        }
        if reply.reasoning_tokens:
            usage["output_tokens_details"] = {"thinking_tokens": reply.reasoning_tokens}
        usage.update(reply.usage_extra)
        delta = {"stop_reason": self._stop_reason(reply), "stop_sequence": None, "stop_details": None}
        return [
            Event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}),
            Event("message_stop", {"type": "message_stop"}),
        ]

    def _final_block(self, part: Part) -> dict[str, Any]:
        if part.kind == "thinking":
            return {"type": "thinking", "thinking": part.text, "signature": part.signature}
        if part.kind == "text":
            return {"type": "text", "text": part.text}
        if _server(part):
            block_id = "srvtoolu_01" + part.call_id[8:]
            return {"type": "server_tool_use", "id": block_id, "name": part.name, "input": _input_object(part)}
        return {
            "type": "tool_use",
            "id": part.call_id,
            "name": part.name,
            "input": _input_object(part),
            "caller": {"type": "direct"},
        }

    def body(self, reply: Reply) -> dict[str, Any]:
        content = [self._final_block(p) for p in reply.parts if not p.truncated]
        usage = self._usage(reply, reply.output_tokens)
        return self._message(reply, content, self._stop_reason(reply), usage, streaming=False)

    def payload(self, event: Event, seq: int) -> bytes:
        data = super().payload(event, seq)
        if not self.pad_json or not isinstance(event.data, dict):
            return data
        # Anthropic pads some events with spaces before the last brace: proxies must parse,
        # never byte-match, so the scripted server does it too.
        crc = zlib.crc32(data)
        width = 0 if crc % 3 == 0 else crc % 16
        return data[:-1] + b" " * width + b"}"


def _server(part: Part) -> bool:
    """A call Anthropic runs itself (`server_tool_use`, e.g. web_search)."""
    return part.spec is not None and part.spec.item == "server_tool_use"


def _blocks(message: dict[str, Any]) -> list[Any]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def _input_object(part: Part) -> Any:
    """The `input` of a non-streamed tool_use: raw arguments are parsed when they can be."""
    spec = part.spec
    if spec is not None and spec.raw_arguments is None:
        return spec.arguments or {}
    try:
        return orjson.loads(part.text) if part.text else {}
    except orjson.JSONDecodeError:
        return {}
