"""Everything known about one exchange while it runs, typed.

An exchange is one agent request to a parsed endpoint and everything done on its behalf:
the upstream request, the repair rounds, the delivery. Filters keep what they learn about it
here: the fields every filter shares are attributes of `Exchange`; what only one filter needs
lives in a slot of its own, declared by that filter as an `ExchangeKey` (the way aiohttp's
`AppKey` types application state), so adding a concern never edits this module.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import orjson
from multidict import CIMultiDict
from yarl import URL

from sidecar.dialects.base import Dialect, compact
from sidecar.model import CallPath, Provider, RequestView, Session, SessionSource, ToolCall, ToolResult, Verdict

T = TypeVar("T")


class ExchangeKey(Generic[T]):
    """A typed slot for one filter's per-exchange state (compared by identity)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"ExchangeKey({self.name!r})"


WITHHELD_STATUS = "withheld"


def withheld_notice(tool: str, reasons: list[str] | tuple[str, ...]) -> str:
    """What the model reads in place of a withheld result (the structured-error shape)."""
    return compact(
        {
            "status": WITHHELD_STATUS,
            "tool": tool,
            "reasons": [f"the result of {tool or 'this tool'} was withheld by the sidecar's policy", *reasons],
            "retryable": False,
        }
    )


@dataclass(frozen=True, slots=True)
class ResultRewrite:
    """What the agent gets in place of an MCP `tools/call` result the result policy withheld or
    redacted: the withheld notice, and for a redaction the redacted content (None: withheld)."""

    notice: str
    redacted: Any = None


# Set by the result policy on an MCP exchange, read by the MCP runner as it answers the client.
RESULT_REWRITE: ExchangeKey[ResultRewrite] = ExchangeKey("results.mcp_rewrite")


class Action(StrEnum):
    """What was done with one checked call."""

    ALLOWED = "allowed"  # reaches the agent
    OBSERVED = "observed"  # refused by a guard in observe mode, delivered anyway
    REPAIR = "repair"  # refused: answered to the model in a repair round
    NOT_RUN = "not_run"  # allowed, but another call of its turn was refused: re-issued together
    BLOCKED = "blocked"  # refused: removed from the reply and explained (no repair left)
    WITHDRAWN = "withdrawn"  # allowed, but could not be committed to the ledger: removed (fail closed)
    REFUSED = "refused"  # refused: answered to the caller itself (MCP: a CallToolResult with isError)


class Plan(StrEnum):
    """What enforcement does with a judged turn."""

    PASS = "pass"  # every call reaches the agent (observe-mode refusals included)
    REPAIR = "repair"  # refused calls are answered to the model, which tries again
    BLOCK = "block"  # the turn's calls are removed and explained


class RepairOutcome(StrEnum):
    """How a sequence of repair rounds ended (`sidecar_repair_rounds_total{outcome}`)."""

    CORRECTED = "corrected"  # a refused call was re-issued and passed
    ABANDONED = "abandoned"  # the model stopped calling tools
    EXHAUSTED = "exhausted"  # still refused after the last round (or the round failed): blocked


class Origin(StrEnum):
    """What kind of request the exchange answers (docs/coverage.md)."""

    CREATE = "create"  # a model request: checked, repaired, delivered
    BACKGROUND = "background"  # a `background: true` create: a repair round would run in the background too
    RETRIEVE = "retrieve"  # a stored response read back: checked, never repaired (the store is the provider's)
    HISTORY = "history"  # a listing of stored items: the calls the sidecar refused are removed

    @property
    def repairs(self) -> bool:
        """Whether refused calls may be answered to the model in a repair round (else blocked)."""
        return self is Origin.CREATE


class Outcome(StrEnum):
    DONE = "done"  # the agent received a complete, checked response
    FAILED = "failed"  # the agent received an error (provider-shaped) or a cut stream


@dataclass(slots=True)
class End:
    """How an exchange ended: reported to every filter exactly once (`on_done`)."""

    outcome: Outcome
    status: int
    stream: bool
    overhead_s: float
    reason: str | None = None  # why it failed, for logs


@dataclass(slots=True)
class ToolResultRecord:
    """One tool result of the agent's request, matched to the call it answers.

    `outcome` is ok, error or partial (partial counts as `ok` in the ok/error metric: the tool
    ran and returned). `known`: matched to a delivered call in the ledger. `resent`: the
    ledger already had this call's result (an agent retrying a request): not counted again.
    `args`/`args_hash`: the arguments of the call it answers, when the ledger knows them.
    `forwarded`: set when the model got another text than the agent sent (a withheld or
    redacted result): what the ledger remembers for replay answers, so they never quote more.
    """

    call_id: str
    tool: str | None
    is_error: bool
    bytes: int
    latency_s: float | None
    anomalies: list[str] = field(default_factory=list)
    outcome: str = "ok"
    known: bool = False
    resent: bool = False
    args_hash: str = ""
    forwarded: str | None = None


class Wire(Protocol):
    """What the filters read of the protocol an exchange speaks: a model dialect
    (`sidecar/dialects/`) or MCP (`sidecar/mcp/wire.py`). The model-path runner and enforcer
    need the whole `Dialect` (`Exchange.model_dialect`); filters need only this."""

    @property
    def name(self) -> str: ...

    @property
    def server_side_state(self) -> bool: ...

    def hide_tools(self, body: dict[str, Any], hidden: set[str]) -> dict[str, Any]:
        """`body` without the tools the policy hides (a model request, an MCP `tools/list` result)."""
        ...

    def with_trace_context(self, body: dict[str, Any], carrier: dict[str, str]) -> dict[str, Any]:
        """`body` carrying the trace context (`traceparent`) where the protocol puts it in the
        body (MCP: `params._meta`); model dialects carry it in headers and return `body`."""
        ...


@dataclass(frozen=True, slots=True)
class McpFacts:
    """What an MCP exchange is about: the configured server, the JSON-RPC request and revision."""

    server: str
    method: str  # tools/call, tools/list
    request_id: str | int | None = None
    protocol_version: str | None = None
    target: str | None = None  # the tool a tools/call names
    # The client's trace context from `params._meta` (traceparent, tracestate), if it sent one.
    carrier: Mapping[str, str] = field(default_factory=dict)


class EarlierLeg(NamedTuple):
    """The model-path leg of a logical call that an MCP `tools/call` executes (docs/mcp.md, "One
    logical call"): the call the model asked for and the agent received, judged there once.
    (A named tuple, as `ToolResult`: one per delivered call.)"""

    session: Session
    call_id: str
    tool: str
    args_hash: str
    delivered_at: float  # wall clock, when the call reached the agent


# Read on every filter's every look at an exchange's path: module names (a member read through
# its enum class is slower on Python 3.11).
_MCP, _MODEL = CallPath.MCP, CallPath.MODEL
# The dialect classes `model_dialect` has checked (a handful): their instances pass at once.
_MODEL_DIALECTS: set[type] = set()


@dataclass(slots=True)
class Exchange:
    """One agent request to a parsed endpoint, and everything done on its behalf."""

    id: str
    provider: Provider
    dialect: Wire
    session: str  # the session id every filter keys its state by (see `session_source`)
    view: RequestView
    request: dict[str, Any]  # the body as it goes upstream (filters may edit it: hidden tools)
    url: URL
    headers: CIMultiDict[str]
    body: bytes = b""  # the agent's bytes, forwarded as they are while `request` is unchanged
    started: float = field(default_factory=time.perf_counter)
    repair_rounds: int = 0
    upstream_seconds: float = 0.0
    hidden_tools: list[str] = field(default_factory=list)
    results: list[ToolResultRecord] = field(default_factory=list)
    method: str = "POST"
    origin: Origin = Origin.CREATE
    # A stream resumed (`?starting_after=N`): the stream is read from its start and the events
    # the agent already has (sequence number <= N) are checked but not sent again.
    resume_after: int | None = None
    # Where `session` came from (DESIGN.md sessions): header, conversation, thread, chain, user, derived.
    session_source: SessionSource = SessionSource.DERIVED
    # MCP exchanges only: which server and request (None on the model path).
    mcp: McpFacts | None = None
    # Calls of this exchange that execute a call an earlier leg decided (call id -> that leg):
    # their decision is reused, not taken again (see `Filter.decides_once`).
    earlier: dict[str, EarlierLeg] = field(default_factory=dict)
    _slots: dict[ExchangeKey[Any], Any] = field(default_factory=dict, repr=False)
    _session_info: Session | None = field(default=None, repr=False)

    @property
    def session_info(self) -> Session:
        """The session as one typed value (id and source): built once while neither changes
        (filters ask for it per call and per decision)."""
        known = self._session_info
        if known is None or known.id is not self.session or known.source is not self.session_source:
            known = self._session_info = Session(self.session, self.session_source)
        return known

    def set_session(self, session: Session) -> None:
        """Id and source change together (the conversation filter refines the session)."""
        self.session, self.session_source = session.id, session.source

    @property
    def path(self) -> CallPath:
        return _MCP if self.mcp is not None else _MODEL

    def path_of(self, call_id: str) -> CallPath:
        """The path that judged this call: the model path for an MCP execution of a call the
        model path delivered (one logical call, counted once, where it was decided)."""
        return CallPath.MODEL if call_id in self.earlier else self.path

    @property
    def declared_by(self) -> str:
        """Who declared this exchange's tools, for the inventory and drift: the provider, or
        `mcp:<server>` (two MCP servers may list tools of the same name)."""
        return f"mcp:{self.mcp.server}" if self.mcp is not None else self.provider.value

    @property
    def model_dialect(self) -> Dialect:
        """The model dialect of a model-path exchange (the runner, the enforcer, provider state)."""
        dialect = self.dialect
        if type(dialect) in _MODEL_DIALECTS:  # known already: the ABC's check is a Python call
            return dialect  # type: ignore[return-value]
        if not isinstance(dialect, Dialect):
            raise TypeError(f"exchange {self.id} speaks {dialect.name}, not a model dialect")
        _MODEL_DIALECTS.add(type(dialect))
        return dialect

    def request_results(self) -> list[ToolResult]:
        """Every tool result `request` carries (the dialect's `request_results`): those
        `read_request` read in its walk while `request` still holds the history it walked
        (filters replace bodies and lists, they never edit them), else read again."""
        view, dialect = self.view, self.model_dialect
        if view.history is not None and self.request.get(dialect.history_key) is view.history:
            return [result for _, result in view.result_slots]
        return dialect.request_results(self.request)

    # The slots' accessors type their values by annotation, not `typing.cast` (a call each:
    # filters read slots about 30 times per request).
    def get(self, key: ExchangeKey[T]) -> T | None:
        value: T | None = self._slots.get(key)
        return value

    def setdefault(self, key: ExchangeKey[T], factory: Callable[[], T]) -> T:
        value: T | None = self._slots.get(key)
        if value is None and key not in self._slots:
            value = self._slots[key] = factory()
        return value  # type: ignore[return-value]  # None only if a slot was put None, as before

    def put(self, key: ExchangeKey[T], value: T) -> None:
        self._slots[key] = value

    def pop(self, key: ExchangeKey[T]) -> T | None:
        value: T | None = self._slots.pop(key, None)
        return value

    def outgoing(self, original: dict[str, Any]) -> bytes:
        """The bytes to send upstream: the agent's own unless a filter changed the body (a
        read-back sends none)."""
        if self.method != "POST":
            return b""
        return self.body if self.request is original else orjson.dumps(self.request)


@dataclass(slots=True)
class ReplayFacts:
    """What the ledger knows about earlier deliveries of the same call (policy `input.replay`)."""

    count: int = 0
    first_seen: str | None = None

    def to_input(self) -> dict[str, Any]:
        return {"count": self.count, "first_seen": self.first_seen}


@dataclass(slots=True)
class ApprovalFacts:
    """What a human decided about this exact call (policy `input.approval`)."""

    status: str = "none"  # none, pending, approved, denied, expired
    id: str | None = None
    approved_by: str | None = None

    def to_input(self) -> dict[str, Any]:
        return {"status": self.status, "id": self.id, "approved_by": self.approved_by}


@dataclass(slots=True)
class CallCheck:
    """What the filters learnt about one call; the policy input is built from it."""

    call: ToolCall
    exchange: Exchange
    parallel: int
    round: int = 0
    verdict: Verdict = field(default_factory=Verdict.allow)
    validation: Verdict | None = None
    replay: ReplayFacts = field(default_factory=ReplayFacts)
    approval: ApprovalFacts = field(default_factory=ApprovalFacts)
    # Set by the policy filter when a human must approve; the approval filter acts on it.
    approval_request: dict[str, Any] | None = None
    policy_reasons: list[str] = field(default_factory=list)
    # Refusals a filter decided but did not enforce (observe / shadow rollouts).
    observed: list[Verdict] = field(default_factory=list)
    action: Action = Action.ALLOWED

    @property
    def earlier(self) -> EarlierLeg | None:
        """The leg that already decided this call (an MCP execution of a delivered model call)."""
        return self.exchange.earlier.get(self.call.id) if self.exchange.earlier else None

    @property
    def refused(self) -> bool:
        """Refused and enforced (not merely observed)."""
        return not self.verdict.allowed and self.action is not Action.OBSERVED
