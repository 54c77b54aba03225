"""The mechanism every dialect shares: replies as ordered items, and stream assembly.

A reply (non-streaming body or assembled stream) is an envelope plus an ordered list of
items: tool calls, text, and everything else (thinking, server tools, images...), which
passes untouched. Enforcement edits the item list; the dialect writes it back to its wire
form, or renders the part of a stream that was held back.
"""

from __future__ import annotations

import copy
import json
import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Final, NamedTuple

import orjson
from cachetools import LRUCache

from sidecar.dialects.sse import SSEEvent
from sidecar.model import (
    Frame,
    Item,
    ItemKind,
    JsonPath,
    Provider,
    Reply,
    RequestView,
    TokenUsage,
    ToolCall,
    ToolDeclaration,
    ToolList,
    ToolResult,
    ToolSpan,
    replace_paths,
)

# Declarations read from a request, by the JSON of the tools it declares (the key is that JSON
# itself: a lookup is exact, and hashing and comparing 7 KB costs 3 us where a blake2b digest
# of it cost 6): an agent re-declares the same tools on every request, so each distinct list is
# read (and its schemas hashed) once. Bounded by the bytes of the lists held, counted twice (the
# key, and the declarations read from it), whatever an agent sends; a list larger than a tenth
# of the bound is read every time.
DECLARATION_CACHE_BYTES = 16 * 1024 * 1024
_NO_DECLARATIONS: Mapping[str, ToolDeclaration] = MappingProxyType({})
_DECLARATIONS: LRUCache[tuple[str, tuple[bytes, ...]], tuple[ToolList, int]] = LRUCache(
    DECLARATION_CACHE_BYTES, getsizeof=lambda entry: 2 * entry[1]
)

# orjson writes at most this many nested arrays/objects; deeper values could be read but never
# written back (a repair round, a rewritten reply), so `loads` refuses them.
MAX_DEPTH = 254


class TooDeep(ValueError):
    """Valid JSON nested deeper than the sidecar can write back (MAX_DEPTH)."""


def loads(data: bytes | str) -> Any:
    """orjson first; stdlib as a fallback for what orjson refuses (e.g. NaN, 1e400 → inf).

    Every value returned can be written back with orjson: the fallback turns integers beyond
    64 bits into floats (as orjson reads them) and lone surrogates into U+FFFD. Raises
    ValueError for what is not JSON, TooDeep for nesting beyond MAX_DEPTH.
    """
    return read_json(data)[0]


def read_json(data: bytes | str) -> tuple[Any, bool]:
    """`loads`, and whether orjson read the text (True) or the stdlib fallback did (False).

    Only the fallback reads `NaN`, `Infinity` or a number too large for a double (`1e400`):
    no float of a value orjson read is NaN or infinite (see `ToolCall.read_by_orjson`)."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            value = json.loads(data, parse_int=_int)
        except RecursionError as exc:
            raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels") from exc
        return _writable(value, 0), False
    check_depth(data, value)
    return value, True


def json_object(body: bytes) -> dict[str, Any] | None:
    """The body as a JSON object; None for anything else. Raises TooDeep (see `loads`)."""
    return read_json_object(body)[0]


def read_json_object(body: bytes) -> tuple[dict[str, Any] | None, bool]:
    """`json_object`, and whether orjson read the body (`read_json`)."""
    try:
        value, by_orjson = read_json(body)
    except TooDeep:
        raise
    except ValueError:
        return None, False
    return (value, by_orjson) if isinstance(value, dict) else (None, False)


def check_depth(data: bytes | str, value: Any) -> None:
    """Raise TooDeep if orjson could not write `value` (read from `data`) back."""
    # Nesting N levels takes 2N bytes at least: a short text (a stream event) cannot be too
    # deep. For a longer one, writing it back is the check, and the cheapest one: 5 us for
    # the benchmark's 16 KB body, where counting its brackets took 10.
    if len(data) <= 2 * MAX_DEPTH:
        return
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels") from exc


def _int(text: str) -> int | float:
    number = int(text)
    return number if -(2**63) <= number < 2**64 else float(text)


def _writable(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return _no_lone_surrogates(value)
    if isinstance(value, (dict, list)) and depth >= MAX_DEPTH:
        raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        return {_no_lone_surrogates(k): _writable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_writable(v, depth + 1) for v in value]
    return value


def _no_lone_surrogates(text: str) -> str:
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def as_list(value: Any) -> list[Any]:
    """A wire field that should be an array: anything else reads as empty."""
    return value if isinstance(value, list) else []


def as_dict(value: Any) -> dict[str, Any]:
    """A wire field that should be an object: anything else reads as empty."""
    return value if isinstance(value, dict) else {}


def as_index(value: Any, default: int = -1) -> int:
    """A wire `index`: an integer, else `default` (never raises on strings, floats or null)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def parse_arguments(raw: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """Model-written argument JSON → (object, None) or (None, reason naming the position)."""
    if raw is None or not raw.strip():
        return {}, None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return None, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
    try:
        check_depth(raw, value)
    except TooDeep as exc:
        return None, str(exc)
    if not isinstance(value, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")
        return None, f"arguments must be a JSON object, got {kind}"
    return value, None


def compact(value: Any) -> str:
    return orjson.dumps(value).decode()


@dataclass(slots=True)
class TailState:
    """Per-stream counters a dialect needs when it renders events of its own."""

    next_sequence: int = 0
    role_sent: bool = False
    forwarded_text: int = 0
    envelope: dict[str, Any] = field(default_factory=dict)


# A delta event read once, its string given to `Shortcut.take`, reads the same way for any
# other string: see `StreamAssembler.learn`.
_PROBE_TEXT: Final = "\u0000sidecar-delta-probe-" + secrets.token_hex(8)
_PROBE: Final = orjson.dumps(_PROBE_TEXT).decode()
_IGNORED_TEXT: Final = "\u0000sidecar-ignored-probe-" + secrets.token_hex(8)
_IGNORED_PROBE: Final = orjson.dumps(_IGNORED_TEXT).decode()
# Shapes kept per stream (parallel calls streamed in turn: one per call), and how many a stream
# may learn at all (a provider that pads every event differently makes each event a new shape:
# learning stops there, and every event is read in full, as without shortcuts).
_SHORTCUTS_KEPT: Final = 4
_SHORTCUTS_LEARNED: Final = 16


class DeltaRun(NamedTuple):
    """Events `start` to `end` of a read, each the next piece of the same item's string, and
    nothing else (see `StreamAssembler.delta_runs`): `pieces` are those pieces as the events
    write them (JSON string texts, quotes included), in order."""

    start: int
    end: int
    position: int
    pieces: list[str]


# Applies a delta's string to the assembler given: see `Shortcut.take`.
Take = Callable[["StreamAssembler", str], int | None]


class Shortcut(NamedTuple):
    """An event shape read in full once: the same SSE event name, the same data text around
    one JSON string (and around strings the dialect never reads, after it), whose only effect
    is `take(that string)`."""

    event: str | None
    prefix: str  # the text before the string
    # The text after it: after it alone, or before and after the one ignored string.
    literals: tuple[str] | tuple[str, str]
    # Applies the string to the assembler given and gives the item it went to; None when the
    # assembler's state no longer lets that shape mean only this (nothing applied: the event
    # is read in full). It is given the assembler, never holds it: the assembler holds it, and
    # a cycle would leave every stream to the cyclic garbage collector.
    take: Take

    def read(self, data: str) -> str | None:
        """The string an event's data holds where the learned one held its string, when the
        data is the same text around JSON strings, each of which reads (orjson) as one string:
        then the event reads as the learned one with these strings. That holds wherever the
        text is cut into them; the cut is found from the end, which finds the one a valid event
        has (the text between the two strings has quotes no string holds unescaped). None for
        anything else."""
        prefix, literals = self.prefix, self.literals
        if not data.startswith(prefix) or not data.endswith(literals[-1]):
            return None
        end = len(data) - len(literals[-1])
        try:
            if len(literals) == 2:
                cut = data.rfind(literals[0], len(prefix), end)
                if cut < 0 or type(orjson.loads(data[cut + len(literals[0]) : end])) is not str:
                    return None
                end = cut
            value = orjson.loads(data[len(prefix) : end])
        except orjson.JSONDecodeError:
            return None
        return value if type(value) is str else None


class StreamAssembler(ABC):
    """Assembles a stream into a Reply while deciding what may be forwarded at once.

    Everything up to the first client tool call streams through; from the first call on,
    events are held until the stream ends, so the whole set of parallel calls is checked
    before any of it reaches the agent.

    Most events of a stream are deltas of one shape (the next piece of a call's arguments, of
    a text): the same bytes around one JSON string. A dialect that read such an event in full
    and found that its only effect is to append that string says so (`learn`); later events
    with the same bytes around another JSON string are then read as that string alone
    (`Shortcut`), without parsing the rest again or walking it.
    """

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.envelope: dict[str, Any] = {}
        self.held: list[SSEEvent] = []
        self.holding = False
        self.cut: int | None = None
        self.error: SSEEvent | None = None
        self.finished = False
        self.tail = TailState()
        # Calls the dialect removed unchecked (see `Reply.removed_calls`).
        self.removed_calls = 0
        # Framing the sidecar cannot read the way the SDK would: the reply is refused.
        self.violation: str | None = None
        # Every event's data was read by orjson (`read_json`): no float in the reply's calls
        # is NaN or infinite (their argument texts are read by orjson alone, `parse_arguments`).
        self.read_by_orjson = True
        # Strings that grow by one delta per event (text, thinking, arguments): their pieces,
        # joined once when the reply is read (`grow`).
        self._growing: dict[tuple[int, str], tuple[dict[str, Any], list[str]]] = {}
        self._shortcuts: list[Shortcut] = []
        self._learned = 0

    def grow(self, wire: dict[str, Any], key: str, piece: str) -> None:
        """`wire[key] += piece` in linear time: appending to a string held in a dict copies it
        every time (a long streamed text made that quadratic: 40,000 deltas took 2.9 s of the
        event loop). `wire[key]` is up to date once `reply()` is called."""
        slot = (id(wire), key)
        growing = self._growing.get(slot)
        if growing is None:
            growing = self._growing[slot] = (wire, [str(wire.get(key, ""))])  # keeps `wire` (and its id) alive
        growing[1].append(piece)

    def may_learn(self) -> bool:
        """Whether `learn` may still take a shape (what a dialect checks before looking)."""
        return self._learned < _SHORTCUTS_LEARNED and self.read_by_orjson

    def learn(
        self,
        event: SSEEvent,
        value: str,
        read: Callable[[Any], Any],
        take: Take,
        ignored: tuple[str, Callable[[Any], Any]] | None = None,
    ) -> None:
        """`event` was read in full (by orjson), and its only effect was `take(value)`, where
        `value` is the string `read(data)` finds in its data: events of this shape are read
        by `take` alone from now on (`Shortcut`). `ignored`: a string after it that the
        dialect never reads (OpenAI's random `obfuscation` padding), with where it sits; it
        may differ from event to event.

        Where each string sits in the data's text is found (as orjson writes it: a JSON
        string's text ends where its last quote is), then proved: the text with probe strings
        there instead must read (orjson) with the probes where `read` and the `ignored` reader
        look. A JSON string swapped for another leaves every other value as it was, so a later
        event that is the same text around other JSON strings reads as this one with those
        strings: the same effect, with its own `value`. Not learned when a string is written
        in a way of its own (escapes orjson does not use), is not found, the ignored one comes
        first, or a probe reads otherwise. Straight-line: it runs once per shape and stream."""
        if not self.may_learn():
            return
        self._learned += 1
        data = event.data
        token = orjson.dumps(value).decode()
        start = data.rfind(token)
        if start < 0:
            return
        end = start + len(token)
        cut = rest = end  # where the ignored string starts and ends (none: where `value` ends)
        probe = data[:start] + _PROBE
        if ignored is not None:
            padding = orjson.dumps(ignored[0]).decode()
            cut = data.rfind(padding)
            if cut < end:
                return
            rest = cut + len(padding)
            probe += data[end:cut] + _IGNORED_PROBE
        probe += data[rest:]
        try:
            probed = orjson.loads(probe)
            if read(probed) != _PROBE_TEXT or (ignored is not None and ignored[1](probed) != _IGNORED_TEXT):
                return
        except (orjson.JSONDecodeError, LookupError, TypeError, AttributeError):
            return
        literals = (data[end:cut], data[rest:]) if ignored is not None else (data[end:],)
        shortcuts = self._shortcuts
        shortcuts.insert(0, Shortcut(event.event, data[:start], literals, take))
        del shortcuts[_SHORTCUTS_KEPT:]

    def _shortcut(self, event: SSEEvent) -> int | None:
        """The item an event of a learned shape went to (its string applied), or None: read
        it in full."""
        data = event.data
        for shortcut in self._shortcuts:
            if event.event == shortcut.event and (value := shortcut.read(data)) is not None:
                return shortcut.take(self, value)
        return None

    def _join_growing(self) -> None:
        for (_, key), (wire, pieces) in self._growing.items():
            joined = "".join(pieces)
            wire[key] = joined
            pieces[:] = [joined]

    def json(self, event: SSEEvent) -> Any:
        """The event's data as JSON; None for events without data. Data the sidecar cannot
        read (not JSON, nested too deep) is refused: an SDK might still read it."""
        data = event.data
        if not data or data.isspace():  # `not data.strip()`, without making the stripped copy
            return None
        if len(data) <= 2 * MAX_DEPTH:  # too short to nest too deep (`check_depth`): orjson alone
            try:
                return orjson.loads(data)
            except orjson.JSONDecodeError:
                pass  # `read_json` tries the stdlib too
        try:
            value, by_orjson = read_json(data)
        except ValueError:
            self.refuse("an event whose data the sidecar cannot read as JSON")
            return None
        self.read_by_orjson = self.read_by_orjson and by_orjson
        return value

    def refuse(self, why: str) -> None:
        """The stream is framed in a way an SDK could read otherwise than the sidecar (a reused
        index, content where the protocol puts none...): nothing more of it is forwarded."""
        if self.violation is None:
            self.violation = why

    def feed(self, event: SSEEvent) -> bool:
        """True: forward the event now. False: it is held (see `held`), or refused (`violation`)."""
        if self.violation is not None:
            return False
        if self.error is not None:
            # After an error only the upstream's own ending passes (Responses sends
            # `response.failed`), and only when no call was held: it may list held items.
            return not self.holding
        position = self._shortcut(event) if self._shortcuts else None
        if position is not None:
            starts_call = False
        else:
            position, starts_call = self.apply(event)
            if self.violation is not None:
                return False
            if self.error is not None:
                return True  # errors are forwarded at once; held calls are discarded
        if position is not None and position < len(self.items):
            self.items[position].raw_events.append(event)
        if starts_call and not self.holding:
            self.holding = True
            self.cut = position
        if self.holding:
            self.held.append(event)
            return False
        self.observe_forwarded(event)
        return True

    def hold(self, events: list[SSEEvent]) -> list[SSEEvent]:
        """`feed` for each event of a read that arrived while holding, in order, up to a
        violation; returns the events to forward at once (an upstream error: see `feed`).

        Most of a held stream is the pieces of a call's arguments, one event each. The runs of
        them the dialect finds (`delta_runs`) are taken in one step each (`take_pieces`): their
        texts read by one orjson call, without reading each event's JSON and walking it. A run
        the dialect does not take, in the state the events before it left, is fed event by
        event like the rest."""
        forward: list[SSEEvent] = []
        done = 0
        for start, end, position, pieces in self.delta_runs(events):
            if not self._feed_each(events[done:start], forward):
                return forward
            run = events[start:end]
            taken = self.violation is None and self.error is None and self.take_pieces(position, pieces)
            if taken:
                self.items[position].raw_events.extend(run)
                self.held.extend(run)
            elif not self._feed_each(run, forward):
                return forward
            done = end
        self._feed_each(events[done:], forward)
        return forward

    def _feed_each(self, events: list[SSEEvent], forward: list[SSEEvent]) -> bool:
        """`feed` each event, the ones to forward added to `forward`; False at a violation."""
        for event in events:
            if self.feed(event):
                forward.append(event)
            elif self.violation is not None:
                return False
        return True

    def delta_runs(self, events: list[SSEEvent]) -> list[DeltaRun]:
        """The runs of events (in order, apart) that `take_pieces` may take in one step: each
        event's only effect, read by `apply`, would be to append its piece to the same item's
        string. No runs by default: every event is fed."""
        return []

    def take_pieces(self, position: int, pieces: list[str]) -> bool:
        """Apply a run's pieces (JSON string texts) to the item at `position`, as `apply` would
        apply its events one by one, and say so; False, with nothing changed, when `apply`
        might do anything else with them in the current state (or a text does not read)."""
        return False

    def reply(self) -> Reply:
        self._join_growing()
        self.finalize()
        complete = self.finished and self.error is None
        return Reply(self.envelope, self.items, complete=complete, removed_calls=self.removed_calls)

    @abstractmethod
    def apply(self, event: SSEEvent) -> tuple[int | None, bool]:
        """Update the assembled state. Returns (item position or None, starts a call)."""

    def observe_forwarded(self, event: SSEEvent) -> None:
        """Hook for dialects that track what the client already received."""
        return None

    def finalize(self) -> None:
        """Complete calls at end of stream (parse arguments, mark truncation)."""
        return None


class Dialect(ABC):
    """One wire protocol: reads requests and replies, writes edited replies back."""

    name: ClassVar[str]
    provider: ClassVar[Provider]
    # Envelope keys a later repair round overrides; None: the last round's envelope wins.
    summary_keys: ClassVar[tuple[str, ...] | None] = ()
    # The provider remembers outputs by response id (calls withheld must still be answered).
    server_side_state: ClassVar[bool] = False

    def merge_envelopes(self, first: dict[str, Any], last: dict[str, Any]) -> dict[str, Any]:
        if self.summary_keys is None:
            envelope = dict(last)
        else:
            envelope = dict(first)
            envelope.update({k: last[k] for k in self.summary_keys if k in last})
        if isinstance(first.get("usage"), dict):
            envelope["usage"] = copy.deepcopy(first["usage"])
        else:
            envelope.pop("usage", None)
        return envelope

    # -- requests -----------------------------------------------------------------------
    @abstractmethod
    def read_request(self, body: dict[str, Any]) -> RequestView: ...

    # How a declared client tool looks when it is flat (name and schema at the top of its
    # entry): the entry `type`s that mark a client tool, where its schema sits, and the
    # `tool_choice` type that forces one by name. Nested shapes override the three methods.
    client_tool_types: ClassVar[tuple[str | None, ...]] = ()
    schema_key: ClassVar[str] = "parameters"
    forced_choice_type: ClassVar[str] = "function"

    def client_tool_name(self, tool: Any) -> str | None:
        """The name of a declared client tool (None for server tools and malformed entries)."""
        if isinstance(tool, dict) and tool.get("type") in self.client_tool_types:
            name = tool.get("name")
            return name if isinstance(name, str) else None
        return None

    def forced_tool(self, choice: Any) -> str | None:
        """The tool a `tool_choice` forces, if it names one."""
        if not isinstance(choice, dict) or choice.get("type") != self.forced_choice_type:
            return None
        name = choice.get("name")
        return name if isinstance(name, str) else None

    def tool_spec(self, tool: dict[str, Any]) -> tuple[Any, Any]:
        """(JSON Schema of the arguments, description) of a declared client tool."""
        return tool.get(self.schema_key), tool.get("description")

    # The request keys whose values declare tools (Chat adds legacy `functions`).
    declaring_keys: ClassVar[tuple[str, ...]] = ("tools",)
    # The request's conversation list, which holds the calls and results (`RequestView.history`).
    history_key: ClassVar[str] = "messages"

    def declarations(self, body: dict[str, Any]) -> Mapping[str, ToolDeclaration]:
        """The client tools a request declares, by name, read-only.

        Read once per distinct tool list: later requests that declare the same list (the same
        JSON) get the `ToolList` read the first time, so work per list elsewhere (metric labels,
        the tool inventory) is done once per list. A list too large to keep, or a body not read
        from JSON, is read afresh (a plain read-only mapping)."""
        declaring = [body.get(key) for key in self.declaring_keys]
        if not any(declaring):
            return _NO_DECLARATIONS
        try:
            # A list shared between requests (`request_body`) carries its text, hash included.
            texts = tuple(getattr(value, "written", None) or orjson.dumps(value) for value in declaring)
        except TypeError:  # not from JSON (a caller's own body): read it, do not cache it
            return MappingProxyType(self.read_declarations(body))
        key = (type(self).__name__, texts)
        cached = _DECLARATIONS.get(key)
        if cached is not None:
            return cached[0]
        size = sum(map(len, texts))
        if 2 * size > DECLARATION_CACHE_BYTES // 10:  # read every time: not one shared list
            return MappingProxyType(self.read_declarations(body))
        tools = ToolList(self.read_declarations(body))
        _DECLARATIONS[key] = (tools, size)
        return tools

    def read_declarations(self, body: dict[str, Any]) -> dict[str, ToolDeclaration]:
        """Flat client tools from `tools`; dialects with other shapes extend or replace it."""
        declared: dict[str, ToolDeclaration] = {}
        for tool in as_list(body.get("tools")):
            name = self.client_tool_name(tool)
            if name is not None:
                schema, description = self.tool_spec(tool)
                declared[name] = ToolDeclaration.create(name, schema, str(description or ""))
        return declared

    def hide_tools(self, body: dict[str, Any], hidden: set[str]) -> dict[str, Any]:
        """Remove tools the model may not see; a `tool_choice` that needs them goes too."""
        tools = [t for t in as_list(body.get("tools")) if self.client_tool_name(t) not in hidden]
        out = {**body, "tools": tools}
        if not tools:
            for key in ("tools", "tool_choice", "parallel_tool_calls"):
                out.pop(key, None)
        elif self.forced_tool(body.get("tool_choice")) in hidden:
            out.pop("tool_choice")
        return out

    def with_trace_context(self, body: dict[str, Any], carrier: dict[str, str]) -> dict[str, Any]:
        """Model requests carry the trace context in headers only (`traceparent`)."""
        return body

    @abstractmethod
    def repair_request(
        self, request: dict[str, Any], reply: Reply, outputs: list[tuple[ToolCall, dict[str, Any]]]
    ) -> dict[str, Any]:
        """The next request on the agent's behalf: the conversation, the model's turn, and
        one tool result per call of that turn (outputs are in call order)."""

    def server_tools(self, body: dict[str, Any]) -> frozenset[str]:
        """Names of the tools the provider runs itself, declared in a request (or echoed in a
        stored response)."""
        return frozenset()

    def sequence_number(self, event: Frame) -> int | None:
        """The position a stream event announces (Responses `sequence_number`), if any."""
        return None

    def withheld_output(self, call: ToolCall, payload: dict[str, Any]) -> str | None:
        """What answers a withheld call on the agent's next turn (None: no answer exists,
        e.g. a server call, which the provider ran and answered itself)."""
        return compact(payload) if call.kind.runs_on_client else None

    # -- tool results in a request (inspection: sidecar/filters/result_policy.py) -----------
    def result_slots(self, body: dict[str, Any]) -> list[tuple[JsonPath, ToolResult]]:
        """Every tool result the request carries, history included, in wire order, with the
        path of its content in `body` (where `replace_results` writes). `read_request` reads
        them in its walk (`RequestView.result_slots`); an exchange reuses them
        (`Exchange.request_results`)."""
        return self.read_request(body).result_slots

    def request_results(self, body: dict[str, Any]) -> list[ToolResult]:
        """Every tool result of the request (history included), in wire order: the positions
        `replace_results` takes. The results after the latest model turn are the last ones."""
        return [result for _, result in self.result_slots(body)]

    def replace_results(self, body: dict[str, Any], contents: dict[int, Any]) -> dict[str, Any]:
        """The body with the content of result number i (as `request_results` counts) replaced
        by `contents[i]`: only the path to each is copied, `body` is never mutated."""
        slots = self.result_slots(body)
        rewritten: dict[str, Any] = replace_paths(body, {slots[i][0]: content for i, content in contents.items()})
        return rewritten

    def add_withheld_outputs(self, body: dict[str, Any], outputs: dict[str, str]) -> dict[str, Any]:
        """Answer calls the provider remembers but the agent never saw (stateful APIs)."""
        return body

    # -- replies ------------------------------------------------------------------------
    @abstractmethod
    def read_reply(self, body: dict[str, Any]) -> Reply: ...

    @abstractmethod
    def write_reply(self, reply: Reply) -> dict[str, Any]: ...

    @abstractmethod
    def text_item(self, text: str) -> Item: ...

    def item_text(self, item: Item) -> str:
        """The text a TEXT item shows (empty for other items)."""
        text = item.wire.get("text") if item.kind is ItemKind.TEXT else None
        return text if isinstance(text, str) else ""

    def has_text(self, items: list[Item]) -> bool:
        return any(self.item_text(item) for item in items)

    def prefix_text(self, item: Item, prefix: str) -> Item:
        """The TEXT item with `prefix` before its text (a separator), unless it has none."""
        text = self.item_text(item)
        if not text or text.startswith(prefix):
            return item
        return Item(item.kind, {**item.wire, "text": prefix + text}, item.call)

    def add_usage(self, total: dict[str, Any], extra: dict[str, Any]) -> None:
        """Add `extra`'s usage into the envelope `total` (repair rounds are billed too)."""
        if isinstance(extra.get("usage"), dict):
            current = total.get("usage")
            usage: dict[str, Any] = current if isinstance(current, dict) else {}
            add_numbers(usage, extra["usage"])
            total["usage"] = usage

    @abstractmethod
    def assembler(self) -> StreamAssembler: ...

    @abstractmethod
    def render_item(self, item: Item, position: int, reply: Reply, tail: TailState) -> bytes: ...

    @abstractmethod
    def render_end(self, reply: Reply, tail: TailState) -> bytes: ...

    def render_tail(self, reply: Reply, start: int, tail: TailState) -> bytes:
        """The stream from item `start` on, for a reply that differs from what was held."""
        parts = [
            self.render_item(item, position, reply, tail) for position, item in enumerate(reply.items[start:], start)
        ]
        return b"".join(parts) + self.render_end(reply, tail)

    def keepalive(self) -> bytes:
        from sidecar.dialects.sse import KEEPALIVE_COMMENT

        return KEEPALIVE_COMMENT

    @abstractmethod
    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """A provider-shaped HTTP error body, so SDKs raise their normal API errors."""

    @staticmethod
    def response_id(reply: Reply) -> str | None:
        value = reply.envelope.get("id")
        return value if isinstance(value, str) else None

    # -- token accounting (sidecar/filters/cost.py) ---------------------------------------
    def usage(self, envelope: dict[str, Any]) -> TokenUsage | None:
        """The reply's token usage in neutral form; None when the reply reports none."""
        return None

    def output_size(self, item: Item) -> int:
        """Characters the model wrote for an item: a call's name and arguments, a text's text.
        Items the model did not write (server tool results) or that are opaque count 0."""
        if item.call is not None:
            return len(item.call.name) + len(item.call.raw_arguments)
        return len(self.item_text(item))

    def is_reasoning(self, item: Item) -> bool:
        """A thinking / reasoning item (its tokens are the usage's reasoning tokens, when reported)."""
        return False

    def tool_spans(self, body: dict[str, Any]) -> list[ToolSpan]:
        """Every tool call and result the request carries (history included), in order, sized."""
        return []

    def history_at_provider(self, body: dict[str, Any]) -> bool:
        """The request continues a conversation the provider holds (its input tokens cover
        history that is not in the request body)."""
        return False


def add_numbers(total: dict[str, Any], extra: dict[str, Any]) -> None:
    """Recursive sum of numeric fields (usage objects nest their details)."""
    for key, value in extra.items():
        if isinstance(value, bool):
            continue
        current = total.get(key)
        if isinstance(value, (int, float)):
            total[key] = (current if isinstance(current, (int, float)) else 0) + value
        elif isinstance(value, dict):
            if not isinstance(current, dict):
                current = {}
                total[key] = current
            add_numbers(current, value)


def token_count(value: Any) -> int:
    """A usage field: a non-negative integer, anything else 0 (never raises on odd wire values)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return 0
    return max(0, int(value))


def json_length(value: Any) -> int:
    """How many characters `value` takes as compact JSON: orjson writes it (in C, far cheaper
    than a walk in Python over what was parsed) and the characters of its bytes are counted.
    For a 2.4 KB ASCII string, writing it (0.8 us) is cheaper than counting the characters
    JSON escapes in it (three passes, 3.7 us), and exact."""
    raw = orjson.dumps(value, default=str)
    return len(raw) if raw.isascii() else len(raw.decode("utf-8", "replace"))


def frame_length(skeleton: dict[str, Any]) -> int:
    """Characters of a wire block's JSON besides its ids, names and payload: `skeleton` has
    those strings empty and the payload null."""
    return len(compact(skeleton)) - len("null")


def event_json(event: Frame) -> Any:
    try:
        return loads(event.data)
    except ValueError:
        return None
