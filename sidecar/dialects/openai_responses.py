"""OpenAI Responses API (`POST /v1/responses`).

Output items are the items; `output_index` is an item's position in `response.output`.
Every event carries a `sequence_number` that the sidecar renumbers on what it re-emits.

Calls (docs/coverage.md, "Item types"): every item the agent executes is a call, checked like a
function call: `function_call` (a namespaced one is named `<namespace>.<name>`),
`custom_tool_call` (arguments `{"input": text}`), `local_shell_call`, `shell_call`,
`computer_call`, `apply_patch_call`, a client `tool_search_call`, and any other `*_call` item
(an item type the sidecar does not know is taken as one the agent runs, named after its type:
fail closed). Items the provider runs itself (`web_search_call`, `file_search_call`,
`code_interpreter_call`, `image_generation_call`, `mcp_call`, `mcp_approval_request`, a hosted
`shell_call`, `program`) are server calls: observed and decided by the policy, never repaired.
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
    loads,
    parse_arguments,
    token_count,
)
from sidecar.dialects.openai_chat import content_text, openai_error_body, result_size
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
    TokenUsage,
    ToolCall,
    ToolDeclaration,
    ToolKind,
    ToolResult,
    ToolSpan,
)

_MODEL_ITEMS = {"function_call", "reasoning", "message", "custom_tool_call"}
_TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
_LIFECYCLE = {"response.created", "response.queued", "response.in_progress"}

# Client items the agent runs: item type -> (tool name (None: the item's own `name`), kind).
_CLIENT_ITEMS: dict[str, tuple[str | None, ToolKind]] = {
    "function_call": (None, ToolKind.FUNCTION),
    "custom_tool_call": (None, ToolKind.CUSTOM),
    "local_shell_call": ("local_shell", ToolKind.PROVIDER_DEFINED),
    "shell_call": ("shell", ToolKind.PROVIDER_DEFINED),
    "computer_call": ("computer", ToolKind.PROVIDER_DEFINED),
    "apply_patch_call": ("apply_patch", ToolKind.PROVIDER_DEFINED),
    "tool_search_call": ("tool_search", ToolKind.PROVIDER_DEFINED),
}
# Items the provider runs itself: item type -> tool name (`mcp:<server_label>` for MCP).
_SERVER_ITEMS = {
    "web_search_call": "web_search",
    "file_search_call": "file_search",
    "code_interpreter_call": "code_interpreter",
    "image_generation_call": "image_generation",
    "mcp_call": "mcp",
    "mcp_approval_request": "mcp",
    "program": "programmatic_tool_calling",
}
# Output items answering client calls, by the call's item type (the Agents SDK's shapes).
_OUTPUT_TYPES = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "local_shell_call": "local_shell_call_output",
    "shell_call": "shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
}
_ANSWER_TYPES = frozenset(_OUTPUT_TYPES.values())
# Declared tool types -> the neutral name and kind of the client tool they declare.
_PROVIDER_TOOLS = {
    "local_shell": "local_shell",
    "shell": "shell",
    "computer": "computer",
    "computer_use_preview": "computer",
    "apply_patch": "apply_patch",
}
_SERVER_TOOLS = {
    "web_search": "web_search",
    "web_search_preview": "web_search",
    "web_search_2025_08_26": "web_search",
    "web_search_preview_2025_03_11": "web_search",
    "file_search": "file_search",
    "code_interpreter": "code_interpreter",
    "image_generation": "image_generation",
    "programmatic_tool_calling": "programmatic_tool_calling",
}
# Entry types that never declare a provider-defined client tool (a function or custom tool
# without a name is malformed; the others are server tools or containers of tools).
_NOT_PROVIDER_TOOLS = {"function", "custom", "mcp", "namespace", "tool_search"}
# A held shell call runs in the provider's container, not on the agent's machine.
_HOSTED_ENVIRONMENTS = {"container_auto", "container_reference"}


def _hosted(wire: dict[str, Any]) -> bool:
    return as_dict(wire.get("environment")).get("type") in _HOSTED_ENVIRONMENTS


def _is_call_type(kind: Any) -> bool:
    """Any item the sidecar must check: known calls, server calls, and unknown `*_call` items."""
    return isinstance(kind, str) and (kind in _CLIENT_ITEMS or kind in _SERVER_ITEMS or kind.endswith("_call"))


def _qualified(wire: dict[str, Any]) -> str:
    name = str(wire.get("name", ""))
    namespace = wire.get("namespace")
    return f"{namespace}.{name}" if isinstance(namespace, str) and namespace else name


def _object(value: Any) -> tuple[dict[str, Any] | None, str, str | None]:
    """Arguments given as a JSON object or as a JSON string: (object, raw text, error)."""
    if isinstance(value, dict):
        return value, compact(value), None
    raw = value if isinstance(value, str) else ("" if value is None else compact(value))
    arguments, error = parse_arguments(raw)
    return arguments, raw, error


# What a call / output item takes in a request besides its ids, name and payload.
_CALL_FRAME = frame_length({"type": "function_call", "call_id": "", "name": "", "arguments": None})
_RESULT_FRAME = frame_length({"type": "function_call_output", "call_id": "", "output": None})


def _model_item(item: dict[str, Any]) -> bool:
    """An item the model wrote: a message, reasoning, or any call (`_is_call_type`)."""
    kind = item.get("type")
    return (isinstance(kind, str) and (kind in _MODEL_ITEMS or _is_call_type(kind))) or item.get("role") == "assistant"


def _call(wire: dict[str, Any], ordinal: int) -> ToolCall:
    item_type = str(wire.get("type", ""))
    call_id = str(wire.get("call_id") or wire.get("id") or "")
    if (
        item_type in _SERVER_ITEMS
        or (item_type == "shell_call" and _hosted(wire))
        or (item_type == "tool_search_call" and wire.get("execution") != "client")
    ):
        call = _server_call(wire, item_type, call_id, ordinal)
    elif item_type in ("function_call", "tool_search_call"):
        arguments, raw, error = _object(wire.get("arguments"))
        name = _qualified(wire) if item_type == "function_call" else "tool_search"
        call = ToolCall(call_id, name, arguments, raw, ordinal, error)
    elif item_type == "custom_tool_call":
        text = wire.get("input")
        value = {"input": text if isinstance(text, str) else compact(text)}
        call = ToolCall(call_id, _qualified(wire), value, compact(value), ordinal, kind=ToolKind.CUSTOM)
    else:
        fields = {k: v for k, v in wire.items() if k in ("action", "actions", "operation", "arguments", "input")}
        known, kind = _CLIENT_ITEMS.get(item_type, (None, ToolKind.PROVIDER_DEFINED))
        name = known or item_type.removesuffix("_call")
        call = ToolCall(call_id, name, fields, compact(fields), ordinal, kind=kind)
    call.item_type = item_type
    call.repairable = call.kind.runs_on_client and item_type in _OUTPUT_TYPES
    if wire.get("status") == "incomplete" and call.kind.runs_on_client:
        call.truncated, call.arguments = True, None
        call.parse_error = "the arguments were cut off (the response is incomplete)"
    return call


def _server_call(wire: dict[str, Any], item_type: str, call_id: str, ordinal: int) -> ToolCall:
    name = _SERVER_ITEMS.get(item_type, item_type.removesuffix("_call"))
    if name == "mcp":
        name = f"mcp:{wire.get('server_label', '')}"
        arguments, _, _ = _object(wire.get("arguments"))
        fields: dict[str, Any] = {"tool": wire.get("name"), "arguments": arguments}
    else:
        keep = ("action", "query", "queries", "code", "container_id", "arguments", "revised_prompt")
        fields = {k: v for k, v in wire.items() if k in keep}
    return ToolCall(call_id, name, fields, compact(fields), ordinal, kind=ToolKind.SERVER)


def _identity(wire: dict[str, Any]) -> tuple[Any, Any]:
    """How the SDK matches an item across events: its type and its call id (else its id)."""
    return wire.get("type"), wire.get("call_id") or wire.get("id")


def _kind(wire: dict[str, Any]) -> ItemKind:
    kind = wire.get("type")
    if _is_call_type(kind):
        return ItemKind.CALL
    return ItemKind.TEXT if kind == "message" else ItemKind.OTHER


def _answer(call: ToolCall, text: str) -> dict[str, Any] | None:
    """The input item that answers a client call with `text` (None: the protocol has none)."""
    output_type = _OUTPUT_TYPES.get(call.item_type or "function_call")
    if output_type is None:
        return None
    item: dict[str, Any] = {"type": output_type, "call_id": call.id}
    if output_type == "shell_call_output":
        item["output"] = [{"stdout": "", "stderr": text, "outcome": {"type": "exit", "exit_code": 1}}]
    elif output_type == "apply_patch_call_output":
        item.update(status="failed", output=text)
    else:
        item["output"] = text
    return item


def event_json_text(text: str) -> Any:
    try:
        return loads(text)
    except ValueError:
        return None


# A withheld output kept as a whole item (not a function_call_output) starts with this.
_ITEM_MARK = "\x00item:"


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
    """An output item answering a client call (`function_call_output`, `custom_tool_call_output`,
    …; its output: a string, or a list of input parts or of command outputs)."""
    output = item.get("output", "")
    return ToolResult(str(item.get("call_id") or item.get("id")), output, False, None, result_size(output))


def conversation_id(body: dict[str, Any]) -> str | None:
    """The request's `conversation` (an id, or `{"id": …}`), None when absent or unreadable."""
    value = body.get("conversation")
    if isinstance(value, dict):
        value = value.get("id")
    return value if isinstance(value, str) and value else None


class OpenAIResponsesDialect(Dialect):
    name = "openai_responses"
    history_key = "input"
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
        history = as_list(items)
        view.history = history
        first_user: dict[str, Any] = next((i for i in history if isinstance(i, dict) and i.get("role") == "user"), {})
        view.session_seed = str(body.get("instructions") or "") + "\x00" + content_text(first_user.get("content"))
        slots = view.result_slots
        new = 0  # only results after the latest model turn are new
        for index, item in enumerate(history):
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if isinstance(kind, str) and kind in _ANSWER_TYPES:
                slots.append((("input", index, "output"), _output_result(item)))
            elif _model_item(item):
                new = len(slots)
                if isinstance(kind, str) and kind in _CLIENT_ITEMS:
                    call = _call(item, 0)
                    view.echoed_calls.append(EchoedCall(call.id, call.name, item.get("arguments", call.arguments)))
        view.results = [result for _, result in slots[new:]]
        view.server_tools = self.server_tools(body)
        return view

    # -- declarations ------------------------------------------------------------------
    def client_tool_name(self, tool: Any) -> str | None:
        declared = self._declared(tool)
        return declared.name if declared is not None else None

    def _declared(self, tool: Any) -> ToolDeclaration | None:
        """The client tool a `tools` entry declares (None for server tools and malformed ones)."""
        if not isinstance(tool, dict):
            return None
        kind = tool.get("type")
        description = str(tool.get("description") or "")
        name = tool.get("name")
        if kind == "function" and isinstance(name, str):
            return ToolDeclaration.create(name, tool.get("parameters"), description)
        if kind == "custom" and isinstance(name, str):
            return ToolDeclaration.create(name, None, description, kind=ToolKind.CUSTOM)
        if kind == "tool_search" and tool.get("execution") == "client":
            return ToolDeclaration.create(
                "tool_search", tool.get("parameters"), description, kind=ToolKind.PROVIDER_DEFINED
            )
        if kind == "shell" and _hosted(tool):
            return None
        if isinstance(kind, str) and kind not in _SERVER_TOOLS and kind not in _NOT_PROVIDER_TOOLS:
            # Provider tools the agent runs, and tool types the sidecar does not know (a future
            # `foo` tool whose `foo_call` items the agent would run): declared by their type.
            return ToolDeclaration.create(
                _PROVIDER_TOOLS.get(kind, kind), None, description, kind=ToolKind.PROVIDER_DEFINED
            )
        return None

    def read_declarations(self, body: dict[str, Any]) -> dict[str, ToolDeclaration]:
        declared: dict[str, ToolDeclaration] = {}
        for tool in as_list(body.get("tools")):
            if isinstance(tool, dict) and tool.get("type") == "namespace" and isinstance(tool.get("name"), str):
                for inner in as_list(tool.get("tools")):
                    found = self._declared(inner)
                    if found is not None:
                        qualified = f"{tool['name']}.{found.name}"
                        declared[qualified] = ToolDeclaration.create(
                            qualified, found.schema if found.has_schema else None, found.description, kind=found.kind
                        )
                continue
            found = self._declared(tool)
            if found is not None:
                declared[found.name] = found
        return declared

    def server_tools(self, body: dict[str, Any]) -> frozenset[str]:
        """The hosted tools declared (`web_search`..., MCP servers as `mcp:<label>`); those of
        a tool list read before are that reading's (`read_once`)."""
        return read_once(body.get("tools"), (self.name, "server_tools"), self._listed_server_tools)

    @staticmethod
    def _listed_server_tools(tools: Any) -> frozenset[str]:
        names: set[str] = set()
        for tool in as_list(tools):
            kind = tool.get("type") if isinstance(tool, dict) else None
            if not isinstance(kind, str):
                continue
            if kind in _SERVER_TOOLS:
                names.add(_SERVER_TOOLS[str(kind)])
            elif kind == "mcp":
                names.add(f"mcp:{tool.get('server_label', '')}")
            elif kind == "shell" and _hosted(tool):
                names.add("shell")
            elif kind == "tool_search" and tool.get("execution") != "client":
                names.add("tool_search")
        return frozenset(names)

    def repair_request(
        self, request: dict[str, Any], reply: Reply, outputs: list[tuple[ToolCall, dict[str, Any]]]
    ) -> dict[str, Any]:
        answers = [answer for call, payload in outputs if (answer := _answer(call, compact(payload))) is not None]
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

    def sequence_number(self, event: Frame) -> int | None:
        data = event_json(event)
        number = data.get("sequence_number") if isinstance(data, dict) else None
        return number if isinstance(number, int) and not isinstance(number, bool) else None

    def withheld_output(self, call: ToolCall, payload: dict[str, Any]) -> str | None:
        """How a withheld call is answered on the agent's next turn: a function call by its
        output text, other calls by their whole output item (None: no answer exists)."""
        if not call.kind.runs_on_client:
            return None
        if call.item_type in ("", "function_call"):
            return compact(payload)
        answer = _answer(call, compact(payload))
        return _ITEM_MARK + compact(answer) if answer is not None else None

    def add_withheld_outputs(self, body: dict[str, Any], outputs: dict[str, str]) -> dict[str, Any]:
        items = body.get("input")
        items = [{"role": "user", "content": items}] if isinstance(items, str) else as_list(items)
        answer_types = set(_OUTPUT_TYPES.values())
        answered = {i.get("call_id") for i in items if isinstance(i, dict) and i.get("type") in answer_types}
        extra: list[dict[str, Any]] = []
        for call_id, output in outputs.items():
            if call_id in answered:
                continue
            if output.startswith(_ITEM_MARK):
                extra.append(as_dict(event_json_text(output[len(_ITEM_MARK) :])))
            else:
                extra.append({"type": "function_call_output", "call_id": call_id, "output": output})
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
        elif wire.get("type") == "custom_tool_call":
            text = wire.get("input", "")
            events = [
                {"type": "response.output_item.added", **base, "item": {**wire, "input": ""}},
                {"type": "response.custom_tool_call_input.delta", "item_id": item_id, **base, "delta": text},
                {"type": "response.custom_tool_call_input.done", "item_id": item_id, **base, "input": text},
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
        self._done: set[int] = set()
        self._ordinal = 0
        self._sequence: int | None = None

    def apply(self, event: SSEEvent) -> tuple[int | None, bool]:
        """The SDK builds events from their data's `type`, appends an item per
        `output_item.added`, addresses the rest by `output_index`, and takes the final response
        from the terminal event: the sidecar reads the stream the same way or refuses it."""
        data = self.json(event)
        if data is None:
            return None, False
        kind = data.get("type") if isinstance(data, dict) else None
        if not isinstance(data, dict) or not isinstance(kind, str):
            self.refuse("an event without a type")
            return None, False
        self._sequence = data.get("sequence_number") if isinstance(data.get("sequence_number"), int) else None
        if kind == "error":
            self.error = event
            return None, False
        if self.finished:
            self.refuse(f"a {kind} event after the response ended")
            return None, False
        if kind in _LIFECYCLE or kind in _TERMINAL:
            self._lifecycle(kind, as_dict(data.get("response")))
            return None, False
        if "output_index" not in data:
            return None, False
        index = data["output_index"]
        if kind == "response.output_item.added":
            wire = dict(as_dict(data.get("item")))
            position = len(self.items)
            if index != position:
                self.refuse(f"output item {index!r} added where item {position} is next")
                return None, False
            self._positions[position] = position
            item_kind = _kind(wire)
            self.items.append(Item(item_kind, wire))
            return position, item_kind is ItemKind.CALL
        found = self._positions.get(as_index(index))
        if found is None or found in self._done:
            self.refuse(f"a {kind} event for output item {index!r}, which is not open")
            return None, False
        item = self.items[found]
        if kind == "response.function_call_arguments.delta":
            self.grow(item.wire, "arguments", str(data.get("delta", "")))
        elif kind == "response.custom_tool_call_input.delta":
            self.grow(item.wire, "input", str(data.get("delta", "")))
        elif kind == "response.output_item.done":
            done = dict(as_dict(data.get("item")) or item.wire)
            if _identity(done) != _identity(item.wire):
                self.refuse(f"output item {index!r} is done as another item than it was added")
            item.wire = done
            self._done.add(found)
        return found, False

    def _lifecycle(self, kind: str, response: dict[str, Any]) -> None:
        output = response.get("output")
        response = {**response, "output": []}
        self.envelope = response
        if kind in _LIFECYCLE:
            if any(isinstance(w, dict) and _kind(w) is ItemKind.CALL for w in as_list(output)):
                self.refuse(f"calls carried in {kind} (the SDK would keep them unchecked)")
            return
        self.finished = True
        if output is None:
            return  # the SDK then builds the output from the items the stream completed
        final = [w for w in as_list(output) if isinstance(w, dict)]
        if len(final) != len(as_list(output)) or [_identity(w) for w in final] != [
            _identity(i.wire) for i in self.items
        ]:
            self.refuse(f"{kind} lists other output items than the stream carried")
            return
        # The terminal event carries the authoritative items (the SDK reads them from there).
        for position, wire in enumerate(final):
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
