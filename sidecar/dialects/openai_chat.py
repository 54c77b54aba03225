"""OpenAI Chat Completions (`POST /v1/chat/completions`).

Items of choice 0: the message text first (always present, possibly empty), then one item per
tool call. `tool_calls[].index` counts calls only.

Choices ≥ 1 (`n > 1`): a repair round continues one conversation, so only choice 0 gets
the guards and repair rounds. The tool calls of the other choices are removed, never checked:
`finish_reason` "tool_calls" becomes "stop" and the content ends with `OTHER_CHOICE_NOTE`.
Their text passes; in a stream their tool-call fragments are cut out of the chunks (a chunk
left empty is dropped) and their finish chunk carries the note. Replies without such calls
pass byte for byte. Repair rounds ask for one choice and are spliced into choice 0 only.

Legacy function calling (`functions` / `function_call`, deprecated but still accepted) is the
same mechanism with other data: a `message.function_call` (or `delta.function_call` fragments)
is one more CALL item, whose wire is `{"function_call": {name, arguments}}` (the message field
itself), written back in that shape with `finish_reason` "function_call". The wire carries no
call id, so one is synthesized from the response id (`legacy_call_id`): unique per response, so
replay detection and the ledgers keep working. A repair round answers it the legacy way, with
a `{"role": "function", "name": …}` message. In the agent's history, the same missing id means
a `role: "function"` result is matched by name to the latest legacy call (`legacy_history_id`);
those history ids cannot equal the ids given at delivery, so the ledger sees such results as
unknown calls to this process (no tool latency), never as errors.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

import orjson

from sidecar.dialects.base import (
    Dialect,
    StreamAssembler,
    TailState,
    as_dict,
    as_index,
    as_list,
    compact,
    frame_length,
    json_length,
    parse_arguments,
    token_count,
)
from sidecar.dialects.sse import SSEEvent, format_event
from sidecar.model import (
    EchoedCall,
    Item,
    ItemKind,
    Provider,
    Reply,
    RequestView,
    SpanKind,
    TokenUsage,
    ToolCall,
    ToolDeclaration,
    ToolKind,
    ToolResult,
    ToolSpan,
)

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
LEGACY = "function_call"  # the message/delta field, the finish reason, the call id prefix
_CALL_FINISHES = ("tool_calls", LEGACY)
_ENVELOPE_KEYS = ("id", "object", "created", "model", "service_tier", "system_fingerprint")
# What a call / result takes in a request besides its id, name and payload.
_CALL_FRAME = frame_length({"id": "", "type": "function", "function": {"name": "", "arguments": None}})
_LEGACY_FRAME = frame_length({LEGACY: {"name": "", "arguments": None}})
_RESULT_FRAME = frame_length({"role": "tool", "tool_call_id": "", "content": None})


def openai_error_body(status: int, message: str) -> dict[str, Any]:
    kind = OPENAI_ERROR_TYPES.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p)
    return ""


def result_size(content: Any) -> int:
    return len(content.encode()) if isinstance(content, str) else len(orjson.dumps(content))


def _call(wire: dict[str, Any], ordinal: int, envelope: dict[str, Any] | None = None) -> ToolCall:
    """The ToolCall of a CALL item's wire: a `tool_calls` entry, or a legacy `function_call`
    (which has no id on the wire: `legacy_call_id` gives it one from the response). A custom
    tool's call reads as `{"input": text}`; an entry of a type the sidecar does not know is a
    call to a tool of that type (undeclared unless the request declares one: refused)."""
    kind = wire.get("type")
    if kind not in (None, "function") and _legacy(wire) is None:
        body = as_dict(wire.get(str(kind)))
        if kind == "custom":
            text = body.get("input")
            value: dict[str, Any] = {"input": text if isinstance(text, str) else compact(text)}
            name, tool_kind = str(body.get("name", "")), ToolKind.CUSTOM
        else:
            value, name, tool_kind = body, str(body.get("name") or kind), ToolKind.PROVIDER_DEFINED
        call = ToolCall(str(wire.get("id", "")), name, value, compact(value), ordinal, kind=tool_kind)
        call.item_type = str(kind)
        return call
    legacy = _legacy(wire)
    function = legacy if legacy is not None else as_dict(wire.get("function"))
    raw = function.get("arguments")
    raw = raw if isinstance(raw, str) else ("" if raw is None else compact(raw))
    arguments, error = parse_arguments(raw)
    call_id = legacy_call_id(envelope or {}, function) if legacy is not None else str(wire.get("id", ""))
    return ToolCall(call_id, str(function.get("name", "")), arguments, raw, ordinal, error)


def _legacy(wire: dict[str, Any]) -> dict[str, Any] | None:
    """The `{name, arguments}` of a legacy call item's wire; None for a `tool_calls` entry."""
    function = wire.get(LEGACY)
    return function if isinstance(function, dict) and len(wire) == 1 else None


def legacy_call_id(envelope: dict[str, Any], function: dict[str, Any]) -> str:
    """The id of a legacy call, which the wire lacks: `function_call:<response id>` (one such
    call per response). Without a response id (some compatible servers), a hash of the
    response's time, model and the call, so two calls made at different times still differ."""
    response_id = envelope.get("id")
    if isinstance(response_id, str) and response_id:
        return f"{LEGACY}:{response_id}"
    seed = [envelope.get("created"), envelope.get("model"), function.get("name"), function.get("arguments")]
    return f"{LEGACY}:" + hashlib.sha256(orjson.dumps(seed, default=str)).hexdigest()[:24]


def legacy_history_id(position: int) -> str:
    """The id of a legacy call in the agent's history (message `position`): results of
    `role: "function"` are matched by name to the latest such call and take its id."""
    return f"{LEGACY}@{position}"


def _message_result(message: dict[str, Any], latest_legacy: EchoedCall | None) -> ToolResult | None:
    """The result a `role: "tool"` (or legacy `role: "function"`) message carries; None for
    other messages. A legacy result has no id on the wire: it answers the latest legacy call
    of its name."""
    role = message.get("role")
    content = message.get("content", "")
    if role == "tool":
        call_id = str(message.get("tool_call_id"))
        return ToolResult(call_id, content, False, message.get("name"), result_size(content))
    if role != "function":
        return None
    named = str(message["name"]) if message.get("name") is not None else None
    if latest_legacy is not None and latest_legacy.name == named:
        call_id = latest_legacy.call_id
    else:
        call_id = f"function:{named}"  # answers no call: counted as an unknown one
    return ToolResult(call_id, content, False, named, result_size(content))


def _function_name(function: Any) -> str | None:
    """The name of a legacy `functions` entry (None for malformed ones)."""
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None


def _call_fields(reply: Reply) -> dict[str, Any]:
    """The message fields carrying a reply's calls: `tool_calls` and/or `function_call`."""
    fields: dict[str, Any] = {}
    for item in reply.items:
        if item.kind is not ItemKind.CALL:
            continue
        legacy = _legacy(item.wire)
        if legacy is not None:
            fields[LEGACY] = legacy
        else:
            fields.setdefault("tool_calls", []).append(item.wire)
    return fields


def _with_note(text: Any) -> str:
    return f"{text}\n\n{OTHER_CHOICE_NOTE}" if isinstance(text, str) and text else OTHER_CHOICE_NOTE


def _without_calls(choice: Any) -> tuple[Any, int]:
    """A non-streamed choice ≥ 1 with its tool calls removed and explained, and how many."""
    message = as_dict(as_dict(choice).get("message"))
    calls = message.get("tool_calls")
    legacy = message.get(LEGACY)
    if not calls and not legacy:
        return choice, 0
    message = {k: v for k, v in message.items() if k not in ("tool_calls", LEGACY)}
    message["content"] = _with_note(message.get("content"))
    finish = choice.get("finish_reason")
    stripped = {**choice, "message": message, "finish_reason": "stop" if finish in _CALL_FINISHES else finish}
    count = (len(calls) if isinstance(calls, list) else 1) if calls else 0
    return stripped, count + (1 if legacy else 0)


def _finish_reason(reply: Reply, original: Any) -> Any:
    """`tool_calls`, or `function_call` when the only calls are legacy ones; without calls,
    a finish reason that announced calls becomes `stop`."""
    calls = [item.wire for item in reply.items if item.kind is ItemKind.CALL]
    if calls:
        return LEGACY if all(_legacy(wire) is not None for wire in calls) else "tool_calls"
    return "stop" if original in _CALL_FINISHES else original


class OpenAIChatDialect(Dialect):
    name = "openai_chat"
    provider = Provider.OPENAI
    summary_keys = ("choices",)

    def read_request(self, body: dict[str, Any]) -> RequestView:
        view = RequestView(model=str(body.get("model", "")), stream=bool(body.get("stream")))
        view.declarations = self.declarations(body)
        view.session_hint = body.get("user") or body.get("prompt_cache_key") or None
        history = as_list(body.get("messages"))
        view.history = history
        messages = [m for m in history if isinstance(m, dict)]
        system = next((m for m in messages if m.get("role") in ("system", "developer")), {})
        first_user = next((m for m in messages if m.get("role") == "user"), {})
        view.session_seed = content_text(system.get("content")) + "\x00" + content_text(first_user.get("content"))
        latest_legacy: EchoedCall | None = None
        slots = view.result_slots
        new = 0  # only results after the latest model turn are new
        position = -1  # among the object messages: legacy calls' history ids count these
        for index, message in enumerate(history):
            if not isinstance(message, dict):
                continue
            position += 1
            role = message.get("role")
            if role == "assistant":
                new = len(slots)
                latest_legacy = None
                for wire in as_list(message.get("tool_calls")):
                    function = as_dict(as_dict(wire).get("function"))
                    wire = as_dict(wire)
                    view.echoed_calls.append(
                        EchoedCall(str(wire.get("id")), str(function.get("name")), function.get("arguments"))
                    )
                legacy = message.get(LEGACY)
                if isinstance(legacy, dict):
                    name, arguments = str(legacy.get("name")), legacy.get("arguments")
                    latest_legacy = EchoedCall(legacy_history_id(position), name, arguments)
                    view.echoed_calls.append(latest_legacy)
            else:
                result = _message_result(message, latest_legacy)
                if result is not None:
                    slots.append((("messages", index, "content"), result))
        view.results = [result for _, result in slots[new:]]
        return view

    declaring_keys = ("tools", "functions")

    def read_declarations(self, body: dict[str, Any]) -> dict[str, ToolDeclaration]:
        """`tools`, then legacy `functions` (a name declared in both keeps its tool)."""
        declared = super().read_declarations(body)
        for tool in as_list(body.get("tools")):
            name = self.client_tool_name(tool)
            if name is not None and tool.get("type") == "custom":
                description = as_dict(tool.get("custom")).get("description")
                declared[name] = ToolDeclaration.create(name, None, str(description or ""), kind=ToolKind.CUSTOM)
        for function in as_list(body.get("functions")):
            name = _function_name(function)
            if name is not None and name not in declared:
                declared[name] = ToolDeclaration.create(
                    name, function.get("parameters"), str(function.get("description") or "")
                )
        return declared

    def hide_tools(self, body: dict[str, Any], hidden: set[str]) -> dict[str, Any]:
        """Also for legacy `functions`: a `function_call` forcing a hidden one goes too, and
        without any function left, `function_call` goes (the API refuses it alone)."""
        out = super().hide_tools(body, hidden)
        if "functions" not in body:
            return out
        functions = [f for f in as_list(body.get("functions")) if _function_name(f) not in hidden]
        out["functions"] = functions
        if not functions:
            out.pop("functions")
            out.pop(LEGACY, None)
        elif _function_name(body.get(LEGACY)) in hidden:  # {"name": …} forces one
            out.pop(LEGACY)
        return out

    def client_tool_name(self, tool: Any) -> str | None:
        """`{"type": "function", "function": {...}}` and `{"type": "custom", "custom": {...}}`."""
        kind = tool.get("type") if isinstance(tool, dict) else None
        spec = tool.get(kind) if isinstance(kind, str) and kind in ("function", "custom") else None
        return str(spec["name"]) if isinstance(spec, dict) and "name" in spec else None

    def forced_tool(self, choice: Any) -> str | None:
        kind = choice.get("type") if isinstance(choice, dict) else None
        spec = choice.get("custom" if kind == "custom" else "function") if isinstance(choice, dict) else None
        name = spec.get("name") if isinstance(spec, dict) else None
        return name if isinstance(name, str) else None

    def tool_spec(self, tool: dict[str, Any]) -> tuple[Any, Any]:
        spec = as_dict(tool.get("custom") if tool.get("type") == "custom" else tool["function"])
        # A custom tool takes text or a grammar: no JSON Schema, the policy decides.
        return (None if tool.get("type") == "custom" else spec.get("parameters")), spec.get("description")

    def repair_request(
        self, request: dict[str, Any], reply: Reply, outputs: list[tuple[ToolCall, dict[str, Any]]]
    ) -> dict[str, Any]:
        text = "".join(str(i.wire.get("text", "")) for i in reply.items if i.kind is ItemKind.TEXT)
        assistant: dict[str, Any] = {"role": "assistant", "content": text or None}
        assistant.update(_call_fields(reply))
        # A legacy call is answered by name (`role: "function"`), a tool call by its id.
        legacy = {id(i.call) for i in reply.items if i.call is not None and _legacy(i.wire) is not None}
        tool_messages = [
            {"role": "function", "name": call.name, "content": compact(payload)}
            if id(call) in legacy
            else {"role": "tool", "tool_call_id": call.id, "content": compact(payload)}
            for call, payload in outputs
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
        if isinstance(message.get(LEGACY), dict):
            calls.append({LEGACY: message[LEGACY]})
        for ordinal, wire in enumerate(calls):
            items.append(Item(ItemKind.CALL, wire, _call(wire, ordinal, body)))
        stripped = [_without_calls(choice) for choice in choices[1:]]
        removed = sum(count for _, count in stripped)
        if removed:
            envelope["choices"] = [choices[0], *(choice for choice, _ in stripped)]
        return Reply(envelope, items, rewritten=bool(removed), removed_calls=removed)

    def write_reply(self, reply: Reply) -> dict[str, Any]:
        body = dict(reply.envelope)
        choices = [dict(c) if isinstance(c, dict) else c for c in as_list(body.get("choices"))]
        if not choices or not isinstance(choices[0], dict):
            return body
        first = choices[0]
        message = dict(as_dict(first.get("message")))
        text = "".join(str(i.wire.get("text", "")) for i in reply.items if i.kind is ItemKind.TEXT)
        message["content"] = text if text or message.get("content") is not None else None
        fields = _call_fields(reply)
        for key in ("tool_calls", LEGACY):
            if key in fields:
                message[key] = fields[key]
            else:
                message.pop(key, None)
        first["message"] = message
        first["finish_reason"] = _finish_reason(reply, first.get("finish_reason"))
        body["choices"] = choices
        return body

    def text_item(self, text: str) -> Item:
        return Item(ItemKind.TEXT, {"type": "text", "text": text})

    def assembler(self) -> StreamAssembler:
        return _ChatStream()

    def usage(self, envelope: dict[str, Any]) -> TokenUsage | None:
        """`prompt_tokens` includes `prompt_tokens_details.cached_tokens`; OpenAI reports no cache writes."""
        usage = envelope.get("usage")
        if not isinstance(usage, dict):
            return None
        return TokenUsage(
            input=token_count(usage.get("prompt_tokens")),
            cache_read=token_count(as_dict(usage.get("prompt_tokens_details")).get("cached_tokens")),
            output=token_count(usage.get("completion_tokens")),
            reasoning=token_count(as_dict(usage.get("completion_tokens_details")).get("reasoning_tokens")),
        )

    def tool_spans(self, body: dict[str, Any]) -> list[ToolSpan]:
        messages = [m for m in as_list(body.get("messages")) if isinstance(m, dict)]
        turn = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=0)
        spans: list[ToolSpan] = []
        legacy_id = ""
        for position, message in enumerate(messages):
            role, latest = message.get("role"), position >= turn
            if role == "assistant":
                for wire in as_list(message.get("tool_calls")):
                    wire = as_dict(wire)
                    function = as_dict(wire.get("function"))
                    call_id, name = str(wire.get("id", "")), str(function.get("name", ""))
                    size = _CALL_FRAME + len(call_id) + len(name) + json_length(function.get("arguments"))
                    spans.append(ToolSpan(SpanKind.CALL, call_id, size, name, latest))
                legacy = message.get(LEGACY)
                if isinstance(legacy, dict):
                    legacy_id, name = legacy_history_id(position), str(legacy.get("name", ""))
                    size = _LEGACY_FRAME + len(name) + json_length(legacy.get("arguments"))
                    spans.append(ToolSpan(SpanKind.CALL, legacy_id, size, name, latest))
            elif role in ("tool", "function"):
                call_id = str(message.get("tool_call_id", "")) if role == "tool" else legacy_id
                named = message.get("name")
                size = _RESULT_FRAME + len(call_id) + json_length(message.get("content", ""))
                spans.append(
                    ToolSpan(SpanKind.RESULT, call_id, size, named if isinstance(named, str) else None, latest)
                )
        return spans

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
            legacy = _legacy(item.wire)
            if legacy is not None:
                fragment = {"name": legacy.get("name"), "arguments": legacy.get("arguments", "")}
                return self._chunk(tail, {LEGACY: fragment})
            ordinal = sum(1 for i in reply.items[:position] if i.kind is ItemKind.CALL)
            wire = item.wire
            if wire.get("type") not in (None, "function"):
                return self._chunk(tail, {"tool_calls": [{"index": ordinal, **wire}]})
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


def _is_choice_zero(choice: dict[str, Any]) -> bool:
    """Whether a streamed chunk's choice is choice 0, the one enforced: as the SDK's stream
    helper accumulates it (a missing index, `false` and `0.0` are choice 0 there too). The
    screen, the assembler and the forwarded-text count read it the same way."""
    return bool(choice.get("index", 0) == 0)


def _first_arguments(data: Any) -> Any:
    """Where a chunk of one function-call fragment holds its piece of the arguments."""
    return data["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]


def _padding(data: Any) -> Any:
    return data["obfuscation"]


def _text_piece(data: Any) -> Any:
    """Where a chunk of text alone holds its piece."""
    return data["choices"][0]["delta"]["content"]


def _take_text(assembler: StreamAssembler, piece: str) -> int | None:
    """A chunk of text alone, as `apply` and `observe_forwarded` read it: the piece joins the
    text; when the chunk is forwarded (nothing held yet) it counts as text the agent has.
    `observe_forwarded` then reads nothing more of it: it emptied `_last` after the last
    forwarded chunk `apply` read, and a held chunk is never observed (holding never ends)."""
    if assembler.finished:
        return None  # `apply` refuses any chunk after [DONE]
    assembler.grow(assembler.items[0].wire, "text", piece)
    if not assembler.holding:
        assembler.tail.forwarded_text += len(piece)
    return 0


class _ChatStream(StreamAssembler):
    """Assembles choice 0; the envelope mimics a non-streaming completion.

    Chunks of other choices are screened as they pass (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.tail: _ChatTail = _ChatTail()
        self.items.append(Item(ItemKind.TEXT, {"type": "text", "text": ""}))
        # Where each call's item sits in `items` (which only grows), by its `tool_calls[].index`:
        # the item is `items[position]` (kept, not looked up: `list.index` compares every earlier
        # item field by field, and an equal one would answer for it).
        self._call_positions: dict[int, int] = {}
        self._partials: dict[int, list[str]] = {}
        self._legacy_position: int | None = None  # a legacy `delta.function_call` being assembled
        self._legacy_parts: list[str] = []
        self._finish: Any = None
        self._last: dict[str, Any] = {}
        self._removed: dict[Any, set[Any]] = {}  # choice index → tool-call indexes cut out
        self._other_text: set[Any] = set()  # choices ≥ 1 whose text has begun

    def apply(self, event: SSEEvent) -> tuple[int | None, bool]:
        if self.finished and event.data.strip():
            self.refuse("an event after data: [DONE] (clients stop there, or read on)")
            return None, False
        if event.data.startswith("[DONE]"):
            self.finished = True
            return None, False
        data = self.json(event)
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
        choices = data.get("choices")
        if type(choices) is list and len(choices) == 1 and type(choices[0]) is dict and _is_choice_zero(choices[0]):
            # Most chunks: choice 0 alone, with nothing to screen (`_screen` cuts choices >= 1).
            found = self._choice_zero(choices[0], None, False)
            if self.may_learn():
                self._learn_piece(event, data, choices[0])
            return found
        first_position: int | None = None
        started = False
        others = self._screen(event, data)
        for choice in as_list(choices):
            if isinstance(choice, dict) and _is_choice_zero(choice):
                first_position, started = self._choice_zero(choice, first_position, started)
        if others and (self.holding or started):
            self.tail.others.append(format_event(orjson.dumps({**data, "choices": others})))
        return first_position, started

    def _choice_zero(
        self, choice: dict[str, Any], first_position: int | None, started: bool
    ) -> tuple[int | None, bool]:
        """One choice-0 entry of a chunk, given what earlier entries of the same chunk gave:
        (the first item it touches, whether a call starts in the chunk)."""
        delta = choice.get("delta")
        if type(delta) is not dict:  # `as_dict`, without the call (parsed JSON: plain dicts)
            delta = {}
        content = delta.get("content")
        if isinstance(content, str):
            self.grow(self.items[0].wire, "text", content)
            first_position = 0 if first_position is None else first_position
        fragments = delta.get("tool_calls")
        for fragment in fragments if type(fragments) is list else ():
            if not isinstance(fragment, dict):
                continue
            position, new = self._fragment(fragment)
            if first_position is None or first_position == 0:
                first_position = position
            started = started or new
        if LEGACY in delta and isinstance(delta[LEGACY], dict):
            position, new = self._legacy_fragment(delta[LEGACY])
            if first_position is None or first_position == 0:
                first_position = position
            started = started or new
        if choice.get("finish_reason") is not None:
            self._finish = choice["finish_reason"]
        return first_position, started

    def _screen(self, event: SSEEvent, data: dict[str, Any]) -> list[dict[str, Any]]:
        """Cut the tool calls of choices ≥ 1 out of the event, in place (an event left with
        nothing is emptied, so nothing is written). Returns the screened choices ≥ 1."""
        kept: list[Any] = []
        others: list[dict[str, Any]] = []
        edited = False
        for choice in as_list(data.get("choices")):
            # Choice 0 (`apply` checks its calls) is never cut.
            if not isinstance(choice, dict) or _is_choice_zero(choice):
                kept.append(choice)
                continue
            index = as_index(choice.get("index"))
            delta = as_dict(choice.get("delta"))
            if isinstance(delta.get("content"), str) and delta["content"]:
                self._other_text.add(index)
            fragments = delta.get("tool_calls")
            legacy = delta.get(LEGACY)
            finish = choice.get("finish_reason")
            if not fragments and not legacy and (finish is None or index not in self._removed):
                kept.append(choice)
                others.append(choice)
                continue
            edited = True
            delta = {k: v for k, v in delta.items() if k not in ("tool_calls", LEGACY)}
            if fragments or legacy:
                cut = self._removed.setdefault(index, set())
                cut.update(as_index(as_dict(f).get("index")) for f in as_list(fragments))
                if legacy:
                    cut.add(LEGACY)
            if finish is not None:
                delta["content"] = (delta.get("content") or "") + (
                    "\n\n" + OTHER_CHOICE_NOTE if index in self._other_text else OTHER_CHOICE_NOTE
                )
                finish = "stop" if finish in _CALL_FINISHES else finish
            if delta or finish is not None:
                screened = {**choice, "delta": delta, "finish_reason": finish}
                kept.append(screened)
                others.append(screened)
        if edited:
            event.data = orjson.dumps({**data, "choices": kept}).decode() if kept else ""
            event.raw = format_event(event.data) if kept else b""
        return others

    def _more_arguments(self, fragment: dict[str, Any]) -> tuple[int, int, str] | None:
        """(its index, its item's position, the text) when the fragment is the next piece of an
        open function call's arguments and nothing else, as most fragments are: `_fragment`'s
        checks pass it (no type, id or name to compare)."""
        spec = fragment.get("function")
        if len(fragment) == 2 and type(spec) is dict and len(spec) == 1:
            index, text = fragment.get("index"), spec.get("arguments")
            if type(index) is int and type(text) is str:
                position = self._call_positions.get(index)
                if position is not None and self.items[position].wire["type"] == "function":
                    return index, position, text
        return None

    def _learn_piece(self, event: SSEEvent, data: dict[str, Any], choice: dict[str, Any]) -> None:
        """A chunk read in full whose only effect was one piece: of an open call's arguments,
        or of the text (nothing else in its delta, no finish, no usage). Chunks of its shape
        are read as that piece alone (`StreamAssembler.learn`)."""
        delta = choice.get("delta")
        if type(delta) is not dict or len(delta) != 1 or choice.get("finish_reason") is not None:
            return
        if type(data.get("usage")) is dict:  # `apply` takes the usage from every chunk that has one
            return
        # OpenAI's random padding, a string nothing reads (the SDK drops it): any in later chunks.
        padding = data.get("obfuscation")
        if "obfuscation" in data and type(padding) is not str:
            return
        ignored = (padding, _padding) if type(padding) is str else None
        content = delta.get("content")
        if type(content) is str:
            self.learn(event, content, _text_piece, _take_text, ignored)
            return
        fragments = delta.get("tool_calls")
        if type(fragments) is not list or len(fragments) != 1 or type(fragments[0]) is not dict:
            return
        found = self._more_arguments(fragments[0])
        if found is None:
            return
        index, position, text = found
        append = self._partials[index].append

        def take(assembler: StreamAssembler, piece: str) -> int | None:
            # `apply` refuses any chunk after [DONE]; holding, nothing else reads the chunk.
            if assembler.finished or not assembler.holding:
                return None
            append(piece)
            return position

        self.learn(event, text, _first_arguments, take, ignored)

    def _fragment(self, fragment: dict[str, Any]) -> tuple[int, bool]:
        """One `tool_calls` fragment. Clients join fragments differently (the OpenAI SDK joins
        every string, others keep the first id and name): a later fragment that gives the name
        or id again, or changes the type, is refused (framing)."""
        more = self._more_arguments(fragment)
        if more is not None:  # most fragments; the checks below would pass it, in more steps
            self._partials.setdefault(more[0], []).append(more[2])
            return more[1], False
        key = as_index(fragment.get("index"), len(self._call_positions))
        kind = "custom" if fragment.get("type") == "custom" or "custom" in fragment else "function"
        spec = as_dict(fragment.get(kind))
        text_key = "input" if kind == "custom" else "arguments"
        position = self._call_positions.get(key)
        new = position is None
        if position is None:
            wire = {"id": fragment.get("id") or "", "type": kind, kind: {"name": spec.get("name") or "", text_key: ""}}
            position = self._call_positions[key] = len(self.items)
            self.items.append(Item(ItemKind.CALL, wire))
        else:
            wire = self.items[position].wire
            if wire["type"] != kind or (fragment.get("type") not in (None, kind)):
                self.refuse(f"tool call {key} changes its type in a later fragment")
                return position, False
            self._same(wire, "id", fragment.get("id"), key)
            self._same(wire[kind], "name", spec.get("name"), key)
        if isinstance(spec.get(text_key), str):
            self._partials.setdefault(key, []).append(spec[text_key])
        return position, new

    def _same(self, held: dict[str, Any], field: str, value: Any, key: int) -> None:
        """A field given once. Given again, readings part: the OpenAI SDK joins the pieces
        (`lookup` + `lookup` is `lookuplookup`, `read` + `_all` is `read_all`), other clients
        keep the first; either could run a call the other reading did not check: refused."""
        if not value:
            return
        if not held[field]:
            held[field] = value
        else:
            self.refuse(f"tool call {key} gives its {field} again in a later fragment (split or repeated)")

    def _legacy_fragment(self, fragment: dict[str, Any]) -> tuple[int, bool]:
        """A `delta.function_call` piece: the name comes first, the arguments in pieces."""
        position = self._legacy_position
        new = position is None
        name = fragment.get("name")
        if position is None:
            position = self._legacy_position = len(self.items)
            wire = {LEGACY: {"name": name if isinstance(name, str) else "", "arguments": ""}}
            self.items.append(Item(ItemKind.CALL, wire))
        elif isinstance(name, str):
            self._same(self.items[position].wire[LEGACY], "name", name, 0)
        if isinstance(fragment.get("arguments"), str):
            self._legacy_parts.append(fragment["arguments"])
        return position, new

    def observe_forwarded(self, event: SSEEvent) -> None:
        for choice in as_list(self._last.get("choices")):
            if not isinstance(choice, dict):
                continue
            delta = as_dict(choice.get("delta"))
            if _is_choice_zero(choice):
                self.tail.role_sent = self.tail.role_sent or "role" in delta
                if isinstance(delta.get("content"), str):
                    self.tail.forwarded_text += len(delta["content"])
        self._last = {}

    def finalize(self) -> None:
        self.removed_calls = sum(len(cut) for cut in self._removed.values())
        calls: list[Item] = []
        for key in sorted(self._call_positions):
            item = self.items[self._call_positions[key]]
            kind = item.wire["type"]
            text_key = "input" if kind == "custom" else "arguments"
            item.wire[kind][text_key] = "".join(self._partials.get(key, []))
            calls.append(item)
        if self._legacy_position is not None:
            legacy = self.items[self._legacy_position]
            legacy.wire[LEGACY]["arguments"] = "".join(self._legacy_parts)
            calls.append(legacy)
        for ordinal, item in enumerate(calls):
            item.call = _call(item.wire, ordinal, self.envelope)
            if self._finish == "length":
                item.call.truncated = True
                item.call.arguments = None
                item.call.parse_error = "the arguments were cut off (max_tokens reached)"
        message: dict[str, Any] = {"role": "assistant", "content": self.items[0].wire["text"] or None}
        self.envelope["choices"] = [{"index": 0, "message": message, "logprobs": None, "finish_reason": self._finish}]
