"""OpenAI Chat Completions (`POST /v1/chat/completions`).

Items of choice 0: the message text first (always present, possibly empty), then one item per
tool call. `tool_calls[].index` counts calls only.

Choices ≥ 1 (`n > 1`): a repair round continues one conversation, so only choice 0 gets
the guards and repair rounds. The tool calls of the other choices are removed, never checked:
`finish_reason` "tool_calls" becomes "stop" and the content ends with `OTHER_CHOICE_NOTE`.
Their text passes; in a stream their tool-call fragments are cut out of the chunks (a chunk
left empty is dropped) and their finish chunk carries the note. Replies without such calls
pass byte for byte. Repair rounds ask for one choice and are spliced into choice 0 only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import orjson

from sidecar.dialects.base import (
    Dialect,
    Item,
    ItemKind,
    Reply,
    StreamAssembler,
    TailState,
    as_dict,
    as_index,
    as_list,
    compact,
    event_json,
    parse_arguments,
)
from sidecar.dialects.sse import SSEEvent, format_event
from sidecar.model import EchoedCall, Provider, RequestView, ToolCall, ToolResult
from sidecar.telemetry.logs import log_event

log = logging.getLogger("sidecar.dialects.openai_chat")

OTHER_CHOICE_NOTE = "[sidecar] tool calls are checked in the first choice only; request n=1 for tool use"

OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    502: "upstream_error",
    504: "timeout",
}

_DONE = b"data: [DONE]\n\n"
_ENVELOPE_KEYS = ("id", "object", "created", "model", "service_tier", "system_fingerprint")


def openai_error_body(status: int, message: str) -> dict[str, Any]:
    kind = OPENAI_ERROR_TYPES.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return ""


def result_size(content: Any) -> int:
    return len(content.encode()) if isinstance(content, str) else len(orjson.dumps(content))


def _call(wire: dict[str, Any], ordinal: int) -> ToolCall:
    function = as_dict(wire.get("function"))
    raw = function.get("arguments")
    raw = raw if isinstance(raw, str) else ("" if raw is None else compact(raw))
    arguments, error = parse_arguments(raw)
    return ToolCall(str(wire.get("id", "")), str(function.get("name", "")), arguments, raw, ordinal, error)


def _with_note(text: Any) -> str:
    return f"{text}\n\n{OTHER_CHOICE_NOTE}" if isinstance(text, str) and text else OTHER_CHOICE_NOTE


def _without_calls(choice: Any) -> tuple[Any, int]:
    """A non-streamed choice ≥ 1 with its tool calls removed and explained, and how many."""
    message = as_dict(as_dict(choice).get("message"))
    calls = message.get("tool_calls")
    if not calls:
        return choice, 0
    message = {k: v for k, v in message.items() if k != "tool_calls"}
    message["content"] = _with_note(message.get("content"))
    finish = choice.get("finish_reason")
    stripped = {**choice, "message": message, "finish_reason": "stop" if finish == "tool_calls" else finish}
    return stripped, len(calls) if isinstance(calls, list) else 1


def _finish_reason(reply: Reply, original: Any) -> Any:
    if reply.calls:
        return "tool_calls"
    return "stop" if original == "tool_calls" else original


class OpenAIChatDialect(Dialect):
    name = "openai_chat"
    provider = Provider.OPENAI
    summary_keys = ("choices",)

    def read_request(self, body: dict[str, Any]) -> RequestView:
        view = RequestView(model=str(body.get("model", "")), stream=bool(body.get("stream")))
        view.declarations = self.declarations(body)
        view.session_hint = body.get("user") or body.get("prompt_cache_key") or None
        messages = [m for m in as_list(body.get("messages")) if isinstance(m, dict)]
        system = next((m for m in messages if m.get("role") in ("system", "developer")), {})
        first_user = next((m for m in messages if m.get("role") == "user"), {})
        view.session_seed = content_text(system.get("content")) + "\x00" + content_text(first_user.get("content"))
        for message in messages:
            role = message.get("role")
            if role == "assistant":
                view.results = []
                for wire in as_list(message.get("tool_calls")):
                    function = as_dict(as_dict(wire).get("function"))
                    wire = as_dict(wire)
                    view.echoed_calls.append(
                        EchoedCall(str(wire.get("id")), str(function.get("name")), function.get("arguments"))
                    )
            elif role == "tool":
                content = message.get("content", "")
                call_id = str(message.get("tool_call_id"))
                view.results.append(ToolResult(call_id, content, False, message.get("name"), result_size(content)))
        return view

    def client_tool_name(self, tool: Any) -> str | None:
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        return str(function["name"]) if isinstance(function, dict) and "name" in function else None

    def forced_tool(self, choice: Any) -> str | None:
        function = choice.get("function") if isinstance(choice, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        return name if isinstance(name, str) else None

    def tool_spec(self, tool: dict[str, Any]) -> tuple[Any, Any]:
        function = tool["function"]
        return function.get("parameters"), function.get("description")

    def repair_request(
        self, request: dict[str, Any], reply: Reply, outputs: list[tuple[ToolCall, dict[str, Any]]]
    ) -> dict[str, Any]:
        text = "".join(str(i.wire.get("text", "")) for i in reply.items if i.kind is ItemKind.TEXT)
        assistant = {
            "role": "assistant",
            "content": text or None,
            "tool_calls": [i.wire for i in reply.items if i.kind is ItemKind.CALL],
        }
        tool_messages = [
            {"role": "tool", "tool_call_id": call.id, "content": compact(payload)} for call, payload in outputs
        ]
        body = {**request, "messages": [*as_list(request.get("messages")), assistant, *tool_messages]}
        body.pop("stream_options", None)
        body.pop("n", None)  # the round continues choice 0 only (see merge_envelopes)
        body["stream"] = False
        return body

    def merge_envelopes(self, first: dict[str, Any], last: dict[str, Any]) -> dict[str, Any]:
        """Choice 0 from the last repair round; the other choices as first sampled."""
        envelope = super().merge_envelopes(first, last)
        others = as_list(first.get("choices"))[1:]
        if others:
            envelope["choices"] = [*as_list(last.get("choices"))[:1], *others]
        return envelope

    def read_reply(self, body: dict[str, Any]) -> Reply:
        envelope = dict(body)
        choices = as_list(body.get("choices"))
        message = as_dict(as_dict(choices[0]).get("message")) if choices else {}
        content = message.get("content")
        items = [self.text_item(content if isinstance(content, str) else "")]
        calls = [wire for wire in as_list(message.get("tool_calls")) if isinstance(wire, dict)]
        for ordinal, wire in enumerate(calls):
            items.append(Item(ItemKind.CALL, wire, _call(wire, ordinal)))
        stripped = [_without_calls(choice) for choice in choices[1:]]
        removed = sum(count for _, count in stripped)
        if removed:
            envelope["choices"] = [choices[0], *(choice for choice, _ in stripped)]
            chosen = [position for position, (_, count) in enumerate(stripped, 1) if count]
            log_event("choice_calls_removed", log=log, choices=chosen, calls=removed, stream=False)
        return Reply(envelope, items, rewritten=bool(removed))

    def write_reply(self, reply: Reply) -> dict[str, Any]:
        body = dict(reply.envelope)
        choices = [dict(c) if isinstance(c, dict) else c for c in as_list(body.get("choices"))]
        if not choices or not isinstance(choices[0], dict):
            return body
        first = choices[0]
        message = dict(as_dict(first.get("message")))
        text = "".join(str(i.wire.get("text", "")) for i in reply.items if i.kind is ItemKind.TEXT)
        message["content"] = text if text or message.get("content") is not None else None
        calls = [i.wire for i in reply.items if i.kind is ItemKind.CALL]
        if calls:
            message["tool_calls"] = calls
        else:
            message.pop("tool_calls", None)
        first["message"] = message
        first["finish_reason"] = _finish_reason(reply, first.get("finish_reason"))
        body["choices"] = choices
        return body

    def text_item(self, text: str) -> Item:
        return Item(ItemKind.TEXT, {"type": "text", "text": text})

    def assembler(self) -> StreamAssembler:
        return _ChatStream()

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return openai_error_body(status, message)

    # -- stream tail ---------------------------------------------------------------------
    def _chunk(self, tail: TailState, delta: dict[str, Any], finish: Any = None) -> bytes:
        env = tail.envelope
        chunk: dict[str, Any] = {k: env[k] for k in _ENVELOPE_KEYS if k in env}
        if not tail.role_sent:
            delta = {"role": "assistant", **delta}
            tail.role_sent = True
        chunk["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        if "usage" in env:
            chunk["usage"] = None
        return format_event(orjson.dumps(chunk))

    def render_item(self, item: Item, position: int, reply: Reply, tail: TailState) -> bytes:
        if item.kind is ItemKind.CALL:
            ordinal = sum(1 for i in reply.items[:position] if i.kind is ItemKind.CALL)
            wire = item.wire
            function = wire.get("function") or {}
            call = {
                "index": ordinal,
                "id": wire.get("id"),
                "type": "function",
                "function": {"name": function.get("name"), "arguments": function.get("arguments", "")},
            }
            return self._chunk(tail, {"tool_calls": [call]})
        text = str(item.wire.get("text", ""))
        return self._chunk(tail, {"content": text}) if text else b""

    def render_tail(self, reply: Reply, start: int, tail: TailState) -> bytes:
        # Text of the first turn that arrived while calls were held goes out first.
        head = b""
        if reply.items and reply.items[0].kind is ItemKind.TEXT and start > 0:
            rest = str(reply.items[0].wire.get("text", ""))[tail.forwarded_text :]
            head = self._chunk(tail, {"content": rest}) if rest else b""
        # The other choices' held chunks (already screened) are not part of the repair.
        others = b"".join(tail.others) if isinstance(tail, _ChatTail) else b""
        return head + others + super().render_tail(reply, start, tail)

    def render_end(self, reply: Reply, tail: TailState) -> bytes:
        env = reply.envelope
        choices = as_list(env.get("choices")) or [{}]
        finish = _finish_reason(reply, as_dict(choices[0]).get("finish_reason"))
        out = self._chunk(tail, {}, finish)
        if isinstance(env.get("usage"), dict):
            usage_chunk = {k: tail.envelope[k] for k in _ENVELOPE_KEYS if k in tail.envelope}
            usage_chunk["choices"] = []
            usage_chunk["usage"] = env["usage"]
            out += format_event(orjson.dumps(usage_chunk))
        return out + _DONE


@dataclass(slots=True)
class _ChatTail(TailState):
    # Held chunks of choices ≥ 1, re-sent when choice 0's held part is re-rendered.
    others: list[bytes] = field(default_factory=list)


class _ChatStream(StreamAssembler):
    """Assembles choice 0; the envelope mimics a non-streaming completion.

    Chunks of other choices are screened as they pass (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.tail: _ChatTail = _ChatTail()
        self.items.append(Item(ItemKind.TEXT, {"type": "text", "text": ""}))
        self._calls: dict[int, Item] = {}
        self._partials: dict[int, list[str]] = {}
        self._finish: Any = None
        self._last: dict[str, Any] = {}
        self._removed: dict[Any, set[Any]] = {}  # choice index → tool-call indexes cut out
        self._other_text: set[Any] = set()  # choices ≥ 1 whose text has begun
        self._logged = False

    def apply(self, event: SSEEvent) -> tuple[int | None, bool]:
        if event.data.startswith("[DONE]"):
            self.finished = True
            return None, False
        data = event_json(event)
        if not isinstance(data, dict):
            return None, False
        if data.get("error"):
            self.error = event
            return None, False
        self._last = data
        if not self.envelope:
            self.envelope = {k: data[k] for k in _ENVELOPE_KEYS if k in data}
            self.envelope["object"] = "chat.completion"
            self.tail.envelope = {k: data[k] for k in _ENVELOPE_KEYS if k in data}
        if "usage" in data:
            if data.get("choices"):  # delta chunks say `"usage": null` only with include_usage
                self.tail.envelope.setdefault("usage", None)
            if isinstance(data["usage"], dict):
                self.envelope["usage"] = data["usage"]
        first_position: int | None = None
        started = False
        others = self._screen(event, data)
        for choice in as_list(data.get("choices")):
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = as_dict(choice.get("delta"))
            if isinstance(delta.get("content"), str):
                text = self.items[0].wire
                text["text"] += delta["content"]
                first_position = 0 if first_position is None else first_position
            for fragment in as_list(delta.get("tool_calls")):
                if not isinstance(fragment, dict):
                    continue
                position, new = self._fragment(fragment)
                if first_position is None or first_position == 0:
                    first_position = position
                started = started or new
            if choice.get("finish_reason") is not None:
                self._finish = choice["finish_reason"]
        if others and (self.holding or started):
            self.tail.others.append(format_event(orjson.dumps({**data, "choices": others})))
        return first_position, started

    def _screen(self, event: SSEEvent, data: dict[str, Any]) -> list[dict[str, Any]]:
        """Cut the tool calls of choices ≥ 1 out of the event, in place (an event left with
        nothing is emptied, so nothing is written). Returns the screened choices ≥ 1."""
        kept: list[Any] = []
        others: list[dict[str, Any]] = []
        edited = False
        for choice in as_list(data.get("choices")):
            index = as_index(choice.get("index", 0)) if isinstance(choice, dict) else 0
            if index == 0:
                kept.append(choice)
                continue
            delta = as_dict(choice.get("delta"))
            if isinstance(delta.get("content"), str) and delta["content"]:
                self._other_text.add(index)
            fragments = delta.get("tool_calls")
            finish = choice.get("finish_reason")
            if not fragments and (finish is None or index not in self._removed):
                kept.append(choice)
                others.append(choice)
                continue
            edited = True
            delta = {k: v for k, v in delta.items() if k != "tool_calls"}
            if fragments:
                cut = self._removed.setdefault(index, set())
                cut.update(as_index(as_dict(f).get("index")) for f in as_list(fragments))
            if finish is not None:
                delta["content"] = (delta.get("content") or "") + (
                    "\n\n" + OTHER_CHOICE_NOTE if index in self._other_text else OTHER_CHOICE_NOTE
                )
                finish = "stop" if finish == "tool_calls" else finish
            if delta or finish is not None:
                screened = {**choice, "delta": delta, "finish_reason": finish}
                kept.append(screened)
                others.append(screened)
        if edited:
            event.data = orjson.dumps({**data, "choices": kept}).decode() if kept else ""
            event.raw = format_event(event.data) if kept else b""
        return others

    def _fragment(self, fragment: dict[str, Any]) -> tuple[int, bool]:
        key = as_index(fragment.get("index"), len(self._calls))
        function = as_dict(fragment.get("function"))
        item = self._calls.get(key)
        new = item is None
        if item is None:
            wire = {"id": fragment.get("id") or "", "type": "function",
                    "function": {"name": function.get("name") or "", "arguments": ""}}
            item = Item(ItemKind.CALL, wire)
            self._calls[key] = item
            self.items.append(item)
        else:
            # Compatible servers repeat id/name in later fragments: keep the first ones.
            wire = item.wire
            if not wire["id"] and fragment.get("id"):
                wire["id"] = fragment["id"]
            if not wire["function"]["name"] and function.get("name"):
                wire["function"]["name"] = function["name"]
        if isinstance(function.get("arguments"), str):
            self._partials.setdefault(key, []).append(function["arguments"])
        return self.items.index(item), new

    def observe_forwarded(self, event: SSEEvent) -> None:
        for choice in as_list(self._last.get("choices")):
            if not isinstance(choice, dict):
                continue
            delta = as_dict(choice.get("delta"))
            if choice.get("index", 0) == 0:
                self.tail.role_sent = self.tail.role_sent or "role" in delta
                if isinstance(delta.get("content"), str):
                    self.tail.forwarded_text += len(delta["content"])
        self._last = {}

    def finalize(self) -> None:
        if self._removed and not self._logged:
            self._logged = True
            count = sum(len(cut) for cut in self._removed.values())
            log_event("choice_calls_removed", log=log, choices=list(self._removed), calls=count, stream=True)
        calls = [self._calls[k] for k in sorted(self._calls)]
        for ordinal, item in enumerate(calls):
            raw = "".join(self._partials.get(self._key(item), []))
            item.wire["function"]["arguments"] = raw
            item.call = _call(item.wire, ordinal)
            if self._finish == "length":
                item.call.truncated = True
                item.call.arguments = None
                item.call.parse_error = "the arguments were cut off (max_tokens reached)"
        message: dict[str, Any] = {"role": "assistant", "content": self.items[0].wire["text"] or None}
        self.envelope["choices"] = [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": self._finish}
        ]

    def _key(self, item: Item) -> int:
        return next(k for k, v in self._calls.items() if v is item)
