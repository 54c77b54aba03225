"""OpenAI Responses (`POST /v1/responses`) as the real API writes it (§3).

Streams are named events whose JSON carries `type` first, the other keys in alphabetical
order and a `sequence_number` counting from 0; there is no `[DONE]`. The server keeps every
response it produced so `previous_response_id` continuations are checked like the real API
checks them (each function_call answered, each function_call_output matching a call).

Conversations (`POST /v1/conversations`, then `conversation` on /v1/responses) as documented:
the conversation's items are prepended to the request's input, and the input and output items
are added to it once the response completes; `conversation` with `previous_response_id` is
refused (`mutually_exclusive_parameters`), an unknown conversation is a 404.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson

from sidecar.scripted.openai_chat import OpenAIFormat, openai_error_type
from sidecar.scripted.script import OPENAI_RESPONSES, UpstreamError
from sidecar.scripted.wire import (
    Event,
    HttpReply,
    Ids,
    Part,
    PartKind,
    Reply,
    obfuscation,
)

_ITEM_PREFIX: dict[PartKind, str] = {"thinking": "rs_", "text": "msg_", "call": "fc_"}
_CALL_PREFIX = {
    "custom_tool_call": "ctc_",
    "local_shell_call": "lsh_",
    "shell_call": "sh_",
    "computer_call": "cu_",
    "apply_patch_call": "apc_",
    "web_search_call": "ws_",
    "mcp_call": "mcp_",
}


def _item_type(part: Part) -> str:
    item = part.spec.item if part.spec is not None else None
    return item or "function_call"


@dataclass(slots=True)
class StoredResponse:
    """What `previous_response_id` refers to: the output and the input that led to it."""

    output: list[dict[str, Any]]
    input: list[dict[str, Any]]
    previous_response_id: str | None


def _input_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    items = body.get("input")
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


# Client calls and the input items that answer them (the API requires one answer per call).
ANSWERS = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "local_shell_call": "local_shell_call_output",
    "shell_call": "shell_call_output",
    "computer_call": "computer_call_output",
    "apply_patch_call": "apply_patch_call_output",
}
_OUTPUTS = set(ANSWERS.values())


def _call_ids(items: list[dict[str, Any]], type_: str) -> list[str]:
    wanted = set(ANSWERS) if type_ == "call" else _OUTPUTS if type_ == "output" else {type_}
    return [str(i.get("call_id")) for i in items if isinstance(i.get("type"), str) and i.get("type") in wanted]


def _label(items: list[dict[str, Any]], call_id: str) -> str:
    """'function call', 'custom tool call'...: how the API's error names a call's type."""
    kind = next((str(i.get("type")) for i in items if i.get("call_id") == call_id), "function_call")
    return kind.replace("_", " ")


class ResponsesFormat(OpenAIFormat):
    protocol = OPENAI_RESPONSES
    path = "/v1/responses"
    default_model = "gpt-5.5"

    def __init__(self, ids: Ids) -> None:
        super().__init__(ids)
        self.stored: dict[str, StoredResponse] = {}
        self.conversations: dict[str, list[dict[str, Any]]] = {}  # id -> its items, in order
        self.replies: dict[str, Reply] = {}  # what GET /v1/responses/{id} reads back

    def reset(self) -> None:
        self.stored.clear()
        self.conversations.clear()
        self.replies.clear()

    # ---- conversations -----------------------------------------------------------------------

    def create_conversation(self, body: Any) -> dict[str, Any]:
        """`POST /v1/conversations`: a new conversation, with its initial `items` if given."""
        conversation_id = "conv_" + self.ids.hex(48)
        items = body.get("items") if isinstance(body, dict) else None
        self.conversations[conversation_id] = [i for i in items or [] if isinstance(i, dict)]
        metadata = body.get("metadata") if isinstance(body, dict) else None
        return {
            "id": conversation_id,
            "object": "conversation",
            "created_at": int(time.time()),
            "metadata": metadata or {},
        }

    @staticmethod
    def conversation_of(body: dict[str, Any]) -> str | None:
        value = body.get("conversation")
        if isinstance(value, dict):
            value = value.get("id")
        return str(value) if value else None

    def _conversation_check(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], HttpReply | None]:
        """The items the conversation adds before the input, or the API's refusal."""
        conversation = self.conversation_of(body)
        if conversation is None:
            return [], None
        if body.get("previous_response_id"):
            message = (
                "Mutually exclusive parameters: Ensure you are only providing one of: "
                "'previous_response_id' or 'conversation'."
            )
            return [], self.invalid_request(message, code="mutually_exclusive_parameters")
        items = self.conversations.get(conversation)
        if items is None:
            message = f"Conversation with id '{conversation}' not found."
            return [], self.invalid_request(message, param="conversation", status=404, code="not_found")
        return items, None

    def reply_id(self) -> str:
        return "resp_" + self.ids.hex(50)

    def item_id(self, kind: PartKind) -> str:
        return _ITEM_PREFIX[kind] + self.ids.hex(50)

    # ---- pairing ---------------------------------------------------------------------------

    def check(self, body: dict[str, Any]) -> HttpReply | None:
        held, refused = self._conversation_check(body)
        if refused is not None:
            return refused
        if held:  # the conversation's items come first; every call in it must be answered
            answered = set(_call_ids(held, "output"))
            pending = [i for i in held if i.get("type") in ANSWERS and i.get("call_id") not in answered]
            earlier = [i for i in held if i.get("type") in ANSWERS]
            return self._pair(_input_items(body), pending, {str(i.get("call_id")) for i in earlier}, body)
        return self._pair(_input_items(body), [], set(), body)

    def _pair(
        self, items: list[dict[str, Any]], pending: list[dict[str, Any]], held: set[str], body: dict[str, Any]
    ) -> HttpReply | None:
        required = _call_ids(pending, "call") + _call_ids(items, "call")
        known = set(required) | held
        previous = body.get("previous_response_id")
        if previous:
            stored = self.stored.get(str(previous))
            if stored is None:
                return self.invalid_request(
                    f"Previous response with id '{previous}' not found.",
                    param="previous_response_id",
                    code="previous_response_not_found",
                )
            required = _call_ids(stored.output, "call") + required
            known |= self._chain_calls(str(previous))
        outputs = _call_ids(items, "output")
        for call_id in outputs:
            if call_id not in known:
                return self.invalid_request(
                    f"No tool call found for function call output with call_id {call_id}.", param="input"
                )
        everything = pending + items + [i for r in self.stored.values() for i in r.output]
        for call_id in required:
            if call_id not in outputs:
                label = _label(everything, call_id)
                return self.invalid_request(f"No tool output found for {label} {call_id}.", param="input")
        return None

    def _chain_calls(self, response_id: str | None) -> set[str]:
        calls: set[str] = set()
        seen: set[str] = set()
        while response_id and response_id not in seen and response_id in self.stored:
            seen.add(response_id)
            stored = self.stored[response_id]
            calls.update(_call_ids(stored.output, "call"))
            calls.update(_call_ids(stored.input, "call"))
            response_id = stored.previous_response_id
        return calls

    # ---- stored responses: retrieve, stream resume, input items, background ---------------

    def retrieve(self, response_id: str) -> HttpReply:
        reply = self.replies.get(response_id)
        if reply is None:
            return self.invalid_request(f"Response with id '{response_id}' not found.", status=404)
        return HttpReply(200, self.body(reply))

    def input_items(self, response_id: str) -> HttpReply:
        stored = self.stored.get(response_id)
        if stored is None:
            return self.invalid_request(f"Response with id '{response_id}' not found.", status=404)
        data = [{"id": f"item_{n}", **item} for n, item in enumerate(stored.input)]
        first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
        return HttpReply(200, {"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": False})

    def cancel(self, response_id: str) -> HttpReply:
        """POST /v1/responses/{id}/cancel: only background responses can be cancelled; the
        answer is the response (this stand-in has always finished it: its output stays)."""
        reply = self.replies.get(response_id)
        if reply is None:
            return self.invalid_request(f"Response with id '{response_id}' not found.", status=404)
        if reply.request.get("background") is not True:
            return self.invalid_request("Only responses created with background=true can be cancelled.")
        return HttpReply(200, {**self.body(reply), "status": "cancelled"})

    def queued(self, reply: Reply) -> dict[str, Any]:
        """A `background: true` create answers at once, queued; the result is read back later."""
        return self._response(reply, "queued", [], None)

    def remember(self, reply: Reply) -> None:
        if reply.request.get("store", True) is not False:
            self.replies[reply.id] = reply
        conversation = self.conversation_of(reply.request)
        if conversation is not None and conversation in self.conversations:
            output = [self._final_item(reply, p) for p in reply.parts]
            self.conversations[conversation].extend([*_input_items(reply.request), *output])
        previous = reply.request.get("previous_response_id")
        self.stored[reply.id] = StoredResponse(
            output=[self._final_item(reply, p) for p in reply.parts],
            input=_input_items(reply.request),
            previous_response_id=str(previous) if previous else None,
        )

    # ---- errors ----------------------------------------------------------------------------

    def stream_error(self, reply: Reply, err: UpstreamError) -> list[Event]:
        type_ = err.type or openai_error_type(err.status)
        code = err.code or type_
        message = err.message or ("The server had an error while processing your request. Sorry about that!")
        error = {"type": type_, "code": code, "message": message, "param": None}
        failed = self._response(reply, "failed", [], None, error={"code": code, "message": message})
        return [
            Event("error", {"type": "error", "error": error}),
            Event("response.failed", {"type": "response.failed", "response": failed}),
        ]

    # ---- rendering -------------------------------------------------------------------------

    def _response(
        self,
        reply: Reply,
        status: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        req = reply.request
        done = status != "in_progress"
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {
            "id": reply.id,
            "object": "response",
            "created_at": reply.created,
            "status": status,
            "background": bool(req.get("background", False)),
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": error,
            "frequency_penalty": 0.0,
            "incomplete_details": incomplete,
            "instructions": req.get("instructions"),
            "max_output_tokens": req.get("max_output_tokens"),
            "max_tool_calls": req.get("max_tool_calls"),
            "model": reply.model,
            "moderation": None,
            "output": output,
            "parallel_tool_calls": req.get("parallel_tool_calls", True),
            "presence_penalty": 0.0,
            "previous_response_id": req.get("previous_response_id"),
            "prompt_cache_key": req.get("prompt_cache_key"),
            "prompt_cache_retention": None,
            "reasoning": req.get("reasoning") or {"effort": None, "summary": None},
            "safety_identifier": req.get("safety_identifier"),
            "service_tier": "default" if done else req.get("service_tier", "auto"),
            "store": req.get("store", True),
            "temperature": req.get("temperature", 1.0),
            "text": req.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": req.get("tool_choice", "auto"),
            "tools": req.get("tools") or [],
            "top_logprobs": req.get("top_logprobs", 0),
            "top_p": req.get("top_p", 1.0),
            "truncation": req.get("truncation", "disabled"),
            "usage": usage,
            "user": req.get("user"),
            "metadata": req.get("metadata") or {},
        }

    def _usage(self, reply: Reply) -> dict[str, Any]:
        return {
            "input_tokens": reply.input_tokens,
            "input_tokens_details": {"cached_tokens": reply.cache_read_tokens},
            "output_tokens": reply.output_tokens,
            "output_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
            "total_tokens": reply.input_tokens + reply.output_tokens,
            **reply.usage_extra,
        }

    def _status(self, reply: Reply) -> str:
        return "incomplete" if reply.truncated else "completed"

    def _reasoning_item(self, reply: Reply, part: Part, final: bool) -> dict[str, Any]:
        item: dict[str, Any] = {"id": part.item_id, "type": "reasoning"}
        if "reasoning.encrypted_content" in (reply.request.get("include") or []):
            item["encrypted_content"] = "gAAAAAB" + part.signature
        reasoning = reply.request.get("reasoning")
        wants_summary = isinstance(reasoning, dict) and reasoning.get("summary")
        item["summary"] = [{"type": "summary_text", "text": part.text}] if final and wants_summary else []
        return item

    @staticmethod
    def _text_part(text: str) -> dict[str, Any]:
        return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}

    def _initial_item(self, reply: Reply, part: Part) -> dict[str, Any]:
        if part.kind == "thinking":
            return self._reasoning_item(reply, part, final=False)
        if part.kind == "text":
            return {"id": part.item_id, "type": "message", "status": "in_progress", "content": [], "role": "assistant"}
        return self._call_item(part, final=False)

    def _final_item(self, reply: Reply, part: Part) -> dict[str, Any]:
        if part.kind == "thinking":
            return self._reasoning_item(reply, part, final=True)
        if part.kind == "text":
            return {
                "id": part.item_id,
                "type": "message",
                "status": "completed",
                "content": [self._text_part(part.text)],
                "role": "assistant",
            }
        return self._call_item(part, final=True)

    @staticmethod
    def _call_item(part: Part, final: bool) -> dict[str, Any]:
        """A call item as the API writes it, by `ToolCallSpec.item` (function_call by default)."""
        kind = _item_type(part)
        status = ("incomplete" if part.truncated else "completed") if final else "in_progress"
        item_id = _CALL_PREFIX.get(kind, "fc_") + part.item_id[3:]
        arguments = dict(part.spec.arguments or {}) if part.spec is not None else {}
        if kind == "function_call":
            return {
                "id": part.item_id,
                "type": kind,
                "status": status,
                "arguments": part.text if final else "",
                "call_id": part.call_id,
                "name": part.name,
            }
        if kind == "custom_tool_call":
            text = part.text if final else ""
            # As recorded (tests/fixtures/wire/openai-responses-response-custom-tool-call.json): with a status.
            return {
                "id": item_id,
                "type": kind,
                "status": status,
                "call_id": part.call_id,
                "input": text,
                "name": part.name,
            }
        if kind == "web_search_call":
            return {"id": item_id, "type": kind, "status": status, "action": arguments}
        if kind == "mcp_call":
            return {
                "id": item_id,
                "type": kind,
                "status": status,
                "name": part.name,
                "server_label": arguments.get("server_label", ""),
                "arguments": orjson.dumps(arguments.get("arguments", {})).decode(),
                "output": "ok" if final else None,
            }
        field = "operation" if kind == "apply_patch_call" else "action"
        item: dict[str, Any] = {
            "id": item_id,
            "type": kind,
            "call_id": part.call_id,
            "status": status,
            field: arguments,
        }
        if kind == "computer_call":
            item["pending_safety_checks"] = []
        return item

    def _text_fields(self, part: Part, index: int) -> dict[str, Any]:
        return {"content_index": 0, "item_id": part.item_id, "output_index": index}

    def head(self, reply: Reply) -> list[Event]:
        response = self._response(reply, "in_progress", [], None)
        return [
            Event(name, {"type": name, "response": response}) for name in ("response.created", "response.in_progress")
        ]

    def open_part(self, reply: Reply, part: Part, index: int) -> list[Event]:
        events = [
            Event(
                "response.output_item.added",
                {"type": "response.output_item.added", "item": self._initial_item(reply, part), "output_index": index},
            )
        ]
        if part.kind == "text":
            events.append(
                Event(
                    "response.content_part.added",
                    {
                        "type": "response.content_part.added",
                        **self._text_fields(part, index),
                        "part": self._text_part(""),
                    },
                )
            )
        return events

    def delta(self, reply: Reply, part: Part, index: int, fragment: str) -> list[Event]:
        fields: dict[str, Any] = {"delta": fragment, "item_id": part.item_id, "output_index": index}
        options = reply.request.get("stream_options")
        if not isinstance(options, dict) or options.get("include_obfuscation", True):
            fields["obfuscation"] = obfuscation(part.item_id + fragment)
        if part.kind == "call" and _item_type(part) == "custom_tool_call":
            name = "response.custom_tool_call_input.delta"
            fields["item_id"] = self._call_item(part, final=False)["id"]
        elif part.kind == "call" and _item_type(part) != "function_call":
            return []  # other call items arrive whole, in output_item.added and .done
        elif part.kind == "call":
            name = "response.function_call_arguments.delta"
        elif part.kind == "text":
            name = "response.output_text.delta"
            fields.update(content_index=0, logprobs=[])
        else:
            return []  # reasoning items carry no deltas unless summaries stream
        return [Event(name, {"type": name, **fields})]

    def close_part(self, reply: Reply, part: Part, index: int) -> list[Event]:
        events: list[Event] = []
        if part.kind == "call" and _item_type(part) == "custom_tool_call" and not part.truncated:
            item_id = self._call_item(part, final=False)["id"]
            done = {"type": "response.custom_tool_call_input.done", "input": part.text, "item_id": item_id}
            events.append(Event(done["type"], {**done, "output_index": index}))
        elif part.kind == "call" and _item_type(part) == "function_call" and not part.truncated:
            events.append(
                Event(
                    "response.function_call_arguments.done",
                    {
                        "type": "response.function_call_arguments.done",
                        "arguments": part.text,
                        "item_id": part.item_id,
                        "output_index": index,
                    },
                )
            )
        elif part.kind == "text":
            fields = self._text_fields(part, index)
            events.append(
                Event(
                    "response.output_text.done",
                    {"type": "response.output_text.done", **fields, "logprobs": [], "text": part.text},
                )
            )
            events.append(
                Event(
                    "response.content_part.done",
                    {"type": "response.content_part.done", **fields, "part": self._text_part(part.text)},
                )
            )
        events.append(
            Event(
                "response.output_item.done",
                {"type": "response.output_item.done", "item": self._final_item(reply, part), "output_index": index},
            )
        )
        return events

    def tail(self, reply: Reply) -> list[Event]:
        status = self._status(reply)
        name = "response.completed" if status == "completed" else "response.incomplete"
        return [Event(name, {"type": name, "response": self.body(reply)})]

    def body(self, reply: Reply) -> dict[str, Any]:
        output = [self._final_item(reply, p) for p in reply.parts]
        return self._response(reply, self._status(reply), output, self._usage(reply))

    def payload(self, event: Event, seq: int) -> bytes:
        if not isinstance(event.data, dict):
            return super().payload(event, seq)
        rest = {k: v for k, v in event.data.items() if k != "type"}
        if event.name == "error":  # the recorded error frame puts the number second
            return orjson.dumps({"type": "error", "sequence_number": seq, **rest})
        rest["sequence_number"] = seq
        return orjson.dumps({"type": event.data.get("type"), **{k: rest[k] for k in sorted(rest)}})
