"""The rendering mechanism shared by the three wire formats.

A turn is first planned into a protocol-neutral `Reply` (ids, parts, argument fragments, token
counts). Each `WireFormat` subclass then only supplies *data*: what to emit when a part opens,
for each fragment, when it closes, and around the whole message. The driver (`stream_events`)
and the SSE encoder are the same for every protocol, so the three renderers cannot drift apart
in how they split, order or terminate a stream.
"""

from __future__ import annotations

import json
import random
import re
import string
import time
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import orjson

from sidecar.scripted.script import ANTHROPIC, ProtocolName, ToolCallSpec, Turn, UpstreamError

PartKind = Literal["thinking", "text", "call"]

_ALNUM = string.ascii_letters + string.digits


@dataclass(slots=True)
class Event:
    """One SSE event. `data` is a JSON object, or a raw string sent as is (`[DONE]`)."""

    name: str | None
    data: dict[str, Any] | str


@dataclass(slots=True)
class HttpReply:
    """A complete non-streaming HTTP answer (errors, pairing failures, JSON bodies)."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    pretty: bool = False


@dataclass(slots=True)
class Part:
    """One output element: a thinking block, a text block or a tool call.

    `text` is the full content (the argument string for a call); `fragments` is how it is
    streamed. `ordinal` is the position among parts of the same kind (Chat's tool_calls
    index). `truncated` marks a call cut by max_tokens: its fragments do not add up to JSON.
    """

    kind: PartKind
    text: str
    fragments: list[str]
    name: str = ""
    call_id: str = ""
    item_id: str = ""
    ordinal: int = 0
    signature: str = ""
    truncated: bool = False
    spec: ToolCallSpec | None = None


@dataclass(slots=True)
class Reply:
    """A turn planned for one request: everything a format needs, nothing wire-specific."""

    id: str
    model: str
    created: int
    request: dict[str, Any]
    parts: list[Part]
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    request_id: str
    stop_reason: str | None = None
    usage_extra: dict[str, Any] = field(default_factory=dict)
    # Prompt-cache reads and writes (Anthropic writes only), in each protocol's own fields.
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def calls(self) -> list[Part]:
        return [p for p in self.parts if p.kind == "call"]

    @property
    def truncated(self) -> bool:
        return any(p.truncated for p in self.parts)


class Ids:
    """Provider-looking random ids; seedable so a benchmark or a test can be reproducible."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)

    def alnum(self, n: int) -> str:
        return "".join(self.rng.choice(_ALNUM) for _ in range(n))

    def hex(self, n: int) -> str:
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(n))

    def b64(self, n: int) -> str:
        return "".join(self.rng.choice(_ALNUM + "+/") for _ in range(n))


def split_fragments(text: str, min_size: int = 1, max_size: int = 8) -> list[str]:
    """Cut a string at arbitrary (but deterministic) points, like a provider's token stream.

    Cuts fall inside keys, strings and escapes alike, which is what proxies must reassemble.
    """
    rng = random.Random(zlib.crc32(text.encode()))
    pieces: list[str] = []
    pos = 0
    while pos < len(text):
        size = rng.randint(min_size, max_size)
        pieces.append(text[pos : pos + size])
        pos += size
    return pieces


def split_words(text: str) -> list[str]:
    """Cut text into runs of one to three words, each carrying its leading space."""
    tokens = re.findall(r"\s*\S+|\s+$", text)
    rng = random.Random(zlib.crc32(text.encode()))
    pieces: list[str] = []
    while tokens:
        take = rng.randint(1, 3)
        pieces.append("".join(tokens[:take]))
        tokens = tokens[take:]
    return pieces or [text]


def spaced_json(value: Any) -> str:
    """JSON with `", "`/`": "` separators, the way Anthropic and older OpenAI models write it.

    orjson only writes compact JSON, hence the stdlib here (arguments only, never hot).
    """
    return json.dumps(value, ensure_ascii=False)


def compact_json(value: Any) -> str:
    return orjson.dumps(value).decode()


class WireFormat(ABC):
    """One provider protocol: ids, pairing checks, and the data of each stream event.

    Subclasses fill in the hooks; `stream_events` and `encode` drive them identically.
    """

    protocol: ClassVar[ProtocolName]
    path: ClassVar[str]
    default_model: ClassVar[str]
    named_events: ClassVar[bool] = True
    request_id_header: ClassVar[str] = "x-request-id"
    # OpenAI pretty-prints JSON bodies (2-space indent); Anthropic sends them compact.
    pretty_body: ClassVar[bool] = False
    # Where empty tool arguments render as "" (Anthropic streams nothing) or "{}" (OpenAI).
    empty_arguments: ClassVar[str] = "{}"

    def __init__(self, ids: Ids) -> None:
        self.ids = ids

    # ---- ids and argument text -------------------------------------------------------------

    @abstractmethod
    def reply_id(self) -> str: ...

    @abstractmethod
    def call_id(self) -> str: ...

    def item_id(self, kind: PartKind) -> str:
        """Per-part item id (Responses `fc_`/`msg_`/`rs_`); other protocols need none."""
        return ""

    @abstractmethod
    def request_id(self) -> str: ...

    def arguments_text(self, spec: ToolCallSpec) -> str:
        if spec.raw_arguments is not None:
            return spec.raw_arguments
        return compact_json(spec.arguments) if spec.arguments else self.empty_arguments

    def argument_fragments(self, text: str) -> list[str]:
        return split_fragments(text)

    def reset(self) -> None:
        """Forget per-server state (stored responses)."""
        return None

    # ---- request side ----------------------------------------------------------------------

    def check(self, body: dict[str, Any]) -> HttpReply | None:
        """Pairing validation like the real provider; None when the request is acceptable."""
        return None

    def check_headers(self, body: dict[str, Any], headers: dict[str, str]) -> HttpReply | None:
        """What the provider refuses for want of a header (a beta not enabled); None when fine."""
        return None

    def remember(self, reply: Reply) -> None:
        """Called once a reply was sent in full (Responses keeps it for previous_response_id)."""
        return None

    # ---- errors ----------------------------------------------------------------------------

    @abstractmethod
    def error_type(self, status: int) -> str: ...

    @abstractmethod
    def error_body(
        self, status: int, type_: str, message: str, code: str | None, param: str | None, request_id: str
    ) -> dict[str, Any]: ...

    def http_error(self, err: UpstreamError, request_id: str) -> HttpReply:
        type_ = err.type or self.error_type(err.status)
        message = err.message or _default_message(err.status)
        body = self.error_body(err.status, type_, message, err.code, None, request_id)
        return HttpReply(err.status, body, dict(err.headers))

    def invalid_request(
        self,
        message: str,
        param: str | None = None,
        status: int = 400,
        code: str | None = None,
        type_: str = "invalid_request_error",
    ) -> HttpReply:
        rid = self.request_id()
        return HttpReply(status, self.error_body(status, type_, message, code, param, rid))

    @abstractmethod
    def stream_error(self, reply: Reply, err: UpstreamError) -> list[Event]:
        """The protocol's in-stream error event(s); the stream ends right after them."""

    # ---- rendering hooks -------------------------------------------------------------------

    @abstractmethod
    def head(self, reply: Reply) -> list[Event]: ...

    @abstractmethod
    def open_part(self, reply: Reply, part: Part, index: int) -> list[Event]: ...

    @abstractmethod
    def delta(self, reply: Reply, part: Part, index: int, fragment: str) -> list[Event]: ...

    @abstractmethod
    def close_part(self, reply: Reply, part: Part, index: int) -> list[Event]: ...

    @abstractmethod
    def tail(self, reply: Reply) -> list[Event]: ...

    @abstractmethod
    def body(self, reply: Reply) -> dict[str, Any]:
        """The non-streaming response body."""

    # ---- encoding --------------------------------------------------------------------------

    def payload(self, event: Event, seq: int) -> bytes:
        """The `data:` bytes of an event; `seq` is its position in the stream."""
        if isinstance(event.data, str):
            return event.data.encode()
        return orjson.dumps(event.data)

    def encode(self, event: Event, seq: int) -> bytes:
        head = f"event: {event.name}\n".encode() if self.named_events and event.name else b""
        return head + b"data: " + self.payload(event, seq) + b"\n\n"


def _default_message(status: int) -> str:
    return {
        400: "Bad request",
        401: "Invalid API key",
        403: "Permission denied",
        404: "Not found",
        413: "Request too large",
        429: "Rate limit exceeded",
        529: "Overloaded",
    }.get(status, "The server had an error while processing your request. Sorry about that!")


def plan_reply(fmt: WireFormat, turn: Turn, request: dict[str, Any], raw_size: int) -> Reply:
    """Turn a script turn into the neutral plan a format renders."""
    parts: list[Part] = []
    if turn.thinking is not None:
        parts.append(
            Part(
                "thinking",
                turn.thinking,
                split_words(turn.thinking),
                item_id=fmt.item_id("thinking"),
                signature=fmt.ids.b64(344),
            )
        )
    if turn.text is not None:
        parts.append(Part("text", turn.text, split_words(turn.text) if turn.text else [], item_id=fmt.item_id("text")))
    for ordinal, spec in enumerate(turn.tool_calls):
        args = fmt.arguments_text(spec)
        parts.append(
            Part(
                "call",
                args,
                fmt.argument_fragments(args),
                name=spec.name,
                call_id=spec.id or fmt.call_id(),
                item_id=fmt.item_id("call"),
                ordinal=ordinal,
                spec=spec,
            )
        )
    calls = [p for p in parts if p.kind == "call"]
    if turn.truncate_tool_input and calls:
        last = calls[-1]
        keep = max(1, len(last.fragments) // 2)
        last.fragments = last.fragments[:keep]
        last.text = "".join(last.fragments)
        last.truncated = True

    usage = dict(turn.usage or {})
    _check_cache_usage(fmt, usage)
    produced = sum(len(p.text) for p in parts)
    thinking = len(turn.thinking or "")
    model = request.get("model")
    return Reply(
        id=fmt.reply_id(),
        model=model if isinstance(model, str) and model else fmt.default_model,
        created=int(time.time()),
        request=request,
        parts=parts,
        input_tokens=int(usage.pop("input_tokens", max(1, raw_size // 4))),
        output_tokens=int(usage.pop("output_tokens", max(1, produced // 4 + 4 * len(calls)))),
        reasoning_tokens=int(usage.pop("reasoning_tokens", thinking // 4)),
        request_id=fmt.request_id(),
        stop_reason=turn.stop_reason,
        cache_read_tokens=int(usage.pop("cache_read_tokens", 0)),
        cache_write_tokens=int(usage.pop("cache_write_tokens", 0)),
        usage_extra=usage,
    )


def _check_cache_usage(fmt: WireFormat, usage: dict[str, Any]) -> None:
    """Refuse cache numbers no API sends: OpenAI's prompt tokens include the cached ones and it
    reports no cache writes (Anthropic counts reads and writes apart from `input_tokens`)."""
    if fmt.protocol == ANTHROPIC:
        return
    if usage.get("cache_write_tokens"):
        raise ValueError(f"{fmt.protocol} reports no cache writes: drop cache_write_tokens")
    read, prompt = usage.get("cache_read_tokens", 0), usage.get("input_tokens")
    if read and prompt is not None and read > prompt:
        raise ValueError(f"{fmt.protocol}: input_tokens ({prompt}) include the cached ones ({read})")


def stream_events(fmt: WireFormat, reply: Reply) -> list[Event]:
    """Every event of a complete stream, in order (the terminator included)."""
    events = list(fmt.head(reply))
    for index, part in enumerate(reply.parts):
        events += fmt.open_part(reply, part, index)
        for fragment in part.fragments:
            events += fmt.delta(reply, part, index, fragment)
        events += fmt.close_part(reply, part, index)
    events += fmt.tail(reply)
    return events


def obfuscation(seed: str) -> str:
    """OpenAI's random `obfuscation` padding, made deterministic (clients drop it)."""
    rng = random.Random(zlib.crc32(seed.encode()))
    return "".join(rng.choice(_ALNUM) for _ in range(rng.randint(2, 15)))
