"""Anthropic Messages API (`POST /v1/messages`).

Content blocks are the items; `index` is a block's position in `content`. Client calls are
`tool_use` blocks, whether the tool is the agent's own (`input_schema`) or one Anthropic defines
and the agent runs (`bash_*`, `text_editor_*`, `computer_*`, `memory_*`: declared by `type` and
`name`, no schema). Server calls (`server_tool_use`, `mcp_tool_use`, any other `*_tool_use`)
are observed and decided by the policy; their result blocks pass untouched.
"""

from __future__ import annotations

import re
import secrets
from itertools import groupby, repeat
from operator import attrgetter, eq, itemgetter
from typing import Any

import orjson

from sidecar.dialects.base import (
    DeltaRun,
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
from sidecar.dialects.request_body import read_once
from sidecar.dialects.sse import SSEEvent, format_event
from sidecar.model import (
    EchoedCall,
    Frame,
    Item,
    ItemKind,
    Provider,
    Reply,
    RequestView,
    SpanKind,
    ThreadMode,
    ThreadRef,
    TokenUsage,
    ToolCall,
    ToolDeclaration,
    ToolKind,
    ToolResult,
    ToolSpan,
)

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

_PING = format_event(b'{"type": "ping"}', "ping")
_STREAM_EVENTS = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    }
)


# Tool types of the client tools Anthropic defines (the agent runs them): prefixes of `type`.
_CLIENT_TOOL_TYPES = ("bash_", "text_editor_", "computer_", "memory_")


def _is_server_block(kind: Any) -> bool:
    return isinstance(kind, str) and kind != "tool_use" and kind.endswith("tool_use")


# What a tool_use / tool_result block takes besides its id, name and payload.
_CALL_FRAME = frame_length({"type": "tool_use", "id": "", "name": "", "input": None})
_RESULT_FRAME = frame_length({"type": "tool_result", "tool_use_id": "", "content": None})
_SPAN_CALL, _SPAN_RESULT = SpanKind.CALL, SpanKind.RESULT  # module names: read per span
_REASONING = frozenset({"thinking", "redacted_thinking"})


def _kind(block: dict[str, Any]) -> ItemKind:
    kind = block.get("type")
    if kind == "tool_use" or _is_server_block(kind):
        return ItemKind.CALL
    if kind == "text":
        return ItemKind.TEXT
    return ItemKind.OTHER


def _call_from_block(block: dict[str, Any], ordinal: int) -> ToolCall:
    kind = block.get("type")
    value = block.get("input")
    call_id, name = str(block.get("id", "")), str(block.get("name", ""))
    if kind == "tool_use":
        tool_kind = ToolKind.FUNCTION
    else:
        tool_kind = ToolKind.SERVER
        if kind == "mcp_tool_use":
            name = f"mcp:{block.get('server_name', '')}"
            value = {"tool": block.get("name"), "arguments": value}
    if isinstance(value, dict):
        call = ToolCall(call_id, name, value, compact(value), ordinal, kind=tool_kind)
    else:
        call = ToolCall(
            call_id, name, None, compact(value), ordinal, parse_error="input must be a JSON object", kind=tool_kind
        )
    call.item_type = str(kind)
    call.repairable = tool_kind.runs_on_client
    return call


def _stop_reason(reply: Reply) -> Any:
    reason = reply.envelope.get("stop_reason")
    if reason == "tool_use" and not reply.client_calls:
        return "end_turn"
    return reason


def _thread(value: Any) -> ThreadRef | None:
    """The request's `thread` field (message threads beta); None when absent or unreadable."""
    if not isinstance(value, dict):
        return None
    if value.get("type") == ThreadMode.CREATE.value:
        return ThreadRef(ThreadMode.CREATE)
    previous = value.get("previous_message_id")
    if value.get("type") == ThreadMode.CONTINUE.value and isinstance(previous, str) and previous:
        return ThreadRef(ThreadMode.CONTINUE, previous)
    return None


# Fields a thread keeps from its create request: a `continue` must not send them.
THREAD_FIELDS = ("system", "tools")


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _tool_result(block: dict[str, Any]) -> ToolResult:
    """A `tool_result` block (its content: a string or a list of content blocks)."""
    result = block.get("content", "")
    size = len(result.encode()) if isinstance(result, str) else len(orjson.dumps(result))
    return ToolResult(str(block.get("tool_use_id")), result, bool(block.get("is_error")), size=size)


class AnthropicDialect(Dialect):
    name = "anthropic"
    provider = Provider.ANTHROPIC
    client_tool_types = (None, "custom")
    schema_key = "input_schema"
    forced_choice_type = "tool"
    # `id` too: a message thread holds the last round's message, and the agent's next turn
    # must continue from the message that holds what it was given.
    summary_keys = ("id", "stop_reason", "stop_sequence", "stop_details")

    def client_tool_name(self, tool: Any) -> str | None:
        """Tools with a schema (no `type`, or `custom`) and the client tools Anthropic defines."""
        name = super().client_tool_name(tool)
        if name is None and isinstance(tool, dict) and self._provider_defined(tool):
            name = tool.get("name")
            return name if isinstance(name, str) else None
        return name

    @staticmethod
    def _provider_defined(tool: dict[str, Any]) -> bool:
        """A client tool Anthropic defines (its `tool_use` calls are checked as declared). A
        tool type the sidecar does not know counts as a server tool: a `tool_use` call of it
        is undeclared, hence refused (fail closed)."""
        kind = tool.get("type")
        return isinstance(kind, str) and kind.startswith(_CLIENT_TOOL_TYPES)

    def read_declarations(self, body: dict[str, Any]) -> dict[str, ToolDeclaration]:
        declared = super().read_declarations(body)
        for tool in as_list(body.get("tools")):
            if isinstance(tool, dict) and self._provider_defined(tool) and isinstance(tool.get("name"), str):
                name = tool["name"]
                declared[name] = ToolDeclaration.create(
                    name, None, str(tool.get("description") or ""), kind=ToolKind.PROVIDER_DEFINED
                )
        return declared

    def server_tools(self, body: dict[str, Any]) -> frozenset[str]:
        """Server tools by name (`web_search`...), MCP servers as `mcp:<name>`; a tool type the
        sidecar does not know counts as a server tool (a `server_tool_use` of it is declared).
        Those of a tool list read before are that reading's (`read_once`)."""
        listed = read_once(body.get("tools"), (self.name, "server_tools"), self._listed_server_tools)
        servers = body.get("mcp_servers")
        if not servers:
            return listed
        names = [server.get("name") for server in as_list(servers) if isinstance(server, dict)]
        return listed.union(f"mcp:{name}" for name in names if isinstance(name, str))

    @staticmethod
    def _listed_server_tools(tools: Any) -> frozenset[str]:
        names: set[str] = set()
        for tool in as_list(tools):
            kind = tool.get("type") if isinstance(tool, dict) else None
            if not isinstance(kind, str) or kind == "custom" or kind.startswith(_CLIENT_TOOL_TYPES):
                continue
            if kind.startswith("mcp_toolset"):
                names.add(f"mcp:{tool.get('mcp_server_name', '')}")
            elif isinstance(tool.get("name"), str):
                names.add(tool["name"])
        return frozenset(names)

    def read_request(self, body: dict[str, Any]) -> RequestView:
        view = RequestView(model=str(body.get("model", "")), stream=bool(body.get("stream")))
        view.declarations = self.declarations(body)
        view.server_tools = self.server_tools(body)
        view.thread = _thread(body.get("thread"))
        metadata = body.get("metadata")
        if isinstance(metadata, dict) and metadata.get("user_id"):
            view.session_hint = str(metadata["user_id"])
        history = as_list(body.get("messages"))
        view.history = history
        first_user = next((m for m in history if isinstance(m, dict) and m.get("role") == "user"), {})
        view.session_seed = _text_of(body.get("system")) + "\x00" + _text_of(first_user.get("content"))
        slots = view.result_slots
        new = 0  # only results after the latest model turn are new
        for m, message in enumerate(history):
            if not isinstance(message, dict):
                continue
            content = message.get("content")
            if not isinstance(content, list):
                continue
            if message.get("role") == "assistant":
                new = len(slots)
                for block in content:
                    if isinstance(block, dict) and block.get("type") == "tool_use":
                        view.echoed_calls.append(
                            EchoedCall(str(block.get("id")), str(block.get("name")), block.get("input"))
                        )
                continue
            for b, block in enumerate(content):
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    slots.append((("messages", m, "content", b, "content"), _tool_result(block)))
        view.results = [result for _, result in slots[new:]]
        return view

    def repair_request(
        self, request: dict[str, Any], reply: Reply, outputs: list[tuple[ToolCall, dict[str, Any]]]
    ) -> dict[str, Any]:
        results = [
            {"type": "tool_result", "tool_use_id": call.id, "content": compact(payload), "is_error": True}
            for call, payload in outputs
        ]
        answer = {"role": "user", "content": results}
        reply_id = self.response_id(reply)
        if _thread(request.get("thread")) is not None and reply_id:
            # The thread holds the refused message: continue from it with only the answers
            # (and without the fields the thread keeps, which a `continue` must not repeat).
            body = {k: v for k, v in request.items() if k not in THREAD_FIELDS}
            thread = {"type": ThreadMode.CONTINUE.value, "previous_message_id": reply_id}
            return {**body, "thread": thread, "messages": [answer], "stream": False}
        messages = [
            *as_list(request.get("messages")),
            {"role": "assistant", "content": [item.wire for item in reply.items]},
            answer,
        ]
        return {**request, "messages": messages, "stream": False}

    def add_withheld_outputs(self, body: dict[str, Any], outputs: dict[str, str]) -> dict[str, Any]:
        """A thread continuation after a turn whose calls the agent never saw: the thread still
        holds them, so they are answered first, in the user message that follows them."""
        messages = [m for m in as_list(body.get("messages")) if isinstance(m, dict)]
        first = messages[0] if messages and messages[0].get("role") == "user" else None
        content = first.get("content") if first is not None else []
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else as_list(content)
        answered = {b.get("tool_use_id") for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"}
        extra = [
            {"type": "tool_result", "tool_use_id": call_id, "content": output, "is_error": True}
            for call_id, output in outputs.items()
            if call_id not in answered
        ]
        if not extra:
            return body
        user = {**(first or {"role": "user"}), "content": [*extra, *blocks]}
        rest = messages[1:] if first is not None else messages
        return {**body, "messages": [user, *rest]}

    def read_reply(self, body: dict[str, Any]) -> Reply:
        envelope = dict(body)
        envelope["content"] = []
        items: list[Item] = []
        ordinal = 0
        for block in as_list(body.get("content")):
            if not isinstance(block, dict):
                continue
            kind = _kind(block)
            call = _call_from_block(block, ordinal) if kind is ItemKind.CALL else None
            ordinal += kind is ItemKind.CALL
            items.append(Item(kind, block, call))
        return Reply(envelope, items)

    def write_reply(self, reply: Reply) -> dict[str, Any]:
        body = dict(reply.envelope)
        body["content"] = [item.wire for item in reply.items]
        body["stop_reason"] = _stop_reason(reply)
        return body

    def text_item(self, text: str) -> Item:
        return Item(ItemKind.TEXT, {"type": "text", "text": text})

    def assembler(self) -> StreamAssembler:
        return _AnthropicStream()

    def keepalive(self) -> bytes:
        return _PING

    def render_item(self, item: Item, position: int, reply: Reply, tail: TailState) -> bytes:
        if item.raw_events:
            return b"".join(_reindex(event, position) for event in item.raw_events)
        block = item.wire
        kind = block.get("type")
        if kind == "tool_use" or kind == "server_tool_use":
            start = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": compact(block.get("input", {}))}]
        elif kind == "text":
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block.get("text", "")}]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": block.get("thinking", "")},
                {"type": "signature_delta", "signature": block.get("signature", "")},
            ]
        else:
            start, deltas = block, []
        events: list[dict[str, Any]] = [{"type": "content_block_start", "index": position, "content_block": start}]
        events += [{"type": "content_block_delta", "index": position, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": position})
        return b"".join(format_event(orjson.dumps(e), str(e["type"])) for e in events)

    def render_end(self, reply: Reply, tail: TailState) -> bytes:
        envelope = reply.envelope
        summary = {"stop_reason": _stop_reason(reply), "stop_sequence": envelope.get("stop_sequence")}
        if "stop_details" in envelope:  # newer streams carry it; keep the recorded layout
            summary["stop_details"] = envelope["stop_details"]
        delta = {"type": "message_delta", "delta": summary, "usage": envelope.get("usage") or {}}
        return format_event(orjson.dumps(delta), "message_delta") + format_event(
            b'{"type":"message_stop"}', "message_stop"
        )

    def usage(self, envelope: dict[str, Any]) -> TokenUsage | None:
        """`input_tokens` excludes cache reads and writes: the neutral `input` adds them back."""
        usage = envelope.get("usage")
        if not isinstance(usage, dict):
            return None
        read = token_count(usage.get("cache_read_input_tokens"))
        write = token_count(usage.get("cache_creation_input_tokens"))
        return TokenUsage(
            input=token_count(usage.get("input_tokens")) + read + write,
            cache_read=read,
            cache_write=write,
            output=token_count(usage.get("output_tokens")),
            reasoning=token_count(as_dict(usage.get("output_tokens_details")).get("thinking_tokens")),
        )

    def output_size(self, item: Item) -> int:
        kind = item.wire.get("type")
        if kind == "thinking":
            return len(str(item.wire.get("thinking") or ""))
        if kind == "server_tool_use":  # written by the model, run by the provider
            return len(str(item.wire.get("name") or "")) + json_length(item.wire.get("input"))
        return super().output_size(item)

    def is_reasoning(self, item: Item) -> bool:
        return item.wire.get("type") in _REASONING

    def tool_spans(self, body: dict[str, Any]) -> list[ToolSpan]:
        messages = as_list(body.get("messages"))
        turn = 0  # the latest model turn (positions count every message; only their order matters)
        for position, message in enumerate(messages):
            if isinstance(message, dict) and message.get("role") == "assistant":
                turn = position
        spans: list[ToolSpan] = []
        for position, message in enumerate(messages):
            content = message.get("content") if isinstance(message, dict) else None
            if not isinstance(content, list):
                continue
            latest = position >= turn
            for block in content:
                kind = block.get("type") if isinstance(block, dict) else None
                if kind == "tool_use":
                    call_id, name = str(block.get("id", "")), str(block.get("name", ""))
                    size = _CALL_FRAME + len(call_id) + len(name) + json_length(block.get("input"))
                    spans.append(ToolSpan(_SPAN_CALL, call_id, size, name, latest))
                elif kind == "tool_result":
                    call_id = str(block.get("tool_use_id", ""))
                    size = _RESULT_FRAME + len(call_id) + json_length(block.get("content", ""))
                    spans.append(ToolSpan(_SPAN_RESULT, call_id, size, None, latest))
        return spans

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {
            "type": "error",
            "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message},
            "request_id": "req_sidecar_" + secrets.token_hex(12),
        }


def _reindex(event: Frame, position: int) -> bytes:
    data = event_json(event)
    if not isinstance(data, dict) or data.get("index", position) == position:
        return event.raw
    data["index"] = position
    return format_event(orjson.dumps(data), event.event)


# The data of an argument piece's event as the API writes it: compact, with the spaces Anthropic
# pads before the last `}` (PROTOCOLS.md). Matched over the data of a read's events joined by
# line ends, once per line (the second branch takes any other line, so every line gives one
# match): groups 1 and 2, the block's index and the piece's JSON string text, or both empty.
# The text is found by its quotes (the first one no backslash escapes ends it); whether it is
# valid JSON is left to orjson, which reads the texts when a run is taken (`take_pieces`).
_JSON_STRING = r'"(?:[^"\\]++|\\.)*+"'
_ARGUMENT_PIECE = re.compile(
    r'^\{"type":"content_block_delta","index":(0|[1-9][0-9]*),'
    r'"delta":\{"type":"input_json_delta","partial_json":(' + _JSON_STRING + r")\} *\}$|^.*+$",
    re.MULTILINE,
)
# Shorter runs are fed event by event: taking one costs about what reading 2-3 events does.
_MIN_RUN = 4
_DATA = attrgetter("data")
_NAME = attrgetter("event")
_INDEX = itemgetter(0)
_PIECE = itemgetter(1)
_DELTA_NAME = "content_block_delta"
# The events that address an open block by its index.
_ADDRESSED = ("content_block_delta", "content_block_stop")


class _AnthropicStream(StreamAssembler):
    def __init__(self) -> None:
        super().__init__()
        self._positions: dict[int, int] = {}
        self._partials: dict[int, list[str]] = {}
        self._stopped: set[int] = set()
        self._ordinal = 0
        self._started = False

    def apply(self, event: SSEEvent) -> tuple[int | None, bool]:
        """The SDKs dispatch on the SSE event name and build the event from its data, append a
        block at each `content_block_start` and address deltas by `index`: the sidecar reads
        the stream the same way or refuses it (see `_framing`)."""
        if event.event == "error":
            self.error = event
            return None, False
        data = self.json(event)
        if event.event == "content_block_delta" and isinstance(data, dict):
            # Most events: a delta to an open block, named as its type says. Taken in one step
            # when `_framing` would pass it (`_open_block`, which it checks too); anything else
            # goes the whole way below. (Folding this into `_framing` instead measured 10%
            # slower over the benchmark's 72 events.)
            index = data.get("index")
            delta = data.get("delta")
            if (
                type(index) is int  # `as_index`, without the call
                and data.get("type") == "content_block_delta"
                and self._open_block(index)
            ):
                self._delta(index, delta if type(delta) is dict else {})
                return index, False
        kind = data.get("type") if isinstance(data, dict) else None
        if kind == "error":
            self.error = event
            return None, False
        if not isinstance(data, dict) or kind == "ping" or self._framing(event, data, kind):
            return None, False
        if kind == "message_start":
            # `data` was parsed for this call alone: the envelope may take its dicts as they are.
            self.envelope = dict(as_dict(data.get("message")))
            self.envelope["content"] = []
        elif kind == "content_block_start":
            block = dict(as_dict(data.get("content_block")))
            position = len(self.items)
            self._positions[position] = position
            item = Item(_kind(block), block)
            if item.kind is ItemKind.CALL:
                item.call = _call_from_block({**block, "input": None}, self._ordinal)
                item.call.arguments, item.call.raw_arguments, item.call.parse_error = None, "", None
                self._ordinal += 1
            self.items.append(item)
            return position, item.kind is ItemKind.CALL
        elif kind in _ADDRESSED:
            found = as_index(data.get("index"))
            if kind == "content_block_delta":
                self._delta(found, as_dict(data.get("delta")))
            else:
                self._stop(found)
            return found, False
        elif kind == "message_delta":
            self.envelope.update(as_dict(data.get("delta")))
            usage = as_dict(self.envelope.get("usage"))
            self.envelope["usage"] = {**usage, **as_dict(data.get("usage"))}
        elif kind == "message_stop":
            self.finished = True
        return None, False

    def delta_runs(self, events: list[SSEEvent]) -> list[DeltaRun]:
        """Runs of `input_json_delta` events to one block, written as the API writes them
        (`_ARGUMENT_PIECE`), under the SSE event name the SDK dispatches them by. Found in C
        (one regex pass, `groupby`): Python runs per run, not per event."""
        if len(events) < _MIN_RUN:
            return []
        joined = "\n".join(map(_DATA, events))
        found = _ARGUMENT_PIECE.findall(joined)
        if len(found) != len(events):  # one match per line: a data of many lines was among them
            return []
        runs: list[DeltaRun] = []
        end = 0
        for index, group in groupby(found, _INDEX):
            start, matched = end, list(group)
            end += len(matched)
            if index and len(matched) >= _MIN_RUN and all(map(eq, map(_NAME, events[start:end]), repeat(_DELTA_NAME))):
                runs.append(DeltaRun(start, end, int(index), list(map(_PIECE, matched))))
        return runs

    def take_pieces(self, position: int, pieces: list[str]) -> bool:
        """`apply`'s one-step path for a delta (an open block, after message_start and before
        message_stop), and `_delta`'s for `input_json_delta`, for all the pieces at once. Each
        piece is one JSON string token (`_ARGUMENT_PIECE`), so the array reads as one string
        per piece, or not at all (an escape JSON does not have, a control character)."""
        if not self._open_block(position):
            return False
        try:
            texts = orjson.loads("[" + ",".join(pieces) + "]")
        except orjson.JSONDecodeError:
            return False
        self._partials.setdefault(position, []).extend(texts)
        return True

    def _open_block(self, index: int) -> bool:
        """Whether a delta or stop may go to block `index` now: after message_start, before
        message_stop, a block started and not stopped (what `_framing` checks, and what
        `apply`'s and `take_pieces`' one-step paths rely on)."""
        return self._started and not self.finished and 0 <= index < len(self.items) and index not in self._stopped

    def _framing(self, event: SSEEvent, data: dict[str, Any], kind: Any) -> bool:
        """Refuse what an SDK could read otherwise than the sidecar; True when refused."""
        if not (isinstance(kind, str) and kind in _STREAM_EVENTS) and event.event not in _STREAM_EVENTS:
            return False  # new event types may be added: clients ignore unknown ones
        why = None
        if event.event != kind:
            why = f"a {kind} event under the SSE event name {event.event!r}"
        elif self.finished:
            why = f"a {kind} event after message_stop"
        elif kind == "message_start":
            if self._started:
                why = "a second message_start"
            elif as_list(as_dict(data.get("message")).get("content")):
                why = "content carried in message_start (the SDK would keep it unchecked)"
            self._started = True
        elif not self._started:
            why = f"a {kind} event before message_start"
        elif kind == "content_block_start" and data.get("index") != len(self.items):
            why = f"content_block_start at index {data.get('index')!r} where block {len(self.items)} is next"
        elif kind in _ADDRESSED and not self._open_block(as_index(data.get("index"))):
            why = f"a {kind} for index {data.get('index')!r}, which is not an open block"
        if why is not None:
            self.refuse(why)
        return why is not None

    def _delta(self, position: int, delta: dict[str, Any]) -> None:
        block = self.items[position].wire
        kind = delta.get("type")
        if kind == "text_delta":
            self.grow(block, "text", str(delta.get("text", "")))
        elif kind == "input_json_delta":
            self._partials.setdefault(position, []).append(str(delta.get("partial_json", "")))
        elif kind == "thinking_delta":
            self.grow(block, "thinking", str(delta.get("thinking", "")))
        elif kind == "signature_delta":
            block["signature"] = delta.get("signature", "")
        elif kind == "citations_delta":
            block["citations"] = [*as_list(block.get("citations")), delta.get("citation")]

    def _stop(self, position: int) -> None:
        self._stopped.add(position)
        item = self.items[position]
        if position not in self._partials and item.call is None:
            return
        raw = "".join(self._partials.get(position, []))
        arguments, error = parse_arguments(raw)
        if not raw.strip() and isinstance(item.wire.get("input"), dict) and item.wire["input"]:
            arguments, raw = item.wire["input"], compact(item.wire["input"])
        item.wire["input"] = arguments if arguments is not None else {}
        if item.call is not None:
            rebuilt = _call_from_block(item.wire, item.call.index)  # server calls wrap their input
            if arguments is None:
                rebuilt.arguments, rebuilt.parse_error = None, error
            rebuilt.raw_arguments = raw if raw.strip() else "{}"
            item.call = rebuilt

    def finalize(self) -> None:
        for position, item in enumerate(self.items):
            if item.call is not None and position not in self._stopped:
                item.call.truncated = True
                item.call.arguments = None
                item.call.raw_arguments = "".join(self._partials.get(position, []))
                item.call.parse_error = "the tool input was cut off (max_tokens reached)"
