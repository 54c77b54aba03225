"""OpenAI Responses API (`POST /v1/responses`).

Output items are the items; `output_index` is an item's position in `response.output`.
Client calls are `function_call` items. Every event carries a `sequence_number` that the
sidecar renumbers on what it re-emits.
"""

from __future__ import annotations

import secrets
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
    event_json,
    frame_length,
    json_length,
    parse_arguments,
    token_count,
)
from sidecar.dialects.openai_chat import content_text, openai_error_body, result_size
from sidecar.dialects.sse import SSEEvent, format_event
from sidecar.model import (
    EchoedCall,
    Item,
    ItemKind,
    JsonPath,
    Provider,
    Reply,
    RequestView,
    SpanKind,
    TokenUsage,
    ToolCall,
    ToolResult,
    ToolSpan,
)

_MODEL_ITEMS = {"function_call", "reasoning", "message", "custom_tool_call"}
_TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
# What a call / output item takes in a request besides its ids, name and payload.
_CALL_FRAME = frame_length({"type": "function_call", "call_id": "", "name": "", "arguments": None})
_RESULT_FRAME = frame_length({"type": "function_call_output", "call_id": "", "output": None})


def _model_item(item: dict[str, Any]) -> bool:
    kind = item.get("type")
    return (isinstance(kind, str) and kind in _MODEL_ITEMS) or item.get("role") == "assistant"


def _call(wire: dict[str, Any], ordinal: int) -> ToolCall:
    raw = wire.get("arguments")
    raw = raw if isinstance(raw, str) else ("" if raw is None else compact(raw))
    arguments, error = parse_arguments(raw)
    call = ToolCall(str(wire.get("call_id", "")), str(wire.get("name", "")), arguments, raw, ordinal, error)
    if wire.get("status") == "incomplete":
        call.truncated, call.arguments = True, None
        call.parse_error = "the arguments were cut off (the response is incomplete)"
    return call


def _kind(wire: dict[str, Any]) -> ItemKind:
    kind = wire.get("type")
    if kind == "function_call":
        return ItemKind.CALL
    return ItemKind.TEXT if kind == "message" else ItemKind.OTHER


def _items(output: list[Any]) -> list[Item]:
    items: list[Item] = []
    ordinal = 0
    for wire in output:
        if not isinstance(wire, dict):
            continue
        if _kind(wire) is ItemKind.CALL:
            items.append(Item(ItemKind.CALL, wire, _call(wire, ordinal)))
            ordinal += 1
        else:
            items.append(Item(_kind(wire), wire))
    return items


def _output_result(item: dict[str, Any]) -> ToolResult:
    """A `function_call_output` item (its output: a string or a list of input parts)."""
    output = item.get("output", "")
    return ToolResult(str(item.get("call_id")), output, False, None, result_size(output))


def conversation_id(body: dict[str, Any]) -> str | None:
    """The request's `conversation` (an id, or `{"id": …}`), None when absent or unreadable."""
    value = body.get("conversation")
    if isinstance(value, dict):
        value = value.get("id")
    return value if isinstance(value, str) and value else None


class OpenAIResponsesDialect(Dialect):
    name = "openai_responses"
    provider = Provider.OPENAI
    client_tool_types = ("function",)
    summary_keys = None
    server_side_state = True

    def read_request(self, body: dict[str, Any]) -> RequestView:
        view = RequestView(model=str(body.get("model", "")), stream=bool(body.get("stream")))
        view.declarations = self.declarations(body)
        view.session_hint = body.get("prompt_cache_key") or body.get("user") or None
        previous = body.get("previous_response_id")
        view.previous_response_id = previous if isinstance(previous, str) else None
        view.store = body.get("store", True) is not False
        view.conversation = conversation_id(body)
        items = body.get("input")
        if isinstance(items, str):
            view.session_seed = str(body.get("instructions") or "") + "\x00" + items
            return view
        items = [i for i in as_list(items) if isinstance(i, dict)]
        first_user: dict[str, Any] = next((i for i in items if i.get("role") == "user"), {})
        view.session_seed = str(body.get("instructions") or "") + "\x00" + content_text(first_user.get("content"))
        for item in items:
            kind = item.get("type")
            if kind == "function_call_output":
                view.results.append(_output_result(item))
            elif _model_item(item):
                view.results = []
                if kind == "function_call":
                    view.echoed_calls.append(
                        EchoedCall(str(item.get("call_id")), str(item.get("name")), item.get("arguments"))
                    )
        return view

    def result_slots(self, body: dict[str, Any]) -> list[tuple[JsonPath, ToolResult]]:
        items = body.get("input")
        return [
            (("input", index, "output"), _output_result(item))
            for index, item in enumerate(as_list(items))
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        ]

    def repair_request(
        self, request: dict[str, Any], reply: Reply, outputs: list[tuple[ToolCall, dict[str, Any]]]
    ) -> dict[str, Any]:
        answers = [
            {"type": "function_call_output", "call_id": call.id, "output": compact(payload)}
            for call, payload in outputs
        ]
        body = {**request, "stream": False}
        reply_id = self.response_id(reply)
        if conversation_id(request) is not None:
            # The conversation holds the refused response (its input and output were added to
            # it): only the answers go, and never `previous_response_id` with `conversation`
            # (the API refuses the pair as mutually exclusive).
            body.pop("previous_response_id", None)
            body["input"] = answers
            return body
        if request.get("store", True) is not False and reply_id:
            # The provider holds the conversation: continue from the refused response.
            body["previous_response_id"] = reply_id
            body["input"] = answers
            return body
        previous = request.get("input")
        history = [{"role": "user", "content": previous}] if isinstance(previous, str) else as_list(previous)
        body["input"] = [*history, *(item.wire for item in reply.items), *answers]
        return body

    def add_withheld_outputs(self, body: dict[str, Any], outputs: dict[str, str]) -> dict[str, Any]:
        items = body.get("input")
        items = [{"role": "user", "content": items}] if isinstance(items, str) else as_list(items)
        answered = {i.get("call_id") for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"}
        extra = [
            {"type": "function_call_output", "call_id": call_id, "output": output}
            for call_id, output in outputs.items()
            if call_id not in answered
        ]
        return {**body, "input": [*extra, *items]} if extra else body

    def read_reply(self, body: dict[str, Any]) -> Reply:
        envelope = dict(body)
        envelope["output"] = []
        return Reply(envelope, _items(as_list(body.get("output"))))

    def write_reply(self, reply: Reply) -> dict[str, Any]:
        body = dict(reply.envelope)
        body["output"] = [item.wire for item in reply.items]
        return body

    def text_item(self, text: str) -> Item:
        wire = {
            "id": "msg_sidecar_" + secrets.token_hex(12),
            "type": "message",
            "status": "completed",
            "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}],
            "role": "assistant",
        }
        return Item(ItemKind.TEXT, wire)

    def item_text(self, item: Item) -> str:
        """A message item's output text, its parts joined (as the SDK's `output_text`)."""
        if item.kind is not ItemKind.TEXT:
            return ""
        parts = as_list(item.wire.get("content"))
        return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict) and p.get("type") == "output_text")

    def prefix_text(self, item: Item, prefix: str) -> Item:
        text = self.item_text(item)
        if not text or text.startswith(prefix):
            return item
        parts = [dict(p) if isinstance(p, dict) else p for p in as_list(item.wire.get("content"))]
        first = next(p for p in parts if isinstance(p, dict) and p.get("type") == "output_text")
        first["text"] = prefix + str(first.get("text", ""))
        return Item(item.kind, {**item.wire, "content": parts}, item.call)

    def assembler(self) -> StreamAssembler:
        return _ResponsesStream()

    def usage(self, envelope: dict[str, Any]) -> TokenUsage | None:
        """`input_tokens` includes `input_tokens_details.cached_tokens`; no cache writes reported."""
        usage = envelope.get("usage")
        if not isinstance(usage, dict):
            return None
        return TokenUsage(
            input=token_count(usage.get("input_tokens")),
            cache_read=token_count(as_dict(usage.get("input_tokens_details")).get("cached_tokens")),
            output=token_count(usage.get("output_tokens")),
            reasoning=token_count(as_dict(usage.get("output_tokens_details")).get("reasoning_tokens")),
        )

    def is_reasoning(self, item: Item) -> bool:
        return item.wire.get("type") == "reasoning"

    def tool_spans(self, body: dict[str, Any]) -> list[ToolSpan]:
        items = [i for i in as_list(body.get("input")) if isinstance(i, dict)]
        # The latest model turn: the last run of model items (reasoning, calls, messages).
        turn = max((i for i, item in enumerate(items) if _model_item(item)), default=0)
        while turn > 0 and _model_item(items[turn - 1]):
            turn -= 1
        spans: list[ToolSpan] = []
        for position, item in enumerate(items):
            kind, call_id = item.get("type"), str(item.get("call_id", ""))
            if kind == "function_call":
                name = str(item.get("name", ""))
                size = _CALL_FRAME + len(call_id) + len(name) + json_length(item.get("arguments"))
                spans.append(ToolSpan(SpanKind.CALL, call_id, size, name, position >= turn))
            elif kind == "function_call_output":
                size = _RESULT_FRAME + len(call_id) + json_length(item.get("output", ""))
                spans.append(ToolSpan(SpanKind.RESULT, call_id, size, None, position >= turn))
        return spans

    def history_at_provider(self, body: dict[str, Any]) -> bool:
        return bool(body.get("previous_response_id") or body.get("conversation"))

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return openai_error_body(status, message)

    # -- stream tail ---------------------------------------------------------------------
    def _event(self, tail: TailState, data: dict[str, Any]) -> bytes:
        data["sequence_number"] = tail.next_sequence
        tail.next_sequence += 1
        return format_event(orjson.dumps(data), str(data["type"]))

    def render_item(self, item: Item, position: int, reply: Reply, tail: TailState) -> bytes:
        if item.raw_events:
            out = []
            for event in item.raw_events:
                data = event_json(event)
                if isinstance(data, dict):
                    if "output_index" in data:
                        data["output_index"] = position
                    out.append(self._event(tail, data))
            return b"".join(out)
        wire = item.wire
        item_id = wire.get("id")
        base = {"output_index": position}
        events: list[dict[str, Any]] = []
        if wire.get("type") == "function_call":
            arguments = wire.get("arguments", "")
            events = [
                {
                    "type": "response.output_item.added",
                    **base,
                    "item": {**wire, "status": "in_progress", "arguments": ""},
                },
                {"type": "response.function_call_arguments.delta", "item_id": item_id, **base, "delta": arguments},
                {
                    "type": "response.function_call_arguments.done",
                    "item_id": item_id,
                    **base,
                    "arguments": arguments,
                    "name": wire.get("name"),
                },
            ]
        elif wire.get("type") == "message":
            events = [
                {"type": "response.output_item.added", **base, "item": {**wire, "status": "in_progress", "content": []}}
            ]
            parts = [part for part in as_list(wire.get("content")) if isinstance(part, dict)]
            for index, part in enumerate(parts):
                where = {"item_id": item_id, **base, "content_index": index}
                text = str(part.get("text", ""))
                events += [
                    {"type": "response.content_part.added", **where, "part": {**part, "text": ""}},
                    {"type": "response.output_text.delta", **where, "delta": text, "logprobs": []},
                    {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
                    {"type": "response.content_part.done", **where, "part": part},
                ]
        else:
            events = [{"type": "response.output_item.added", **base, "item": wire}]
        events.append({"type": "response.output_item.done", **base, "item": wire})
        return b"".join(self._event(tail, e) for e in events)

    def render_end(self, reply: Reply, tail: TailState) -> bytes:
        response = self.write_reply(reply)
        kind = {"incomplete": "response.incomplete", "failed": "response.failed"}.get(
            str(response.get("status")), "response.completed"
        )
        return self._event(tail, {"type": kind, "response": response})


class _ResponsesStream(StreamAssembler):
    def __init__(self) -> None:
        super().__init__()
        self._positions: dict[int, int] = {}
        self._ordinal = 0
        self._sequence: int | None = None

    def apply(self, event: SSEEvent) -> tuple[int | None, bool]:
        data = event_json(event)
        if not isinstance(data, dict):
            return None, False
        kind = data.get("type") or event.event
        if not isinstance(kind, str):
            return None, False
        self._sequence = data.get("sequence_number") if isinstance(data.get("sequence_number"), int) else None
        if kind == "error":
            self.error = event
            return None, False
        if kind in ("response.created", "response.in_progress") or kind in _TERMINAL:
            response = dict(as_dict(data.get("response")))
            final_output = as_list(response.get("output"))
            response["output"] = []
            self.envelope = response
            if kind in _TERMINAL:
                self.finished = True
                self._adopt_final(final_output)
            return None, False
        if "output_index" not in data:
            return None, False
        index = as_index(data["output_index"])
        if kind == "response.output_item.added":
            wire = dict(as_dict(data.get("item")))
            position = len(self.items)
            self._positions[index] = position
            item_kind = _kind(wire)
            self.items.append(Item(item_kind, wire))
            return position, item_kind is ItemKind.CALL
        found = self._positions.get(index)
        if found is None:
            return None, False
        item = self.items[found]
        if kind == "response.function_call_arguments.delta":
            item.wire["arguments"] = str(item.wire.get("arguments", "")) + str(data.get("delta", ""))
        elif kind == "response.output_item.done":
            item.wire = dict(as_dict(data.get("item")) or item.wire)
        return found, False

    def _adopt_final(self, output: list[Any]) -> None:
        # The terminal event carries the authoritative items (the SDK reads them from there).
        for position, wire in enumerate(output):
            if position < len(self.items) and isinstance(wire, dict):
                self.items[position].wire = wire

    def observe_forwarded(self, event: SSEEvent) -> None:
        if self._sequence is not None:
            self.tail.next_sequence = self._sequence + 1

    def finalize(self) -> None:
        ordinal = 0
        for item in self.items:
            if item.kind is ItemKind.CALL:
                item.call = _call(item.wire, ordinal)
                if item.wire.get("status") == "in_progress":
                    item.call.truncated, item.call.arguments = True, None
                    item.call.parse_error = "the call was not completed"
                ordinal += 1
