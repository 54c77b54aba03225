"""MCP's JSON-RPC messages read into the neutral model, and the sidecar's own answers written back:
what a dialect does for a model protocol, for the Model Context Protocol.

Revisions (docs/mcp.md): 2026-07-28 is stateless, every request carries its protocol version in
`params._meta` and mirrors `method` / `params.name` into the `Mcp-Method` / `Mcp-Name`
headers; 2025-06-18 and 2025-11-25 negotiate with `initialize` and keep an `Mcp-Session-Id`;
2025-03-26 (no `MCP-Protocol-Version` header) also allows JSON-RPC batches. Knows no policy,
no transport.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

import orjson

from sidecar.dialects.base import MAX_DEPTH, TooDeep, as_dict, as_list, compact, loads
from sidecar.exchange.state import ResultRewrite
from sidecar.model import ToolCall, ToolDeclaration, ToolResult, Verdict

JSONRPC = "2.0"
MODERN_VERSIONS = frozenset({"2026-07-28"})
# Revisions whose Streamable HTTP body may be a JSON-RPC batch (2025-06-18 removed them).
BATCH_VERSIONS = frozenset({"2025-03-26"})
PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
PROTOCOL_VERSION_HEADER = "MCP-Protocol-Version"
SESSION_HEADER = "Mcp-Session-Id"
METHOD_HEADER = "Mcp-Method"
NAME_HEADER = "Mcp-Name"
# Methods whose `params` field is mirrored into `Mcp-Name` (2026-07-28).
NAME_PARAMS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}

TOOLS_CALL = "tools/call"
TOOLS_LIST = "tools/list"
# A tools/call result asking the client for input first (MRTR, 2026-07-28): not the call's result.
INPUT_REQUIRED = "input_required"

# Anomaly kinds of an MCP result (sidecar_tool_result_anomalies_total{kind}).
OUTPUT_SCHEMA_VIOLATION = "output_schema_violation"  # structuredContent does not match outputSchema
MISSING_STRUCTURED_CONTENT = "missing_structured_content"  # an outputSchema, and no structuredContent


class ErrorCode:
    """JSON-RPC error codes the sidecar answers with."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    HEADER_MISMATCH = -32020  # 2026-07-28: a mirrored header disagrees with the body


class Kind(StrEnum):
    REQUEST = "request"
    NOTIFICATION = "notification"
    RESPONSE = "response"


class WireError(Exception):
    """A body the sidecar cannot read as MCP: answered as a JSON-RPC error, never forwarded."""

    def __init__(self, code: int, message: str, status: int = 400, request_id: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.request_id = request_id


@dataclass(slots=True)
class Message:
    """One JSON-RPC message, as the wire had it (`raw`), with what the sidecar reads of it."""

    raw: dict[str, Any]
    kind: Kind

    @property
    def id(self) -> Any:
        return self.raw.get("id")

    @property
    def method(self) -> str:
        method = self.raw.get("method")
        return method if isinstance(method, str) else ""

    @property
    def params(self) -> dict[str, Any]:
        return as_dict(self.raw.get("params"))

    @property
    def meta(self) -> dict[str, Any]:
        return as_dict(self.params.get("_meta"))

    @property
    def result(self) -> dict[str, Any] | None:
        result = self.raw.get("result")
        return result if isinstance(result, dict) else None

    @property
    def error(self) -> dict[str, Any] | None:
        error = self.raw.get("error")
        return error if isinstance(error, dict) else None


def message_of(value: Any) -> Message:
    """Classify one decoded JSON-RPC value (JSON-RPC 2.0 §4, §5): by key presence, not by shape."""
    if not isinstance(value, dict) or value.get("jsonrpc") != JSONRPC:
        raise WireError(ErrorCode.INVALID_REQUEST, "not a JSON-RPC 2.0 message")
    has_id = "id" in value
    if isinstance(value.get("method"), str):
        if has_id and not _valid_id(value["id"]):
            raise WireError(ErrorCode.INVALID_REQUEST, "a JSON-RPC id is a string or an integer")
        if "params" in value and not isinstance(value["params"], dict):
            raise WireError(ErrorCode.INVALID_REQUEST, "MCP params are an object", request_id=value.get("id"))
        return Message(value, Kind.REQUEST if has_id else Kind.NOTIFICATION)
    if has_id and ("result" in value or "error" in value):
        return Message(value, Kind.RESPONSE)
    raise WireError(ErrorCode.INVALID_REQUEST, "neither a request, a notification nor a response")


def _valid_id(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)


def read_messages(body: bytes) -> tuple[list[Message], bool]:
    """The messages of a POST body and whether it was a batch. Raises WireError."""
    try:
        value = loads(body)
    except TooDeep:
        raise WireError(ErrorCode.PARSE_ERROR, f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError):
        raise WireError(ErrorCode.PARSE_ERROR, "Parse error: the body is not JSON") from None
    if isinstance(value, list):
        if not value:
            raise WireError(ErrorCode.INVALID_REQUEST, "an empty batch")
        return [message_of(item) for item in value], True
    return [message_of(value)], False


def reply_messages(value: Any) -> list[Message]:
    """The JSON-RPC messages of an upstream JSON body or SSE event (unreadable ones skipped)."""
    items = value if isinstance(value, list) else [value]
    messages = []
    for item in items:
        try:
            messages.append(message_of(item))
        except WireError:
            continue
    return messages


def protocol_version(headers: Mapping[str, str], message: Message | None) -> str | None:
    """The revision a request speaks: its `_meta` (2026-07-28), else the header, else None
    (a 2025-03-26 client sends neither)."""
    if message is not None:
        version = message.meta.get(PROTOCOL_VERSION_META)
        if isinstance(version, str):
            return version
    return headers.get(PROTOCOL_VERSION_HEADER)


def batch_allowed(version: str | None) -> bool:
    return version is None or version in BATCH_VERSIONS


def decode_header_value(value: str | None) -> str | None:
    """A mirrored header value, with the `=?base64?…?=` sentinel decoded (2026-07-28)."""
    if value is None:
        return None
    match = _B64.fullmatch(value)
    if match is None:
        return value
    try:
        return base64.b64decode(match.group(1), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


_B64 = re.compile(r"=\?base64\?(.*)\?=")


def header_mismatch(headers: Mapping[str, str], message: Message) -> str | None:
    """What a 2026-07-28 request's mirrored headers contradict in its body, if anything.

    An intermediary that judges the body must not let a header say otherwise to the server or
    to anything routing behind the sidecar (the specification's "Server Validation").
    """
    version = message.meta.get(PROTOCOL_VERSION_META)
    if version not in MODERN_VERSIONS:
        return None
    if headers.get(PROTOCOL_VERSION_HEADER) != version:
        return f"{PROTOCOL_VERSION_HEADER} does not match params._meta {PROTOCOL_VERSION_META}"
    if headers.get(METHOD_HEADER) != message.method:
        return f"{METHOD_HEADER} does not match the request's method"
    field = NAME_PARAMS.get(message.method)
    if field is not None:
        value = message.params.get(field)
        if value is not None and decode_header_value(headers.get(NAME_HEADER)) != value:
            return f"{NAME_HEADER} does not match the request's params.{field}"
    return None


# ---------------------------------------------------------------------------------------------
# tools/list and tools/call, neutral
# ---------------------------------------------------------------------------------------------


def declarations(result: dict[str, Any]) -> dict[str, ToolDeclaration]:
    """A `tools/list` result's tools as declarations (entries without a string name are skipped)."""
    declared: dict[str, ToolDeclaration] = {}
    for tool in as_list(result.get("tools")):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            continue
        name = tool["name"]
        declared[name] = ToolDeclaration.create(
            name,
            tool.get("inputSchema"),
            str(tool.get("description") or ""),
            output_schema=tool.get("outputSchema"),
            annotations=tool.get("annotations"),
        )
    return declared


def new_call_id() -> str:
    """A call id for the ledger: JSON-RPC ids repeat across clients and connections."""
    return "mcp_" + secrets.token_hex(12)


def tool_call(message: Message, call_id: str | None = None) -> ToolCall:
    """A `tools/call` request as a ToolCall; arguments that are not an object fail lockdown."""
    params = message.params
    name = params.get("name")
    arguments = params.get("arguments", {})
    raw = compact(arguments) if "arguments" in params else "{}"
    parsed = arguments if isinstance(arguments, dict) else None
    error = None if parsed is not None else "arguments must be a JSON object"
    return ToolCall(call_id or new_call_id(), name if isinstance(name, str) else "", parsed, raw, parse_error=error)


def continues_input(message: Message) -> bool:
    """A retry of a call that asked for input (MRTR): it carries the answers or the state."""
    params = message.params
    return "inputResponses" in params or "requestState" in params


def is_input_required(result: dict[str, Any]) -> bool:
    return result.get("resultType") == INPUT_REQUIRED


def tool_result(call: ToolCall, result: dict[str, Any], size: int, anomalies: tuple[str, ...] = ()) -> ToolResult:
    """A CallToolResult as a ToolResult: its content blocks, `isError`, and the structured
    content as one more text block (both are read by the client, so both are inspected)."""
    content: Any = result.get("content")
    if "structuredContent" in result:
        structured = result["structuredContent"]
        if not (isinstance(content, list) and content):
            content = compact(structured)
        elif not _restated(content, structured):  # what the client reads must all be inspected
            content = [*content, {"type": "text", "text": compact(structured)}]
    return ToolResult(call.id, content, result.get("isError") is True, call.name, size, anomalies)


def _restated(blocks: list[Any], structured: Any) -> bool:
    """Whether a text block already carries the structured content (the specification asks
    servers to send it serialised as text too; SDKs wrap a plain return value as `{"result": …}`)."""
    wrapped = structured.get("result") if isinstance(structured, dict) and len(structured) == 1 else None
    for block in blocks:
        text = block.get("text") if isinstance(block, dict) and block.get("type") == "text" else None
        if not isinstance(text, str):
            continue
        if text == wrapped:
            return True
        try:
            if loads(text) == structured:
                return True
        except ValueError:
            continue
    return False


def rewritten_result(result: dict[str, Any], rewrite: ResultRewrite, version: str | None) -> dict[str, Any]:
    """The CallToolResult the client gets for a result the policy withheld or redacted. A
    redaction keeps the content blocks, redacted; a result with structured content is withheld
    instead (a redacted string inside JSON could break it, and the structured content itself
    cannot be left out of a tool that declares an output schema). Withheld: the notice, as text,
    with `isError` (clients do not check a failed result against the tool's output schema)."""
    blocks = rewrite.redacted
    if blocks is not None and "structuredContent" not in result and isinstance(blocks, list):
        return {**result, "content": blocks}
    withheld: dict[str, Any] = {"content": [{"type": "text", "text": rewrite.notice}], "isError": True}
    if version in MODERN_VERSIONS:
        withheld["resultType"] = "complete"
    return withheld


def refusal_result(verdict: Verdict, version: str | None) -> dict[str, Any]:
    """The CallToolResult a refused call gets: the same structured error the model path gives
    (`Verdict.model_payload()`), as text content, with `isError` so the model reads it as a
    failed tool call and can correct itself. 2026-07-28 results name their `resultType`."""
    payload = compact(verdict.model_payload())
    result: dict[str, Any] = {"content": [{"type": "text", "text": payload}], "isError": True}
    if version in MODERN_VERSIONS:
        result["resultType"] = "complete"
    return result


def response(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": request_id, "result": result}


def error(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    return {"jsonrpc": JSONRPC, "id": request_id, "error": body}


def trace_carrier(message: Message) -> dict[str, str]:
    """The client's trace context in `params._meta` (the OpenTelemetry MCP conventions)."""
    meta = message.meta
    return {k: meta[k] for k in ("traceparent", "tracestate") if isinstance(meta.get(k), str)}


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


class McpWire:
    """The MCP side of `Wire` (what filters read of an exchange): hidden tools leave a
    `tools/list` result, and the trace context rides in `params._meta`."""

    name: ClassVar[str] = "mcp"
    server_side_state: ClassVar[bool] = False

    def hide_tools(self, body: dict[str, Any], hidden: set[str]) -> dict[str, Any]:
        tools = body.get("tools")
        if not isinstance(tools, list):
            return body  # a tools/call: its declarations were narrowed, nothing to rewrite
        kept = [t for t in tools if not (isinstance(t, dict) and t.get("name") in hidden)]
        return {**body, "tools": kept}

    def with_trace_context(self, body: dict[str, Any], carrier: dict[str, str]) -> dict[str, Any]:
        """`traceparent` / `tracestate` in `params._meta` (the OpenTelemetry MCP conventions)."""
        params = body.get("params")
        if not isinstance(params, dict) or not carrier:
            return body
        meta = {**as_dict(params.get("_meta")), **carrier}
        return {**body, "params": {**params, "_meta": meta}}


MCP_WIRE = McpWire()
