"""The life of one exchange, top to bottom: the one place that owns it.

    request → upstream → reply read → calls checked → (repair round)* → delivered → done | failed

`ExchangeRunner.run` walks that sequence for one agent request to a parsed endpoint and
guarantees that the filters hear `on_done` exactly once, whatever happens. Whole and streamed
replies differ only in how the reply is read (a body, or events relayed up to the first tool
call) and written (a body, or the held tail of the stream): both go through the same
settle-and-deliver step (`_settle_and_deliver`).

The runner knows no HTTP library. The transport (`sidecar/proxy/handler.py`) gives it two
ports: `UpstreamPort` (send a body to the provider, read the answer) and `AgentPort` (answer
the agent, whole or as a stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from enum import StrEnum
from operator import attrgetter
from typing import Any, Protocol, TypeVar

import orjson

from sidecar.config import Settings
from sidecar.dialects.base import MAX_DEPTH, StreamAssembler, TooDeep, json_object, read_json_object
from sidecar.dialects.sse import SSEEvent, SSEParser, format_event
from sidecar.exchange.enforce import Enforcer, RepairFailed, Settlement
from sidecar.exchange.filters import FilterChain, FilterFailed, WhileAwaited
from sidecar.exchange.state import End, Exchange, Origin, Outcome
from sidecar.model import Frame, RefusalReason, Reply
from sidecar.telemetry.redact import redact_text

log = logging.getLogger("sidecar.exchange")

REPAIR_HEADER = "x-sidecar-repair-rounds"
T = TypeVar("T")


# ---------------------------------------------------------------------------------------------
# Ports: what the transport provides
# ---------------------------------------------------------------------------------------------


class UpstreamCause(StrEnum):
    """Why an upstream request failed without an HTTP answer (`sidecar_upstream_errors_total`)."""

    DNS = "dns"  # the upstream's name did not resolve
    CONNECT = "connect"  # refused or unreachable
    TLS = "tls"  # handshake or certificate failure
    TIMEOUT = "timeout"  # connect or read timeout
    DISCONNECTED = "disconnected"  # the upstream closed the connection before or while answering
    PROTOCOL = "protocol"  # an answer that is not valid HTTP (or a body that ends badly)


class UpstreamError(Exception):
    """The upstream could not be reached or did not answer in time (no HTTP answer to relay)."""

    def __init__(self, status: int, message: str, cause: UpstreamCause = UpstreamCause.CONNECT) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.cause = cause


class UpstreamAnswer(Protocol):
    """An upstream HTTP answer being read. Reads raise UpstreamError."""

    status: int
    reason: str | None
    headers: Mapping[str, str]

    async def chunk(self) -> bytes:
        """The next bytes of the body as they arrive; b"" at the end."""
        ...

    def ready(self) -> bool:
        """Whether `chunk()` returns without waiting for the upstream."""
        ...


class UpstreamPort(Protocol):
    def open(
        self, ex: Exchange, body: bytes, sent: WhileAwaited | None = None
    ) -> AbstractAsyncContextManager[UpstreamAnswer]:
        """POST `body` to the exchange's upstream URL; raises UpstreamError. `sent` is awaited
        once the body is written, before the answer is read."""
        ...


class AgentPort(Protocol):
    """The agent's side of the exchange: one whole response, or one stream."""

    async def respond(
        self, status: int, body: bytes, upstream: UpstreamAnswer | None = None, extra: Mapping[str, str] | None = None
    ) -> None:
        """A whole response, sent when this returns; with `upstream`, its status line and
        (cleaned) headers."""
        ...

    async def open_stream(self, upstream: UpstreamAnswer, head_waits: bool = False) -> None:
        """Start the stream with `upstream`'s status and (cleaned) headers. The head is sent
        now, or with `head_waits`, with the first `write` (one send instead of two): the caller
        then writes, `write(b"")` at least, as soon as it has read what is at hand."""
        ...

    async def write(self, data: bytes) -> None: ...

    async def close_stream(self, last: bytes = b"") -> None:
        """End the stream; `last` goes out with its end, in one write."""
        ...


# ---------------------------------------------------------------------------------------------
# Failures the runner turns into an answer
# ---------------------------------------------------------------------------------------------


class Refused(Exception):
    """A request or reply refused as a whole: answered provider-shaped, counted by reason."""

    def __init__(self, status: int, reason: RefusalReason, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


# Counts and logs a refusal: (reason, path, message).
RefusalSink = Callable[[RefusalReason, str, str], None]
# Counts and logs an upstream failure (no HTTP answer).
UpstreamFailureSink = Callable[[Exchange, UpstreamError], None]


async def in_own_task(
    step: Coroutine[Any, Any, T], wait: Callable[[asyncio.Future[T]], Awaitable[T]] | None = None
) -> T:
    """`step`'s result, run as a task of its own, which is never left running: cancelled and
    waited for when the caller stops waiting (the agent went away, a keep-alive failed).
    `wait`: how to wait for it (a stream keeps its client alive meanwhile).

    Why a task: it runs from the loop's next turn, beside the same step of the other
    exchanges that got there in the same turn, one after the other, with warm caches, where
    run at once each ran between two other requests' parsing and I/O. Measured at c=64,
    whole replies, same run, alternated rounds (CPU per request): a reply's checks in a task,
    958 -> 843 and 883 -> 791 us (Anthropic, two runs), 959 -> 811 (Chat). Streams (which ran
    their checks in a task already) and c=1: no change (1,206 -> 1,210 us streamed; 1,490 ->
    1,499 at c=1). The request's filters after the tracing filter in a task too: 800 -> 766
    (Anthropic). A task runs in a copy of the caller's context: what the step makes current
    (a span) is not current for the caller afterwards (`Filter.sets_context`).
    """
    task = asyncio.ensure_future(step)
    try:
        return await (task if wait is None else wait(task))
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _is_json(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() in ("application/json", "")


def _is_sse(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "text/event-stream"


def _check_stream_answer(ex: Exchange, status: int) -> None:
    """An event stream is read only as the 200 answer to a streamed request: SDKs that asked
    for a whole reply parse such a body anyway, and other 2xx statuses are not the API's."""
    if 200 <= status < 300 and status != 200:
        raise Refused(502, RefusalReason.STATUS, f"the upstream answered {status} with an event stream")
    if status == 200 and not ex.view.stream:
        message = "the upstream answered a request without stream: true with an event stream"
        raise Refused(502, RefusalReason.CONTENT_TYPE, message)


def _already_sent(ex: Exchange, event: Frame) -> bool:
    """A resumed stream: the agent had this event from an earlier connection."""
    if ex.resume_after is None:
        return False
    number = ex.model_dialect.sequence_number(event)
    return number is not None and number <= ex.resume_after


def _vouched(reply: Reply, by_orjson: bool) -> Reply:
    """The reply, its calls' arguments vouched free of NaN and infinities when orjson read all
    of it (`ToolCall.read_by_orjson`): the lockdown's walk for them is then skipped. Argument
    texts are read by orjson alone (`parse_arguments`); the rest comes from the reply."""
    if by_orjson:
        for call in reply.calls:
            call.read_by_orjson()
    return reply


def _utf8(data: bytes) -> bool:
    if data.isascii():  # most events: checked without decoding
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


async def read_bounded(answer: UpstreamAnswer, limit: int) -> bytes:
    """The whole body, refused above `limit` bytes (`limits.max_reply_bytes`: memory is never
    the upstream's). Shared by the model path and the MCP path."""
    parts: list[bytes] = []
    size = 0
    while chunk := await answer.chunk():
        size += len(chunk)
        if size > limit:
            raise Refused(502, RefusalReason.SIZE, f"the upstream reply exceeds the sidecar limit of {limit} bytes")
        parts.append(chunk)
    return b"".join(parts)


# A stream's read is parsed from a slice of about this many bytes first (`SSEParser.batches`):
# the providers' first events (a message's start, its first text deltas) fit in it.
FIRST_SLICE_BYTES = 2048
_RAW = attrgetter("raw")


@dataclass(slots=True)
class _Held:
    """A reply read up to the point where the checks decide (the stream's held part)."""

    reply: Reply
    cut: int | None
    assembler: StreamAssembler | None = None


class ExchangeRunner:
    def __init__(
        self,
        settings: Settings,
        chain: FilterChain,
        upstream: UpstreamPort,
        refused: RefusalSink,
        upstream_failed: UpstreamFailureSink,
    ) -> None:
        self.settings = settings
        self.chain = chain
        self.upstream = upstream
        self.enforcer = Enforcer(settings, chain, self._send_repair)
        self._refused = refused
        self._upstream_failed = upstream_failed

    # -- the sequence ----------------------------------------------------------------------

    async def run(self, ex: Exchange, agent: AgentPort) -> None:
        """request → upstream → reply read → checked → repaired* → delivered → done | failed."""
        end = _EndState(ex)
        try:
            await self._run(ex, agent, end)
        except Refused as refusal:
            self._refused(refusal.reason, ex.url.path, refusal.message)
            await end.fail(agent, refusal.status, refusal.message, refusal.reason.value)
        except UpstreamError as exc:
            self._upstream_failed(ex, exc)
            await end.fail(agent, exc.status, exc.message, f"upstream {exc.cause.value}")
        except FilterFailed as failure:
            log.error("exchange failed closed: %s", failure)
            message = f"the sidecar cannot check this request now ({failure.filter_name} failed)"
            await end.fail(agent, 503, message, "filter")
        except (asyncio.CancelledError, ConnectionResetError):
            end.reason = "the agent went away"
            raise
        except Exception:
            # Last resort: a provider-shaped answer (or the in-stream error), never a crash.
            log.exception("sidecar failure on %s", ex.url.path)
            await end.fail(agent, 502, "the sidecar failed to process this request", "internal error")
        finally:
            await self.chain.done(ex, end.end())

    async def _run(self, ex: Exchange, agent: AgentPort, end: _EndState) -> None:
        original = ex.request
        # Results matched, tools listed and hidden. The filters after the tracing filter (which
        # makes the request's span current here, for the whole exchange) in a task of their own.
        await self.chain.request(ex, in_own_task)
        sent = time.perf_counter()
        try:
            # The filters that observe the request as sent do so while the upstream works on
            # it (`FilterChain.sent`).
            async with self.upstream.open(ex, ex.outgoing(original), self.chain.sent_of(ex)) as answer:
                ex.upstream_seconds += time.perf_counter() - sent
                content_type = answer.headers.get("Content-Type", "")
                if _is_sse(content_type):
                    _check_stream_answer(ex, answer.status)
                if answer.status == 200 and _is_sse(content_type):
                    end.stream = True
                    # Events already read with the head go out with it, in one send; the
                    # head never waits for the upstream (`_relay` writes after its first read).
                    head_waits = answer.ready()
                    await agent.open_stream(answer, head_waits)
                    end.streaming = True
                    held = await self._relay(ex, answer, agent, head_waits)
                else:
                    end.stream = False
                    raw = await self._timed(ex, self._read_bounded(answer))
                    await self.chain.upstream(ex, answer.status, ex.upstream_seconds)
                    read = self._model_reply(ex, answer.status, content_type, raw)
                    if read is None:  # an error or a body that carries no reply: as it came
                        await agent.respond(answer.status, raw, answer)
                        end.finish(answer.status)
                        return
                    parsed, by_orjson = read
                    reply = _vouched(ex.model_dialect.read_reply(parsed), by_orjson)
                    held = _Held(reply, reply.first_call_position)
                    delivery: _Delivery = _WholeDelivery(agent, answer, raw)
        except UpstreamError:
            ex.upstream_seconds = max(ex.upstream_seconds, time.perf_counter() - sent)
            await self.chain.upstream(ex, None, ex.upstream_seconds)
            raise
        if held.assembler is not None:
            if held.assembler.error is not None or not held.assembler.held:
                await self.chain.reply(ex, held.reply)
                await self.chain.delivered(ex, held.reply, [])
                await agent.close_stream()  # nothing held: everything already went out
                end.finish(200)
                return
            if not held.reply.complete:
                raise Refused(502, RefusalReason.FRAMING, "the upstream stream ended before its last event")
            keepalive = self.settings.enforcement.keepalive_interval_s
            delivery = _StreamDelivery(agent, held.assembler, ex.model_dialect.keepalive(), keepalive)
        await self._settle_and_deliver(ex, held, delivery)
        end.finish(200 if end.stream else delivery.status)

    async def _settle_and_deliver(self, ex: Exchange, held: _Held, delivery: _Delivery) -> None:
        """The shared tail: checks and repair rounds, commit, then the agent gets the reply.

        Everything the agent's next request relies on (the ledger at `on_deliver`; at
        `on_delivered`, a Responses chain's turn and the calls the MCP path will recognise) is
        stored before the reply's last bytes go out: an agent that answers at once finds it.
        What only observes the exchange (metrics, the log line, traces: `on_done`) runs after
        them, off the agent's wait."""
        if ex.origin is Origin.RETRIEVE:
            # A stored response echoes the tools it was created with: its calls are checked
            # against those, as if it had just been created.
            ex.view.declarations = ex.model_dialect.declarations(held.reply.envelope)
            ex.view.server_tools = ex.model_dialect.server_tools(held.reply.envelope)
        await self.chain.reply(ex, held.reply)
        # The checks run as a task of their own (see in_own_task), while the agent waits.
        settlement = await in_own_task(self.enforcer.settle(ex, held.reply, held.cut), delivery.while_waiting)
        try:
            await self.chain.deliver(ex, settlement.delivered)  # insert, then deliver
        except FilterFailed as failure:
            log.error("delivery withdrawn (fail closed): %s", failure)
            settlement = await self.enforcer.withdraw(ex, settlement, failure)
        delivery.as_shown(ex, held, settlement)
        await self.chain.delivered(ex, settlement.reply, settlement.delivered)
        await delivery.deliver(ex, held, settlement)

    # -- reading replies -------------------------------------------------------------------

    def _model_reply(
        self, ex: Exchange, status: int, content_type: str, raw: bytes
    ) -> tuple[dict[str, Any], bool] | None:
        """The reply body to check, and whether orjson read it (`read_json`); None for an error
        answer (passed as it came). A success the sidecar cannot read the way an SDK would
        (another 2xx, another content type, bytes that are not UTF-8 JSON) is refused: SDKs
        parse such bodies anyway."""
        if not 200 <= status < 300:
            return None
        if status != 200:
            raise Refused(
                502, RefusalReason.STATUS, f"the upstream answered {status}, a success the sidecar cannot vouch for"
            )
        if not _is_json(content_type):
            message = f"the upstream answered a model request with Content-Type {content_type!r}"
            raise Refused(502, RefusalReason.CONTENT_TYPE, message)
        if not _utf8(raw):
            raise Refused(502, RefusalReason.ENCODING, "the upstream reply is not valid UTF-8")
        try:
            parsed, by_orjson = read_json_object(raw)
        except TooDeep:
            raise Refused(502, RefusalReason.DEPTH, f"upstream reply nests deeper than {MAX_DEPTH} levels") from None
        if parsed is None:
            raise Refused(502, RefusalReason.FRAMING, "the upstream reply is not a JSON object")
        return parsed, by_orjson

    async def _read_bounded(self, answer: UpstreamAnswer) -> bytes:
        return await read_bounded(answer, self.settings.limits.max_reply_bytes)

    async def _timed(self, ex: Exchange, step: Awaitable[T]) -> T:
        started = time.perf_counter()
        try:
            return await step
        finally:
            ex.upstream_seconds += time.perf_counter() - started

    async def _relay(self, ex: Exchange, answer: UpstreamAnswer, agent: AgentPort, head_waits: bool) -> _Held:
        """Forward events as they arrive until the first tool call; hold from there.
        `head_waits`: the agent's response head goes out with the first write, which this
        makes (empty if need be) once the first read is handled."""
        assembler = ex.model_dialect.assembler()
        parser = SSEParser()
        limit = self.settings.limits.max_held_stream_bytes
        held_bytes = 0
        resumed = ex.resume_after is not None
        ascii_so_far = True  # every read so far was ASCII: so is every event, valid UTF-8
        try:
            while True:
                chunk = await self._timed(ex, answer.chunk())
                ascii_so_far = ascii_so_far and chunk.isascii()
                # Until the first call, a read of many events is parsed in slices (`batches`):
                # the events before the call go out once it is found, not once the whole
                # read, held calls included, is parsed.
                if not chunk:
                    batches: Iterable[list[SSEEvent]] = (parser.flush(),)
                elif assembler.holding:
                    batches = (parser.feed(chunk),)
                else:  # taken slice by slice, as the loop below asks for them
                    batches = parser.batches(chunk, FIRST_SLICE_BYTES)
                # What arrived in one read goes out in one write: no event waits for another,
                # nor for the events held after it (they are read before the checks run, but
                # the agent need not wait for that: the write goes when holding starts).
                ready: list[bytes] = []
                for batch in batches:
                    held = batch if assembler.holding and ascii_so_far else []
                    if not held:
                        for at, event in enumerate(batch):
                            if not ascii_so_far and not _utf8(event.raw):
                                assembler.refuse("bytes that are not valid UTF-8")
                            if assembler.feed(event):
                                if not resumed or not _already_sent(ex, event):
                                    ready.append(event.raw)
                            elif assembler.violation is not None:
                                break
                            else:
                                held_bytes += len(event.raw)
                                if ready:
                                    await agent.write(b"".join(ready))
                                    ready, head_waits = [], False
                                if ascii_so_far:  # the rest is held: taken at once below
                                    held = batch[at + 1 :]
                                    break
                    if held and assembler.violation is None:
                        # From here on every event is held, or dropped after an upstream error
                        # (which is forwarded): the assembler takes them at once (`hold`).
                        forward = assembler.hold(held)
                        held_bytes += sum(map(len, map(_RAW, held))) - sum(map(len, map(_RAW, forward)))
                        ready += [event.raw for event in forward if not resumed or not _already_sent(ex, event)]
                    if assembler.violation is not None:
                        break
                if ready:
                    await agent.write(b"".join(ready))
                elif head_waits:
                    await agent.write(b"")  # the head alone: nothing of this read goes out
                head_waits = False
                if assembler.violation is not None:
                    message = f"the upstream stream cannot be checked the way clients read it: {assembler.violation}"
                    raise Refused(502, RefusalReason.FRAMING, message)
                if held_bytes > limit:
                    raise Refused(502, RefusalReason.LIMIT, f"the held part of the stream exceeds {limit} bytes")
                if not chunk:
                    break
        except UpstreamError as exc:
            exc.message = f"the upstream stream ended early: {exc.message}"
            raise
        await self.chain.upstream(ex, 200, ex.upstream_seconds)
        return _Held(_vouched(assembler.reply(), assembler.read_by_orjson), assembler.cut, assembler)

    # -- repair rounds ---------------------------------------------------------------------

    async def _send_repair(self, ex: Exchange, body: dict[str, Any]) -> dict[str, Any]:
        """A repair round upstream: same URL and headers as the agent's own request."""
        sent = time.perf_counter()
        try:
            async with self.upstream.open(ex, orjson.dumps(body)) as answer:
                try:
                    raw = await self._read_bounded(answer)
                except Refused as refused:
                    raise RepairFailed(refused.message) from None
                status = answer.status
        except UpstreamError as exc:
            self._upstream_failed(ex, exc)
            await self.chain.upstream(ex, None, time.perf_counter() - sent)
            raise RepairFailed(exc.message) from exc
        finally:
            ex.upstream_seconds += time.perf_counter() - sent
        await self.chain.upstream(ex, status, time.perf_counter() - sent)
        try:
            parsed = json_object(raw)
        except TooDeep as exc:
            raise RepairFailed(str(exc)) from exc
        if status != 200 or parsed is None:
            # The provider's error body may quote what it was sent (keys, tool results).
            raise RepairFailed(redact_text(f"upstream answered {status}: {raw[:300]!r}"))
        return parsed


# ---------------------------------------------------------------------------------------------
# Delivery: the only part whole and streamed replies do differently
# ---------------------------------------------------------------------------------------------


class _Delivery(Protocol):
    status: int

    async def while_waiting(self, settling: asyncio.Future[Settlement]) -> Settlement:
        """The checks' result, once `settling` (their task) is done."""
        ...

    def as_shown(self, ex: Exchange, held: _Held, settlement: Settlement) -> None:
        """Make the settled reply the one the agent will see (before `on_delivered` stores it)."""
        ...

    async def deliver(self, ex: Exchange, held: _Held, settlement: Settlement) -> None: ...


class _WholeDelivery:
    def __init__(self, agent: AgentPort, answer: UpstreamAnswer, raw: bytes) -> None:
        self.agent = agent
        self.answer = answer
        self.raw = raw
        self.status = answer.status

    async def while_waiting(self, settling: asyncio.Future[Settlement]) -> Settlement:
        return await settling

    def as_shown(self, ex: Exchange, held: _Held, settlement: Settlement) -> None:
        return None  # a whole reply is shown as settled

    async def deliver(self, ex: Exchange, held: _Held, settlement: Settlement) -> None:
        body = orjson.dumps(ex.model_dialect.write_reply(settlement.reply)) if settlement.changed else self.raw
        extra = {REPAIR_HEADER: str(ex.repair_rounds)} if ex.repair_rounds else None
        await self.agent.respond(self.answer.status, body, self.answer, extra)


class _StreamDelivery:
    status = 200

    def __init__(self, agent: AgentPort, assembler: StreamAssembler, keepalive: bytes, keepalive_s: float) -> None:
        self.agent = agent
        self.assembler = assembler
        self._keepalive = keepalive
        self.keepalive_s = keepalive_s

    async def while_waiting(self, settling: asyncio.Future[Settlement]) -> Settlement:
        """Keep the client's connection alive while checks and repair rounds run."""
        while True:
            done, _ = await asyncio.wait({settling}, timeout=self.keepalive_s)
            if done:
                return settling.result()
            await self.agent.write(self._keepalive)

    def as_shown(self, ex: Exchange, held: _Held, settlement: Settlement) -> None:
        if settlement.changed:
            # A stream keeps the id it announced first (the agent already has it).
            shown = ex.model_dialect.response_id(held.reply)
            if shown and ex.model_dialect.response_id(settlement.reply) != shown:
                settlement.reply.envelope["id"] = shown

    async def deliver(self, ex: Exchange, held: _Held, settlement: Settlement) -> None:
        assembler = self.assembler
        if settlement.changed:
            start = assembler.cut if assembler.cut is not None else len(held.reply.items)
            tail = ex.model_dialect.render_tail(settlement.reply, start, assembler.tail)
            if ex.repair_rounds:
                # Headers left long ago: say it the way clients ignore, an SSE comment.
                tail = f": {REPAIR_HEADER}: {ex.repair_rounds}\n\n".encode() + tail
        elif ex.resume_after is None:  # most streams: every held event goes
            tail = b"".join([event.raw for event in assembler.held])
        else:
            tail = b"".join([event.raw for event in assembler.held if not _already_sent(ex, event)])
        await self.agent.close_stream(tail)  # the held part and the stream's end: one write


class _EndState:
    """How the exchange is ending, so `on_done` is reported once with the right facts."""

    def __init__(self, ex: Exchange) -> None:
        self.ex = ex
        self.outcome = Outcome.FAILED
        self.status = 502
        self.stream = ex.view.stream
        self.streaming = False  # the agent's response headers are sent: errors go in-stream
        self.reason: str | None = "unfinished"

    def finish(self, status: int) -> None:
        self.outcome, self.status, self.reason = Outcome.DONE, status, None

    async def fail(self, agent: AgentPort, status: int, message: str, reason: str) -> None:
        self.outcome, self.status, self.reason = Outcome.FAILED, status, reason
        error = orjson.dumps(self.ex.model_dialect.error_body(status, message))
        try:
            if self.streaming:
                # A broken stream ends with the protocol's error event, so the SDK raises its
                # normal streaming error instead of taking a truncated answer as complete.
                await agent.write(format_event(error, "error"))
                await agent.close_stream()
            else:
                await agent.respond(status, error)
        except (ConnectionResetError, RuntimeError) as exc:  # the agent is gone
            log.info("could not tell the agent about the failure: %s", exc)

    def end(self) -> End:
        ex = self.ex
        overhead = max(0.0, time.perf_counter() - ex.started - ex.upstream_seconds)
        return End(self.outcome, self.status, self.stream, overhead, self.reason)
