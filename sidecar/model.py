"""Neutral types shared by dialects, guards, enforcement and telemetry.

Dialects translate wire JSON into these; guards and policy only ever see these. Nothing here
knows a wire format.
"""

from __future__ import annotations

import hashlib
import math
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, Generic, NamedTuple, NoReturn, Protocol, TypeVar

import orjson

from sidecar.memo import ShortMemo


class Provider(StrEnum):
    ANTHROPIC = "anthropic"
    OPENAI = "openai"
    # An MCP server (Streamable HTTP, `mcp.servers`): the upstream of the MCP path.
    MCP = "mcp"


class CallPath(StrEnum):
    """Which way a tool call travels through the sidecar (metric label `path`, policy `input.path`):
    asked for by a model in a provider reply, or sent by an MCP client as `tools/call`."""

    MODEL = "model"
    MCP = "mcp"


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no whitespace, integral floats written as integers (1.0 == 1).

    Used for replay keys and schema hashes, so equal values always give equal bytes.
    """
    return orjson.dumps(_normalise_numbers(value), option=orjson.OPT_SORT_KEYS)


def _normalise_numbers(value: Any) -> Any:
    if isinstance(value, float):
        # Only integers orjson can write (64 bits): 1e20 stays a float rather than failing.
        if math.isfinite(value) and value.is_integer() and -(2**63) <= value < 2**64:
            return int(value)
        return value
    if isinstance(value, dict):
        return {k: _normalise_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise_numbers(v) for v in value]
    return value


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# Where a value sits in a JSON document: keys and indices from the root.
JsonPath = tuple[str | int, ...]


def replace_paths(value: Any, replacements: dict[JsonPath, Any]) -> Any:
    """`value` with the values at these paths replaced; the containers on the way are copied,
    everything else is shared (the input is never mutated). A missing last key is added; a
    path through something missing is ignored."""
    if not replacements:
        return value
    if () in replacements:
        return replacements[()]
    children: dict[str | int, dict[JsonPath, Any]] = {}
    for path, new in replacements.items():
        children.setdefault(path[0], {})[path[1:]] = new
    if isinstance(value, dict):
        copied = dict(value)
        for key, below in children.items():
            if isinstance(key, str) and (key in value or () in below):
                copied[key] = replace_paths(value.get(key), below)
        return copied
    if isinstance(value, list):
        items = list(value)
        for index, below in children.items():
            if isinstance(index, int) and 0 <= index < len(items):
                items[index] = replace_paths(items[index], below)
        return items
    return value


class ToolKind(StrEnum):
    """What kind of tool a declaration or a call is (the policy's `input.tool.kind`)."""

    FUNCTION = "function"  # the agent's own tool, arguments per its JSON Schema
    CUSTOM = "custom"  # the agent's own tool taking free text or a grammar (OpenAI custom tools)
    PROVIDER_DEFINED = "provider_defined"  # defined by the provider, run by the agent (bash, computer, shell...)
    SERVER = "server"  # run by the provider itself (web search, code interpreter, its MCP calls)

    @property
    def runs_on_client(self) -> bool:
        return self is not _SERVER  # a module name: read for every call by several filters


_SERVER = ToolKind.SERVER


@dataclass(frozen=True, slots=True)
class ToolDeclaration:
    """A client tool as declared in a request (`input_schema` / `parameters`, or a provider
    tool's `type`), or listed by an MCP server (`inputSchema`, with its `outputSchema` and
    `annotations` when it has them). `has_schema`: lockdown applies (function tools, and any
    tool declared with a JSON Schema); without one the policy decides alone."""

    name: str
    schema: dict[str, Any]
    description: str = ""
    schema_hash: str = ""
    # Size of the schema's JSON: what compiling it costs (bounded caches, size limits).
    schema_bytes: int = 0
    kind: ToolKind = ToolKind.FUNCTION
    has_schema: bool = True
    # MCP only: the JSON Schema `structuredContent` must match, and the server's hints
    # (`readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`, `title`).
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None

    @classmethod
    def create(
        cls,
        name: str,
        schema: dict[str, Any] | None,
        description: str = "",
        output_schema: dict[str, Any] | None = None,
        annotations: dict[str, Any] | None = None,
        *,
        kind: ToolKind = ToolKind.FUNCTION,
    ) -> ToolDeclaration:
        has_schema = isinstance(schema, dict) or kind is ToolKind.FUNCTION
        schema = schema if isinstance(schema, dict) else ({"type": "object"} if has_schema else {})
        output = output_schema if isinstance(output_schema, dict) else None
        hints = annotations if isinstance(annotations, dict) and annotations else None
        digest, size = schema_hash_and_size(schema)
        return cls(
            name,
            schema,
            description or "",
            digest,
            size,
            kind=kind,
            has_schema=has_schema,
            output_schema=output,
            annotations=hints,
        )


# Plain-serialisation digest -> canonical hash. Keys are 32-byte digests, so the memory is
# bounded by the count whatever the schemas' sizes.
_SCHEMA_HASHES_MAX = 4096
_SCHEMA_HASHES: ShortMemo[bytes, str] = ShortMemo(_SCHEMA_HASHES_MAX, 32)


def schema_hash_and_size(schema: dict[str, Any]) -> tuple[str, int]:
    """Every request re-declares its tools: hash each distinct schema once (found by a digest
    of its plain serialisation, which is cheap), not once per request."""
    raw = orjson.dumps(schema)
    key = hashlib.blake2b(raw, digest_size=32).digest()
    cached = _SCHEMA_HASHES.get(key)
    if cached is None:
        cached = _SCHEMA_HASHES.keep(key, sha256_hex(canonical_json(schema)), len(key))
    return cached, len(raw)


def schema_hash(schema: dict[str, Any]) -> str:
    return schema_hash_and_size(schema)[0]


def declaration_hash(declaration: ToolDeclaration) -> str:
    """sha256 of the canonical JSON of name, description and schema: everything the model is
    shown about a tool, so a reworded description counts as a change as much as a new field.
    An MCP tool's output schema and annotations count too (a `readOnlyHint` that turns false is
    a change worth seeing); declarations without them hash as they always did."""
    document: dict[str, Any] = {
        "name": declaration.name,
        "description": declaration.description,
        "schema": declaration.schema,
    }
    if declaration.output_schema is not None:
        document["output_schema"] = declaration.output_schema
    if declaration.annotations:
        document["annotations"] = declaration.annotations
    return sha256_hex(canonical_json(document))


def _read_only(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"this {type(self).__name__} is shared by every request that declares it: copy it to edit")


K = TypeVar("K")
V = TypeVar("V")


class FrozenDict(dict[K, V]):
    """A dict shared between requests: reads like a dict, raises TypeError on any edit.

    Sharing one object between the requests that send the same thing (a tool list) is what
    saves reading it again; an edit would leak into every other request, so there is none."""

    __slots__ = ()
    __setitem__ = __delitem__ = pop = popitem = clear = update = setdefault = __ior__ = _read_only

    def __reduce__(self) -> tuple[type[dict[K, V]], tuple[dict[K, V]]]:
        """A copy (copy, deepcopy, pickle) is a plain dict, which its owner may edit."""
        return dict, (dict(self),)


class FrozenList(list[V]):
    """A list shared between requests: reads like a list, raises TypeError on any edit."""

    __slots__ = ()
    __setitem__ = __delitem__ = append = extend = insert = pop = remove = clear = sort = reverse = _read_only
    __iadd__ = __imul__ = _read_only

    def __reduce__(self) -> tuple[type[list[V]], tuple[list[V]]]:
        """A copy (copy, deepcopy, pickle) is a plain list, which its owner may edit."""
        return list, (list(self),)


class ToolList(FrozenDict[str, ToolDeclaration]):
    """The client tools of one distinct tool list, by name: read once, then shared by every
    request that declares the same list (the dialects' `declarations`). Never edited: a filter
    that narrows a request's tools makes a new mapping.

    Being one object per list is the point: work done per list rather than per request (metric
    labels, the tool inventory) is remembered by its identity (`PerToolList`), which is free,
    where recognising the list by its contents would walk it: the very work saved."""

    __slots__ = ("__weakref__",)


class PerToolList(Generic[V]):
    """A value remembered per `ToolList`, by identity, for as long as the list lives.

    Weakly held (a list the dialects' cache evicts is not kept alive here) and bounded by
    count: entries of lists gone are dropped whenever the memo fills up."""

    __slots__ = ("_entries", "max_entries")

    def __init__(self, max_entries: int = 1024) -> None:
        self.max_entries = max_entries
        self._entries: dict[int, tuple[weakref.ref[ToolList], V]] = {}

    def get(self, tools: Mapping[str, ToolDeclaration]) -> V | None:
        """The value remembered for `tools`; None if none is, or `tools` is not a `ToolList`."""
        entry = self._entries.get(id(tools))
        return entry[1] if entry is not None and entry[0]() is tools else None

    def put(self, tools: Mapping[str, ToolDeclaration], value: V) -> None:
        """Remember `value` for `tools` (nothing is remembered for another kind of mapping)."""
        if not isinstance(tools, ToolList):
            return
        if len(self._entries) >= self.max_entries:
            self._entries = {key: entry for key, entry in self._entries.items() if entry[0]() is not None}
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
        self._entries[id(tools)] = (weakref.ref(tools), value)


@dataclass(slots=True)
class ToolCall:
    """A complete client tool call made by the model.

    `arguments` is None when the raw arguments are not a JSON object; `parse_error` says why.
    `index` is the call's position among the tool calls of its message (0-based).
    `kind`: what the wire says the call is (a server call is observed, never the agent's to
    run). `item_type`: the wire item that carried it, so a dialect answers it in kind.
    `repairable`: the protocol has an answer that carries the sidecar's error (a Responses
    `computer_call` only takes a screenshot; a server call takes none): else a refusal blocks.
    """

    id: str
    name: str
    arguments: dict[str, Any] | None
    raw_arguments: str
    index: int = 0
    parse_error: str | None = None
    truncated: bool = False
    kind: ToolKind = ToolKind.FUNCTION
    item_type: str = ""
    repairable: bool = True
    _canonical: bytes | None = field(default=None, repr=False, compare=False)
    _args_digest: str | None = field(default=None, repr=False, compare=False)
    # The `arguments` object that `read_by_orjson` vouched for (an identity, not a copy).
    _finite: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def read_by_orjson(self) -> None:
        """Vouch that orjson read the current arguments, so no float in them is NaN or
        infinite (orjson refuses them; only the stdlib fallback reads them, `read_json`).
        The lockdown then skips its walk for such numbers. The promise holds for this object
        only: arguments set afterwards are walked again."""
        self._finite = self.arguments

    @property
    def finite_arguments(self) -> bool:
        """Whether the arguments are vouched free of NaN and infinities (`read_by_orjson`)."""
        return self._finite is not None and self._finite is self.arguments

    @property
    def canonical_arguments(self) -> bytes:
        """Canonical JSON of the arguments (raw text when unparseable), computed once: the
        replay key, the approval binding and the policy input all hash it."""
        if self._canonical is None:
            value = self.arguments if self.arguments is not None else self.raw_arguments
            self._canonical = canonical_json(value)
        return self._canonical

    @property
    def args_hash(self) -> str:
        """sha256 of the canonical arguments ("" when unparseable), computed once like them:
        the replay, approval, legs and policy filters each read it for every call."""
        if self.arguments is None:
            return ""
        if self._args_digest is None:
            self._args_digest = sha256_hex(self.canonical_arguments)
        return self._args_digest


class ToolResult(NamedTuple):
    """A tool result the agent sends back, matched later to the call it answers.

    A named tuple: immutable like a frozen dataclass at a third of its construction cost
    (3.2 k against 10.8 k instructions); a request builds one per result it carries."""

    call_id: str
    content: Any
    is_error: bool = False
    tool_name: str | None = None
    size: int = 0
    # What the wire found wrong reading it (MCP: `structuredContent` that fails `outputSchema`).
    anomalies: tuple[str, ...] = ()


class EchoedCall(NamedTuple):
    """A call the agent's request repeats from history (assistant turn), with its tool name.
    (A named tuple, as `ToolResult`: one per call of the history, on every request.)"""

    call_id: str
    name: str
    arguments: Any = None


@dataclass(frozen=True, slots=True)
class FieldError:
    """One argument problem. `kind` is the metric label: type, required, unknown_property,
    enum, format, range, other."""

    field: str
    problem: str
    expected: str
    kind: str = "other"

    def to_json(self) -> dict[str, str]:
        return {"field": self.field, "problem": self.problem, "expected": self.expected}


class VerdictKind(StrEnum):
    ALLOW = "allow"
    REJECT = "reject"
    DENY = "deny"
    APPROVAL = "approval"
    REPLAY = "replay"


# Read through module names on the hot path (a member read through its enum class is slower
# on Python 3.11).
_ALLOW = VerdictKind.ALLOW

# Contract statuses of the structured error the model receives.
STATUS_BY_KIND = {
    VerdictKind.DENY: "denied",
    VerdictKind.APPROVAL: "approval_required",
    VerdictKind.REPLAY: "replayed",
}


@dataclass(slots=True)
class Verdict:
    """What the guards decided about one call."""

    kind: VerdictKind = VerdictKind.ALLOW
    status: str | None = None
    errors: list[FieldError] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    retryable: bool = True
    # Extra keys merged into the payload the model receives (approval id, replayed result…).
    details: dict[str, Any] = field(default_factory=dict)
    # Set by a guard whose refusal is only observed (shadow / observe rollouts).
    guard: str = ""

    @property
    def allowed(self) -> bool:
        return self.kind is _ALLOW  # a module name: read for every call at every filter

    @classmethod
    def allow(cls) -> Verdict:
        return cls()

    @classmethod
    def reject(cls, status: str, errors: list[FieldError], guard: str = "") -> Verdict:
        return cls(VerdictKind.REJECT, status, errors, guard=guard)

    def model_payload(self) -> dict[str, Any]:
        """The structured error given to the model (DESIGN.md contract)."""
        status = self.status or STATUS_BY_KIND.get(self.kind, "invalid_arguments")
        payload: dict[str, Any] = {"status": status}
        if self.errors:
            payload["errors"] = [e.to_json() for e in self.errors]
        if self.reasons:
            payload["reasons"] = list(self.reasons)
        payload.update(self.details)
        payload["retryable"] = self.retryable
        return payload

    def summary(self) -> str:
        """One human line, used in block explanations and logs."""
        status = self.status or STATUS_BY_KIND.get(self.kind, self.kind.value)
        parts = [f"{e.field or '(arguments)'}: {e.problem}" for e in self.errors]
        parts += self.reasons
        return f"{status}: " + "; ".join(parts) if parts else status


NOT_RUN_PAYLOAD: dict[str, Any] = {
    "status": "not_run",
    "reasons": [
        "not run: another call in the same turn was refused; "
        "re-issue all calls of this turn together once it is corrected"
    ],
    "retryable": True,
}


class SessionSource(StrEnum):
    """Where a session id came from (DESIGN.md "Session and call identity"), strongest first."""

    HEADER = "header"  # the explicit session header (`X-Sidecar-Session`)
    CONVERSATION = "conversation"  # an OpenAI conversation (`conversation` on /v1/responses)
    THREAD = "thread"  # an Anthropic message thread: its root message id
    CHAIN = "chain"  # a Responses `previous_response_id` chain: its root response id
    USER = "user"  # the provider's user field (`metadata.user_id`, `user`, `prompt_cache_key`)
    MCP_SESSION = "mcp_session"  # an MCP server's `Mcp-Session-Id` (one MCP connection, 2025 revisions)
    DERIVED = "derived"  # a hash of how the conversation began: may merge conversations


@dataclass(frozen=True, slots=True)
class Session:
    """A session id and where it came from.

    Strong sessions (every source but `derived`) name one conversation or one user; a derived
    one may merge conversations that begin alike, so nothing learnt in one of them (a tool
    result) is handed to another unless the request's history proves it continues it.
    """

    id: str
    source: SessionSource

    @property
    def strong(self) -> bool:
        return self.source is not SessionSource.DERIVED


class ThreadMode(StrEnum):
    """The `thread` field of an Anthropic Messages request (`message-threads-2026-08-12`)."""

    CREATE = "create"  # the server holds the conversation under the response's id
    CONTINUE = "continue"  # only the new messages; system and tools come from the thread


@dataclass(frozen=True, slots=True)
class ThreadRef:
    mode: ThreadMode
    previous_message_id: str | None = None  # `continue` only


@dataclass(slots=True)
class RequestView:
    """What a dialect extracted from an agent's request."""

    model: str = ""
    stream: bool = False
    # Read-only: requests that declare the same tool list share one `ToolList`.
    declarations: Mapping[str, ToolDeclaration] = field(default_factory=dict)
    results: list[ToolResult] = field(default_factory=list)  # those after the latest model turn
    echoed_calls: list[EchoedCall] = field(default_factory=list)
    # Every tool result of the request, history included, in wire order, with the path of its
    # content (`Dialect.result_slots`), read in the same walk as `results`. `history` is the
    # list walked (`messages`, `input`): the slots describe any body that still holds it.
    result_slots: list[tuple[JsonPath, ToolResult]] = field(default_factory=list)
    history: list[Any] | None = None
    # The provider's user field (`metadata.user_id`, `user`, `prompt_cache_key`).
    session_hint: str | None = None
    # Text used to derive a session id when no explicit hint exists.
    session_seed: str = ""
    previous_response_id: str | None = None
    store: bool = True
    # Tools the provider runs itself (web_search, code_interpreter, mcp:<server>...): a server
    # call is `declared` when its name is here.
    server_tools: frozenset[str] = frozenset()
    # The provider-held conversation the request belongs to: an OpenAI conversation id, or an
    # Anthropic message thread (create / continue from a message id).
    conversation: str | None = None
    thread: ThreadRef | None = None


# ---------------------------------------------------------------------------------------------
# Replies: what a dialect reads a model response into, and enforcement edits
# ---------------------------------------------------------------------------------------------


class Frame(Protocol):
    """One wire event of a streamed reply, with its exact bytes (an SSE event)."""

    raw: bytes
    event: str | None
    data: str


class ItemKind(Enum):
    CALL = "call"
    TEXT = "text"
    OTHER = "other"


@dataclass(slots=True)
class Item:
    kind: ItemKind
    wire: dict[str, Any]
    call: ToolCall | None = None
    # For streamed items: the events that carried it, replayed when the item is unchanged.
    raw_events: list[Frame] = field(default_factory=list)


@dataclass(slots=True)
class Reply:
    """A model response in neutral order; `envelope` is the wire body without its items."""

    envelope: dict[str, Any]
    items: list[Item]
    complete: bool = True
    # The dialect edited the envelope while reading it: the upstream bytes may not pass as-is.
    rewritten: bool = False
    # Tool calls the dialect removed unchecked because the sidecar does not enforce where
    # they were (Chat Completions choices >= 1): reported by telemetry, never delivered.
    removed_calls: int = 0

    @property
    def calls(self) -> list[ToolCall]:
        """Every call of the reply, server calls included: all are checked."""
        return [item.call for item in self.items if item.call is not None]

    @property
    def client_calls(self) -> list[ToolCall]:
        """The calls the agent runs: what is delivered, recorded and answered."""
        return [item.call for item in self.items if item.call is not None and item.call.kind.runs_on_client]

    @property
    def first_call_position(self) -> int | None:
        for position, item in enumerate(self.items):
            if item.kind is ItemKind.CALL:
                return position
        return None


class TokenUsage(NamedTuple):
    """A reply's token usage, in one shape for every provider (read by `Dialect.usage`). A
    named tuple, as `ToolResult`: one per reply.

    `input` is every input token of the request: cache reads and cache writes included
    (Anthropic reports them apart from `input_tokens`; OpenAI's `prompt_tokens` / `input_tokens`
    already include `cached_tokens`). `reasoning` is the part of `output` spent thinking, when
    the provider reports it (0 otherwise).
    """

    input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0
    reasoning: int = 0

    @property
    def uncached(self) -> int:
        """Input tokens neither read from nor written to the cache (billed at the base rate)."""
        return max(0, self.input - self.cache_read - self.cache_write)


class SpanKind(StrEnum):
    CALL = "call"  # a tool call of an earlier model turn, echoed in the history
    RESULT = "result"  # a tool result


class ToolSpan(NamedTuple):
    """A tool call or result as it sits in a request: what it occupies of the model's input.

    `size` is its length in characters of its block as compact JSON (its payload written with
    orjson to count them). `latest`: in or after the latest model turn, i.e. sent to the model
    for the first time (unless the agent repeats a request), so it cannot have been read from a
    prompt cache. `name` is known for calls (and for results of protocols that carry it);
    results are named by the call they answer.

    A named tuple, immutable like a frozen dataclass at half its construction cost: every
    request builds one per call and result of its history.
    """

    kind: SpanKind
    call_id: str
    size: int
    name: str | None = None
    latest: bool = False


class RefusalReason(StrEnum):
    """Why a request or reply was refused as a whole (`sidecar_requests_refused_total{reason}`)."""

    SIZE = "size"  # a body or a held stream larger than its configured bound
    DEPTH = "depth"  # JSON nested deeper than the sidecar can write back
    ENCODING = "encoding"  # bytes that are not valid UTF-8 where JSON is expected
    CONTENT_TYPE = "content_type"  # a reply under a content type the SDK would read otherwise
    STATUS = "status"  # a success status the sidecar cannot vouch for (2xx other than 200)
    FRAMING = "framing"  # a stream or body the sidecar cannot read the way the SDK would
    UNSUPPORTED_PATH = "unsupported_path"  # a path that can carry tool calls no dialect enforces
    WEBSOCKET = "websocket"  # an upgrade the sidecar does not enforce
    LIMIT = "limit"  # a bound on what an upstream or agent controls (held bytes, item count)
