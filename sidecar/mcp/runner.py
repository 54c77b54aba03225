"""The MCP path: one client request to `/mcp/{server}`, top to bottom, through the same filter chain
as the model path (docs/mcp.md).

    request read → calls checked → upstream (what is left to send) → results read → done

A POST carries one JSON-RPC message (or, in 2025-03-26, a batch). Each `tools/call` in it is
an exchange of its own, judged before anything goes to the server: declared tool and argument
lockdown against the server's `inputSchema`, replay, the Rego decision (`input.path: "mcp"`),
approval. A refused call never reaches the server; the client gets a `CallToolResult` with
`isError: true` carrying the model path's structured error. An allowed call is written to the
ledger (insert, then forward), forwarded with the trace context in `params._meta`, and its
result is matched, timed and remembered (`FilterChain.answered`). Each `tools/list` answer
is an exchange too: its tools are declarations (drift, the inventory, metric labels), the
policy's hidden tools are removed before the client sees the list, and the listing is kept to
judge later calls against (`sidecar/mcp/catalog.py`). Everything else is forwarded as sent.

Replies are read the way the client's SDK reads them: a JSON body, or an SSE stream relayed
event by event, the events that answer a checked request read (and rewritten when a list
loses a hidden tool) on the way. Every exchange hears `on_done` exactly once.

The runner knows no HTTP library: the transport (`sidecar/mcp/transport.py`) gives it the
upstream (`McpUpstream`) and the client (`AgentPort`, the model path's port).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from multidict import CIMultiDict
from yarl import URL

from sidecar.config import Settings
from sidecar.dialects.base import loads
from sidecar.dialects.sse import SSEEvent, SSEParser, format_event
from sidecar.exchange.enforce import let_through_observed
from sidecar.exchange.filters import FilterChain, FilterFailed, failed_check_verdict
from sidecar.exchange.legs import Ambiguous, Execute, FinalRefusal, LegIndex, Repeat
from sidecar.exchange.runner import AgentPort, Refused, UpstreamAnswer, UpstreamError, read_bounded
from sidecar.exchange.state import (
    RESULT_REWRITE,
    Action,
    CallCheck,
    EarlierLeg,
    End,
    Exchange,
    McpFacts,
    Outcome,
    ResultRewrite,
    withheld_notice,
)
from sidecar.mcp import wire
from sidecar.mcp.catalog import Catalog, Listing, caller_key, is_first_page
from sidecar.mcp.outputs import OutputCheck
from sidecar.mcp.session import mcp_session
from sidecar.mcp.wire import ErrorCode, Kind, Message, WireError
from sidecar.model import (
    EchoedCall,
    Provider,
    RefusalReason,
    RequestView,
    Session,
    SessionSource,
    ToolCall,
    Verdict,
    VerdictKind,
)
from sidecar.telemetry.logs import log_event
from sidecar.telemetry.metrics import Metrics

log = logging.getLogger("sidecar.mcp")

# Pages of a tools/list the sidecar reads itself before it gives up (a paginator that never ends).
_LIST_PAGE_CAP = 100
# Calls that asked for input (MRTR) and may be retried with it, remembered this many at most.
_AWAITING_INPUT_MAX = 4096
_JSON = "application/json"
_SSE = "text/event-stream"


class McpUpstream(Protocol):
    def open(
        self, method: str, url: URL, headers: Mapping[str, str], body: bytes
    ) -> AbstractAsyncContextManager[UpstreamAnswer]:
        """Send the request to a configured MCP server; raises UpstreamError."""
        ...


@dataclass(frozen=True, slots=True)
class Target:
    """A configured MCP server: its name (`/mcp/{name}`) and its endpoint URL."""

    name: str
    url: URL


RefusalSink = Callable[[RefusalReason, str, str], None]


def _content_type(headers: Mapping[str, str]) -> str:
    return headers.get("Content-Type", "").split(";", 1)[0].strip().lower()


def _id_key(value: Any) -> tuple[str, Any]:
    """JSON-RPC ids compare by type and value (1 and "1" are different requests)."""
    return (type(value).__name__, value)


def _sse(message: dict[str, Any]) -> bytes:
    return format_event(wire.dumps(message), "message")


def _rewritten_event(event: SSEEvent, data: bytes) -> bytes:
    """The event with new data, its other fields (`id`, `event`, `retry`) as they were."""
    kept = [
        line
        for line in event.raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        if line.startswith((b"id:", b"event:", b"retry:"))
    ]
    return b"\n".join([*kept, b"data: " + data]) + b"\n\n"


@dataclass(slots=True)
class _Pending:
    """A request of the client's POST, forwarded, waiting for its response."""

    message: Message
    started: float
    call: _CallLeg | None = None
    listing: bool = False


@dataclass(slots=True)
class _CallLeg:
    """One `tools/call` being checked, forwarded and answered."""

    ex: Exchange
    check: CallCheck
    message: Message
    claim: Execute | None = None
    answer: dict[str, Any] | None = None  # the sidecar's own answer (a refusal)
    done: bool = False


@dataclass(slots=True)
class _Post:
    """Everything one client POST brought, and what became of it."""

    target: Target
    headers: CIMultiDict[str]  # as they go upstream
    client_headers: Mapping[str, str]
    session: Session
    caller: tuple[str, str]
    started: float = field(default_factory=time.perf_counter)
    pending: dict[tuple[str, Any], _Pending] = field(default_factory=dict)
    answers: list[dict[str, Any]] = field(default_factory=list)
    legs: list[_CallLeg] = field(default_factory=list)
    # The server ended the POST's stream before answering (2025-11-25 SSE polling): the rest
    # comes on the session's GET stream, resumed with Last-Event-ID (`McpRunner.listen`).
    parked_until: float | None = None
    streaming: bool = False  # the client's response headers are sent: failures cut the stream


class McpRunner:
    def __init__(
        self,
        settings: Settings,
        chain: FilterChain,
        upstream: McpUpstream,
        legs: LegIndex,
        metrics: Metrics,
        refused: RefusalSink,
        upstream_failed: Callable[[str, UpstreamError], None],
    ) -> None:
        self.settings = settings
        self.chain = chain
        self.upstream = upstream
        self.legs = legs
        self.metrics = metrics
        self.catalog = Catalog(settings.mcp.max_catalogs)
        self.outputs = OutputCheck()
        self._refused = refused
        self._upstream_failed = upstream_failed
        # (session, tool, args_hash) -> the call that asked for input, for its retry (MRTR).
        self._awaiting_input: dict[tuple[str, str, str], EarlierLeg] = {}
        # (server, Mcp-Session-Id) -> POSTs whose answers will come on a resumed GET stream.
        self._parked: dict[tuple[str, str], list[_Post]] = {}

    # -- one POST --------------------------------------------------------------------------

    async def post(
        self,
        target: Target,
        headers: CIMultiDict[str],
        client_headers: Mapping[str, str],
        body: bytes,
        client: AgentPort,
    ) -> None:
        """Check, forward and answer one client POST. Never raises for what the client sent."""
        await self._sweep()
        caller = caller_key(target.name, client_headers)
        session = mcp_session(client_headers, self.settings.session_header, target.name, caller[1])
        post = _Post(target, headers, client_headers, session, caller)
        try:
            messages, batch = wire.read_messages(body)
            self._check_framing(client_headers, messages, batch)
        except WireError as exc:
            self._refused(RefusalReason.FRAMING, f"/mcp/{target.name}", exc.message)
            await client.respond(exc.status, wire.dumps(wire.error(exc.request_id, exc.code, exc.message)))
            return
        try:
            forwarded = [await self._admit(post, message) for message in messages]
            outgoing = [m for m in forwarded if m is not None]
            if not outgoing:
                await self._answer_alone(post, batch, client)
                return
            changed = len(outgoing) != len(messages) or any(
                a is not b.raw for a, b in zip(outgoing, messages, strict=False)
            )
            data = (wire.dumps(outgoing if batch else outgoing[0])) if changed else body
            await self._forward(post, data, batch, client)
        finally:
            if post.parked_until is None:
                await self._close(post, "no answer from the MCP server")

    async def _close(self, post: _Post, reason: str) -> None:
        for leg in post.legs:
            await self._finish(leg, Outcome.FAILED, 502, reason)

    def _check_framing(self, headers: Mapping[str, str], messages: list[Message], batch: bool) -> None:
        first = next((m for m in messages if m.kind is not Kind.RESPONSE), messages[0])
        if batch and not wire.batch_allowed(wire.protocol_version(headers, first)):
            raise WireError(ErrorCode.INVALID_REQUEST, "this protocol revision does not allow JSON-RPC batches")
        if not batch and first.kind is Kind.REQUEST:
            mismatch = wire.header_mismatch(headers, first)
            if mismatch is not None:
                raise WireError(ErrorCode.HEADER_MISMATCH, f"Header mismatch: {mismatch}", request_id=first.id)

    async def _admit(self, post: _Post, message: Message) -> dict[str, Any] | None:
        """What of this message goes upstream: as sent, rewritten (a checked call), or None
        (the sidecar answers it itself)."""
        if message.kind is not Kind.REQUEST:
            return message.raw
        pending = _Pending(message, time.perf_counter())
        if message.method == wire.TOOLS_CALL:
            leg = await self._check_call(post, message)
            post.legs.append(leg)
            if leg.answer is not None:
                post.answers.append(leg.answer)
                self._operation(post, message.method, leg.check.verdict.kind.value, pending.started)
                await self._finish(leg, Outcome.DONE, 200, None)
                return None
            pending.call = leg
        elif message.method == wire.TOOLS_LIST:
            pending.listing = True
        post.pending[_id_key(message.id)] = pending
        return pending.call.ex.request if pending.call is not None else message.raw

    # -- tools/call ------------------------------------------------------------------------

    def _exchange(self, post: _Post, message: Message, view: RequestView, request: dict[str, Any]) -> Exchange:
        facts = McpFacts(
            post.target.name,
            message.method,
            message.id,
            wire.protocol_version(post.client_headers, message),
            message.params.get("name") if message.method == wire.TOOLS_CALL else None,
            wire.trace_carrier(message),
        )
        return Exchange(
            id=secrets.token_hex(8),
            provider=Provider.MCP,
            dialect=wire.MCP_WIRE,
            session=post.session.id,
            session_source=post.session.source,
            view=view,
            request=request,
            url=post.target.url,
            headers=post.headers,
            started=post.started,
            mcp=facts,
        )

    async def _check_call(self, post: _Post, message: Message) -> _CallLeg:
        call = wire.tool_call(message)
        ex = self._exchange(post, message, RequestView(), message.raw)
        leg = _CallLeg(ex, CallCheck(call, ex, 1), message)
        listing = await self._listing(post, message)
        if listing is None:
            reason = f"the sidecar could not read the tool list of MCP server {post.target.name}; the call was not run"
            return self._refuse(leg, Verdict(VerdictKind.DENY, "denied", reasons=[reason], retryable=True))
        ex.view.declarations = dict(listing.declarations)
        refusal = self._correlate(post, leg)
        try:
            await self.chain.request(ex)  # declared names admitted, drift, hidden tools
        except FilterFailed as failure:
            log.error("MCP call failed closed: %s", failure)
            return self._refuse(leg, failed_check_verdict(failure))
        if refusal is not None:  # refused for good on the model path: the same answer, not a new decision
            leg.check.verdict = refusal
            leg.check.action = Action.REFUSED
            await self.chain.checked(ex, [leg.check])
            return self._refuse(leg, refusal, reported=True)
        [leg.check] = await self.chain.check(ex, [call])
        check = leg.check
        if not check.verdict.allowed and not let_through_observed(self.settings, check):
            check.action = Action.REFUSED
            await self.chain.checked(ex, [check])
            return self._refuse(leg, check.verdict, reported=True)
        await self.chain.checked(ex, [check])
        try:
            await self.chain.deliver(ex, [call])  # insert, then forward
        except FilterFailed as failure:
            log.error("MCP call withdrawn (fail closed): %s", failure)
            check.action = Action.WITHDRAWN
            await self.chain.checked(ex, [check])
            why = f"the sidecar could not record this call ({failure.filter_name} failed); it was not run"
            return self._refuse(leg, Verdict(VerdictKind.DENY, "denied", reasons=[why], retryable=True), reported=True)
        return leg

    def _correlate(self, post: _Post, leg: _CallLeg) -> Verdict | None:
        """One logical call across both paths (`sidecar/exchange/legs.py`); returns a final
        refusal taken on the model path, if that is what this call continues."""
        ex, call = leg.ex, leg.check.call
        if wire.continues_input(leg.message):
            earlier = self._awaiting_input.get((post.session.id, call.name, call.args_hash))
            if earlier is not None:  # the retry of a call that asked for input: the same call
                self._adopt(ex, call, earlier)
                return None
        explicit = post.session.source is SessionSource.HEADER
        found = self.legs.match(call.name, call.args_hash, post.session.id if explicit else None)
        if isinstance(found, Execute):
            leg.claim = found
            self._adopt(ex, call, found.leg)
        elif isinstance(found, Repeat):
            ex.set_session(found.leg.session)
        elif isinstance(found, FinalRefusal):
            ex.set_session(found.leg.session)
            return found.verdict
        elif isinstance(found, Ambiguous):
            log_event(
                "mcp_call_uncorrelated", log=log, tool=call.name, sessions=found.sessions, server=post.target.name
            )
        return None

    @staticmethod
    def _adopt(ex: Exchange, call: ToolCall, earlier: EarlierLeg) -> None:
        ex.set_session(earlier.session)
        call.id = earlier.call_id
        ex.earlier[call.id] = earlier

    def _refuse(self, leg: _CallLeg, verdict: Verdict, reported: bool = False) -> _CallLeg:
        if not reported:
            leg.check.verdict = verdict
            leg.check.action = Action.REFUSED
        if leg.claim is not None:
            self.legs.release(leg.claim)  # not executed: a later execution may still claim it
        version = leg.ex.mcp.protocol_version if leg.ex.mcp is not None else None
        leg.answer = wire.response(leg.message.id, wire.refusal_result(verdict, version))
        return leg

    async def _listing(self, post: _Post, message: Message) -> Listing | None:
        listing = self.catalog.get(post.caller)
        if listing is not None:
            return listing
        try:
            return await self._fetch_listing(post, message)
        except (UpstreamError, Refused, WireError, ValueError) as exc:
            log_event(
                "mcp_tool_list_unavailable", level=logging.WARNING, log=log, server=post.target.name, error=str(exc)
            )
            return None

    async def _fetch_listing(self, post: _Post, call: Message) -> Listing | None:
        """The server's tools, asked by the sidecar itself (no listing seen for this caller):
        the caller's headers and revision, the call's `_meta` protocol fields."""
        headers = CIMultiDict(post.headers)
        for name in list(headers):
            if name.lower() == wire.NAME_HEADER.lower() or name.lower().startswith("mcp-param-"):
                headers.popall(name)
        if wire.METHOD_HEADER in headers:
            headers[wire.METHOD_HEADER] = wire.TOOLS_LIST
        meta = {k: v for k, v in call.meta.items() if k.startswith("io.modelcontextprotocol/")}
        cursor: str | None = None
        listing: Listing | None = None
        for page in range(_LIST_PAGE_CAP):
            params: dict[str, Any] = {"_meta": meta} if meta else {}
            if cursor is not None:
                params["cursor"] = cursor
            request_id = f"sidecar-list-{secrets.token_hex(4)}"
            body = wire.dumps({"jsonrpc": wire.JSONRPC, "id": request_id, "method": wire.TOOLS_LIST, "params": params})
            async with self.upstream.open("POST", post.target.url, headers, body) as answer:
                raw = await read_bounded(answer, self.settings.limits.max_reply_bytes)
                status, kind = answer.status, _content_type(answer.headers)
            if status != 200:
                raise ValueError(f"tools/list answered HTTP {status}")
            result = _find_result(raw, kind, request_id)
            listing = self.catalog.record(post.caller, wire.declarations(result), page == 0)
            cursor = result.get("nextCursor") if isinstance(result.get("nextCursor"), str) else None
            if cursor is None:
                return listing
        return listing

    # -- forwarding and answers ------------------------------------------------------------

    async def _answer_alone(self, post: _Post, batch: bool, client: AgentPort) -> None:
        """Nothing left to send upstream: the sidecar's answers are the whole reply."""
        body = wire.dumps(post.answers if batch else post.answers[0])
        await client.respond(200, body)

    async def _forward(self, post: _Post, data: bytes, batch: bool, client: AgentPort) -> None:
        sent = time.perf_counter()
        try:
            async with self.upstream.open("POST", post.target.url, post.headers, data) as answer:
                kind = _content_type(answer.headers)
                if answer.status == 200 and kind == _SSE:
                    await self._upstream(post, answer.status, time.perf_counter() - sent)
                    await self._relay(post, answer, client)
                    return
                raw = await read_bounded(answer, self.settings.limits.max_reply_bytes)
                seconds = time.perf_counter() - sent
                await self._upstream(post, answer.status, seconds)
                if answer.status == 200 and kind == _JSON and raw:
                    await client.respond(200, await self._read_json(post, raw, batch), answer)
                elif answer.status == 202 and post.answers:
                    await client.respond(200, wire.dumps(post.answers))  # a batch's notifications, and our answers
                else:
                    await client.respond(answer.status, raw, answer)
                    self._unanswered(post, "jsonrpc" if answer.status < 400 else "http")
        except UpstreamError as exc:
            await self._upstream(post, None, time.perf_counter() - sent)
            self._upstream_failed(post.target.name, exc)
            await self._failed(post, client, exc.status, exc.message)
        except Refused as refusal:  # a reply larger than the sidecar reads: never passed on unread
            self._refused(refusal.reason, f"/mcp/{post.target.name}", refusal.message)
            await self._failed(post, client, refusal.status, refusal.message)

    async def _failed(self, post: _Post, client: AgentPort, status: int, message: str) -> None:
        request_id = next(iter(post.pending.values())).message.id if len(post.pending) == 1 else None
        self._unanswered(post, "upstream")
        if post.streaming:
            await client.close_stream()  # mid-stream: cut, so the client's SDK reports the failure
            return
        await client.respond(status, wire.dumps(wire.error(request_id, ErrorCode.INTERNAL_ERROR, message)))

    async def _upstream(self, post: _Post, status: int | None, seconds: float) -> None:
        for pending in post.pending.values():
            if pending.call is not None:
                pending.call.ex.upstream_seconds += seconds
                await self.chain.upstream(pending.call.ex, status, seconds)

    def _unanswered(self, post: _Post, error_type: str) -> None:
        for pending in post.pending.values():
            self._operation(post, pending.message.method, error_type, pending.started)
        post.pending.clear()

    async def _read_json(self, post: _Post, raw: bytes, batch: bool) -> bytes:
        try:
            value = loads(raw)
        except ValueError:
            return raw  # not JSON: the client's SDK fails on it as it would without the sidecar
        messages = wire.reply_messages(value)
        answered = [await self._answered(post, message) for message in messages]
        if not post.answers and all(new is message.raw for new, message in zip(answered, messages, strict=True)):
            return raw
        if isinstance(value, list) or batch:
            return wire.dumps([*answered, *post.answers])
        return wire.dumps(answered[0]) if answered else raw

    async def _relay(self, post: _Post, answer: UpstreamAnswer, client: AgentPort) -> None:
        """An SSE reply, event by event: the events answering a checked request are read (and
        rewritten when they must be) before they go on; everything else goes on as it came."""
        await client.open_stream(answer)
        post.streaming = True
        if post.answers:
            await client.write(b"".join(_sse(a) for a in post.answers))
        parser = SSEParser()
        limit = self.settings.limits.max_reply_bytes
        unparsed = 0  # bytes of the event being read: one event is never larger than a whole reply
        while True:
            chunk = await answer.chunk()
            events = parser.feed(chunk) if chunk else parser.flush()
            unparsed = 0 if events else unparsed + len(chunk)
            if unparsed > limit:
                raise Refused(502, RefusalReason.SIZE, f"an SSE event exceeds the sidecar limit of {limit} bytes")
            out = [await self._event(post, event) for event in events]
            if out:
                await client.write(b"".join(out))
            if not chunk:
                break
        await client.close_stream()
        session_id = answer.headers.get(wire.SESSION_HEADER) or post.client_headers.get(wire.SESSION_HEADER)
        if post.pending and session_id:
            post.parked_until = time.monotonic() + self.settings.upstream_timeout_s
            self._parked.setdefault((post.target.name, session_id), []).append(post)
            return
        self._unanswered(post, "upstream")  # requests the stream ended without answering

    # -- GET: the session's stream (2025-06-18, 2025-11-25) -----------------------------------

    async def listen(
        self, target: Target, headers: CIMultiDict[str], client_headers: Mapping[str, str], client: AgentPort
    ) -> None:
        """The session's SSE stream, relayed; answers to parked POSTs are read on the way."""
        await self._sweep()
        key = (target.name, client_headers.get(wire.SESSION_HEADER) or "")
        try:
            async with self.upstream.open("GET", target.url, headers, b"") as answer:
                if answer.status != 200 or _content_type(answer.headers) != _SSE:
                    raw = await read_bounded(answer, self.settings.limits.max_reply_bytes)
                    await client.respond(answer.status, raw, answer)
                    return
                await client.open_stream(answer)
                parser = SSEParser()
                while True:
                    chunk = await answer.chunk()
                    events = parser.feed(chunk) if chunk else parser.flush()
                    out = [await self._resumed(key, event) for event in events]
                    if out:
                        await client.write(b"".join(out))
                    if not chunk:
                        break
                await client.close_stream()
        except UpstreamError as exc:
            self._upstream_failed(target.name, exc)
            await client.respond(exc.status, wire.dumps(wire.error(None, ErrorCode.INTERNAL_ERROR, exc.message)))
        finally:
            self._parked[key] = [p for p in self._parked.get(key, []) if p.pending]
            if not self._parked[key]:
                del self._parked[key]

    async def _resumed(self, key: tuple[str, str], event: SSEEvent) -> bytes:
        for post in self._parked.get(key, []):
            if post.pending:
                out = await self._event(post, event)
                if out is not event.raw:
                    return out
        return event.raw

    async def _sweep(self) -> None:
        """Parked POSTs whose answers never came: their calls end as failed."""
        if not self._parked:
            return
        now = time.monotonic()
        for key, posts in list(self._parked.items()):
            expired = [p for p in posts if p.parked_until is not None and p.parked_until <= now]
            if not expired:
                continue
            self._parked[key] = [p for p in posts if p not in expired]
            if not self._parked[key]:
                del self._parked[key]
            for post in expired:
                self._unanswered(post, "upstream")
                await self._close(post, "the MCP server never answered on the resumed stream")

    async def _event(self, post: _Post, event: SSEEvent) -> bytes:
        if not event.data or not post.pending:
            return event.raw
        try:
            value = loads(event.data)
        except ValueError:
            return event.raw
        messages = wire.reply_messages(value)
        if not messages:
            return event.raw
        answered = [await self._answered(post, message) for message in messages]
        if all(new is message.raw for new, message in zip(answered, messages, strict=True)):
            return event.raw
        return _rewritten_event(event, wire.dumps(answered if isinstance(value, list) else answered[0]))

    async def _answered(self, post: _Post, message: Message) -> dict[str, Any]:
        """A response from the server: a checked request's result is read; returns the message
        as it goes to the client."""
        if message.kind is not Kind.RESPONSE:
            return message.raw
        pending = post.pending.pop(_id_key(message.id), None)
        if pending is None:
            return message.raw
        result = message.result
        if pending.call is not None:
            error_type, replaced = await self._call_answered(pending.call, message, result)
            self._operation(post, pending.message.method, error_type, pending.started)
            return message.raw if replaced is None else {**message.raw, "result": replaced}
        if pending.listing and result is not None:
            rewritten = await self._list_answered(post, pending, message, result)
            self._operation(
                post, pending.message.method, "none" if rewritten is not None else "jsonrpc", pending.started
            )
            return rewritten if rewritten is not None else _internal_error(message.id)
        self._operation(post, pending.message.method, "none" if result is not None else "jsonrpc", pending.started)
        return message.raw

    async def _call_answered(
        self, leg: _CallLeg, message: Message, result: dict[str, Any] | None
    ) -> tuple[str, dict[str, Any] | None]:
        """The call's result read, matched and decided: its error type, and the result the
        client gets instead when the result policy withheld or redacted it."""
        ex, call = leg.ex, leg.check.call
        if result is None:
            await self._finish(leg, Outcome.FAILED, 200, "the MCP server answered with a JSON-RPC error")
            return "jsonrpc", None
        if wire.is_input_required(result):  # not the result yet: its retry is the same call
            self._remember_input(ex, call)
            await self._finish(leg, Outcome.DONE, 200, None)
            return "none", None
        declaration = ex.view.declarations.get(call.name)
        size = len(wire.dumps(result))
        tool_result = wire.tool_result(call, result, size, self.outputs.anomalies(declaration, result))
        ex.view.results = [tool_result]
        ex.view.echoed_calls = [EchoedCall(call.id, call.name, call.arguments)]
        try:
            await self.chain.answered(ex)
        except FilterFailed as failure:  # a critical filter could not judge the result: withheld
            log.error("MCP result failed closed: %s", failure)
            reason = f"the sidecar could not check this result ({failure.filter_name} failed)"
            ex.put(RESULT_REWRITE, ResultRewrite(withheld_notice(call.name, [reason])))
        await self._finish(leg, Outcome.DONE, 200, None)
        error_type = "tool_error" if tool_result.is_error else "none"
        rewrite = ex.get(RESULT_REWRITE)
        if rewrite is None:
            return error_type, None
        version = ex.mcp.protocol_version if ex.mcp is not None else None
        return error_type, wire.rewritten_result(result, rewrite, version)

    def _remember_input(self, ex: Exchange, call: ToolCall) -> None:
        if len(self._awaiting_input) >= _AWAITING_INPUT_MAX:
            self._awaiting_input.pop(next(iter(self._awaiting_input)))
        earlier = ex.earlier.get(call.id) or EarlierLeg(
            ex.session_info, call.id, call.name, call.args_hash, time.time()
        )
        self._awaiting_input[(ex.session, call.name, call.args_hash)] = earlier

    async def _list_answered(
        self, post: _Post, pending: _Pending, message: Message, result: dict[str, Any]
    ) -> dict[str, Any] | None:
        """A tools/list page: declarations through the chain, hidden tools out. None: the
        sidecar could not check it (the client gets an error, never the unfiltered list)."""
        declared = wire.declarations(result)
        self.catalog.record(post.caller, declared, is_first_page(pending.message.params))
        ex = self._exchange(post, pending.message, RequestView(declarations=declared), result)
        ex.started = pending.started
        end = End(Outcome.DONE, 200, False, 0.0)
        try:
            await self.chain.request(ex)
        except FilterFailed as failure:
            log.error("MCP tool list failed closed: %s", failure)
            end = End(Outcome.FAILED, 503, False, 0.0, "filter")
            return None
        finally:
            end.overhead_s = max(0.0, time.perf_counter() - pending.started - ex.upstream_seconds)
            await self.chain.done(ex, end)
        if ex.request is result:
            return message.raw
        return {**message.raw, "result": ex.request}

    async def _finish(self, leg: _CallLeg, outcome: Outcome, status: int, reason: str | None) -> None:
        """`on_done` for a call's exchange, exactly once."""
        if leg.done:
            return
        leg.done = True
        ex = leg.ex
        overhead = max(0.0, time.perf_counter() - ex.started - ex.upstream_seconds)
        await self.chain.done(ex, End(outcome, status, False, overhead, reason))

    def _operation(self, post: _Post, method: str, error_type: str, started: float) -> None:
        self.metrics.mcp_operation(post.target.name, method, error_type, time.perf_counter() - started)


def _internal_error(request_id: Any) -> dict[str, Any]:
    return wire.error(request_id, ErrorCode.INTERNAL_ERROR, "the sidecar cannot check this tool list now")


def _find_result(raw: bytes, kind: str, request_id: str) -> dict[str, Any]:
    """The result of the sidecar's own request in a JSON or SSE reply. Raises ValueError."""
    values: list[Any] = []
    if kind == _SSE:
        parser = SSEParser()
        for event in parser.feed(raw) + parser.flush():
            if event.data:
                values.append(loads(event.data))
    else:
        values.append(loads(raw))
    for value in values:
        for message in wire.reply_messages(value):
            if message.kind is Kind.RESPONSE and message.id == request_id:
                if message.result is None:
                    raise ValueError(f"tools/list answered an error: {message.error}")
                return message.result
    raise ValueError("no tools/list result in the reply")
