"""The proxy port's request handler: route, forward, read both directions, enforce.

Endpoints without a dialect are forwarded untouched. Parsed endpoints go through the
dialect, the addons and the enforcer; bytes nobody changed are forwarded as they arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict

from sidecar.addons import Addons
from sidecar.config import Settings
from sidecar.dialects import ANTHROPIC, OPENAI_CHAT
from sidecar.dialects.base import MAX_DEPTH, Dialect, TooDeep, loads
from sidecar.dialects.sse import SSEParser, format_event
from sidecar.exchange.enforce import Enforcer, RepairFailed, Settlement
from sidecar.exchange.state import Exchange
from sidecar.identity import is_derived, session_id
from sidecar.model import Provider, Reply
from sidecar.proxy.headers import downstream_response_headers, upstream_request_headers
from sidecar.proxy.routing import Route, path_class, resolve, upstream_url
from sidecar.proxy.upstream import UpstreamError, Upstreams
from sidecar.telemetry.logs import log_event
from sidecar.telemetry.metrics import Metrics

log = logging.getLogger("sidecar.proxy")

REPAIR_HEADER = "x-sidecar-repair-rounds"
_READ_CHUNK = 64 * 1024


class BodyTooLarge(Exception):
    pass


def _is_json(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() in ("application/json", "")


def _is_sse(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "text/event-stream"


class ProxyHandler:
    def __init__(
        self, settings: Settings, upstreams: Upstreams, enforcer: Enforcer, addons: Addons, metrics: Metrics
    ) -> None:
        self.settings = settings
        self.upstreams = upstreams
        self.enforcer = enforcer
        self.addons = addons
        self.metrics = metrics

    # -- entry point ---------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.StreamResponse:
        route = resolve(request.method, request.rel_url.raw_path, request.headers)
        error_dialect = route.dialect or (ANTHROPIC if route.provider is Provider.ANTHROPIC else OPENAI_CHAT)
        try:
            body = await self._read_body(request)
        except BodyTooLarge:
            limit = self.settings.max_body_bytes
            return self._refuse(
                error_dialect, 413, "size", f"request body exceeds the sidecar limit of {limit} bytes", route.path
            )
        url = upstream_url(self.upstreams.bases[route.provider], route.path, request.rel_url.raw_query_string)
        headers = upstream_request_headers(request.headers, drop=[self.settings.session_header])
        try:
            payload = self._json_object(body) if route.dialect is not None else None
        except TooDeep:
            # Valid JSON the sidecar could not check (nor write back): never forward it unchecked.
            return self._refuse(
                error_dialect, 400, "depth", f"request JSON nests deeper than {MAX_DEPTH} levels", route.path
            )
        try:
            if route.dialect is None or payload is None:
                return await self._passthrough(request, route, url, headers, body)
            return await self._exchange(request, route, route.dialect, url, headers, payload, body)
        except UpstreamError as exc:
            self._upstream_failed(route.provider, exc, route.path)
            return self._error(error_dialect, exc.status, exc.message)
        except Exception:
            # Last resort (streams handle their own once started): a provider-shaped answer.
            log.exception("sidecar failure on %s", route.path)
            return self._error(error_dialect, 502, "the sidecar failed to process this request")

    async def _read_body(self, request: web.Request) -> bytes:
        limit = self.settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise BodyTooLarge
        chunks: list[bytes] = []
        size = 0
        while chunk := await request.content.read(_READ_CHUNK):
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            chunks.append(chunk)
        return b"".join(chunks)

    @staticmethod
    def _json_object(body: bytes) -> dict[str, Any] | None:
        """The body as a JSON object; None for anything else. Raises TooDeep (see `loads`)."""
        try:
            value = loads(body)
        except TooDeep:
            raise
        except ValueError:
            return None  # not ours to judge: the provider answers malformed requests
        return value if isinstance(value, dict) else None

    def _upstream_failed(self, provider: Provider, exc: UpstreamError, path: str) -> None:
        """No HTTP answer from the upstream: counted by cause, never as an upstream 502."""
        self.metrics.upstream_error(provider.value, exc.cause.value)
        log_event(
            "upstream_error",
            level=logging.WARNING,
            log=log,
            provider=provider.value,
            path=path,
            cause=exc.cause.value,
            error=exc.message,
            status=exc.status,
        )

    def _refuse(self, dialect: Dialect, status: int, reason: str, message: str, path: str) -> web.Response:
        """A request or reply refused as a whole: counted, logged once, provider-shaped."""
        self.metrics.request_refused(reason)
        log_event("request_refused", level=logging.WARNING, log=log, reason=reason, path=path, message=message)
        return self._error(dialect, status, message)

    @staticmethod
    def _error(dialect: Dialect, status: int, message: str) -> web.Response:
        return web.Response(
            body=orjson.dumps(dialect.error_body(status, message)),
            status=status,
            content_type="application/json",
        )

    # -- untouched forwarding ------------------------------------------------------------
    async def _passthrough(
        self, request: web.Request, route: Route, url: Any, headers: CIMultiDict[str], body: bytes
    ) -> web.StreamResponse:
        kind = path_class(route.path)
        self.metrics.passthrough_request(route.provider.value, kind)
        upstream = await self.upstreams.open(request.method, url, headers, body)
        log_event(
            "passthrough",
            log=log,
            provider=route.provider.value,
            method=request.method,
            path=route.path,
            path_class=kind,
            status=upstream.status,
        )
        async with upstream:
            downstream = web.StreamResponse(
                status=upstream.status,
                reason=upstream.reason,
                headers=downstream_response_headers(upstream.headers),
            )
            await downstream.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await downstream.write(chunk)
            except (TimeoutError, aiohttp.ClientPayloadError) as exc:
                log.warning("upstream body ended early on %s: %s", url.path, type(exc).__name__)
                if request.transport is not None:
                    request.transport.abort()  # a clean end would pass a truncated body off as whole
                return downstream
            await downstream.write_eof()
            return downstream

    # -- parsed endpoints ----------------------------------------------------------------
    async def _exchange(
        self,
        request: web.Request,
        route: Route,
        dialect: Dialect,
        url: Any,
        headers: CIMultiDict[str],
        payload: dict[str, Any],
        body: bytes,
    ) -> web.StreamResponse:
        view = dialect.read_request(payload)
        exchange = Exchange(
            id=secrets.token_hex(8),
            provider=route.provider,
            dialect=dialect,
            session=session_id(request.headers, self.settings.session_header, view),
            view=view,
            request=payload,
            url=url,
            headers=headers,
        )
        if view.previous_response_id and dialect.server_side_state:
            chain = await self.enforcer.continuations.resolve(view.previous_response_id)
            if chain.response_id != view.previous_response_id:
                exchange.request = {**exchange.request, "previous_response_id": chain.response_id}
            if chain.outputs:
                exchange.request = dialect.add_withheld_outputs(exchange.request, chain.outputs)
            if chain.session and is_derived(exchange.session):
                exchange.session = chain.session
        await self.addons.request(exchange)
        outgoing = body if exchange.request is payload else orjson.dumps(exchange.request)
        sent = time.perf_counter()
        try:
            upstream = await self.upstreams.open("POST", url, headers, outgoing)
            async with upstream:
                exchange.upstream_seconds += time.perf_counter() - sent
                content_type = upstream.headers.get("Content-Type", "")
                if upstream.status == 200 and _is_sse(content_type):
                    return await self._stream(request, exchange, upstream)
                return await self._whole(exchange, upstream, content_type)
        except UpstreamError as exc:
            # Failures the agent sees as 502/504 are counted like any upstream answer.
            exchange.upstream_seconds = max(exchange.upstream_seconds, time.perf_counter() - sent)
            await self.addons.upstream(exchange, None, exchange.upstream_seconds)
            await self._done(exchange, exc.status, stream=exchange.view.stream)
            raise

    async def _timed_read(self, exchange: Exchange, upstream: aiohttp.ClientResponse) -> bytes:
        started = time.perf_counter()
        try:
            return await upstream.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise UpstreamError.from_exception(exc, f"{upstream.url.origin()} (sending its response)") from exc
        finally:
            exchange.upstream_seconds += time.perf_counter() - started

    async def _whole(
        self, exchange: Exchange, upstream: aiohttp.ClientResponse, content_type: str
    ) -> web.StreamResponse:
        raw = await self._timed_read(exchange, upstream)
        await self.addons.upstream(exchange, upstream.status, exchange.upstream_seconds)
        headers = downstream_response_headers(upstream.headers)
        try:
            parsed = self._json_object(raw) if upstream.status == 200 and _is_json(content_type) else None
        except TooDeep:
            await self._done(exchange, 502, stream=False)
            message = f"upstream reply nests deeper than {MAX_DEPTH} levels"
            return self._refuse(exchange.dialect, 502, "depth", message, exchange.url.path)
        if parsed is not None:
            dialect = exchange.dialect
            reply = dialect.read_reply(parsed)
            await self.addons.replied(exchange, reply)
            settlement = await self.enforcer.settle(exchange, reply, reply.first_call_position)
            if settlement.changed:
                raw = orjson.dumps(dialect.write_reply(settlement.reply))
            if exchange.repair_rounds:
                headers[REPAIR_HEADER] = str(exchange.repair_rounds)
            await self.addons.delivered(exchange, settlement.delivered)
            await self._remember_chain(exchange, settlement.reply)
        response = web.Response(body=raw, status=upstream.status, reason=upstream.reason, headers=headers)
        await self._done(exchange, upstream.status, stream=False)
        return response

    async def _stream(
        self, request: web.Request, exchange: Exchange, upstream: aiohttp.ClientResponse
    ) -> web.StreamResponse:
        downstream = web.StreamResponse(status=200, headers=downstream_response_headers(upstream.headers))
        await downstream.prepare(request)
        try:
            return await self._relay(exchange, upstream, downstream)
        except Exception:
            # Last resort once headers are sent: the protocol's in-stream error, not a cut.
            log.exception("sidecar failure in a stream on %s", exchange.url.path)
            return await self._end_with_error(exchange, downstream, 502, "the sidecar failed to process this stream")

    async def _relay(
        self, exchange: Exchange, upstream: aiohttp.ClientResponse, downstream: web.StreamResponse
    ) -> web.StreamResponse:
        assembler = exchange.dialect.assembler()
        parser = SSEParser()
        try:
            while True:
                started = time.perf_counter()
                chunk = await upstream.content.readany()
                exchange.upstream_seconds += time.perf_counter() - started
                events = parser.feed(chunk) if chunk else parser.flush()
                # What arrived in one read goes out in one write: no event waits for another.
                ready = [event.raw for event in events if assembler.feed(event)]
                if ready:
                    await downstream.write(b"".join(ready))
                if not chunk:
                    break
        except (TimeoutError, aiohttp.ClientPayloadError, aiohttp.ServerTimeoutError) as exc:
            failure = UpstreamError.from_exception(exc, str(exchange.url.origin()))
            failure.message = f"the upstream stream ended early: {failure.message}"
            self._upstream_failed(exchange.provider, failure, exchange.url.path)
            await self.addons.upstream(exchange, None, exchange.upstream_seconds)
            # Held calls are discarded (never release a partial call); the SDK gets its
            # normal in-stream error instead of a stream that merely stops.
            status = 504 if isinstance(exc, TimeoutError) else 502
            message = "the upstream stream ended early" + (" (timed out)" if status == 504 else "")
            return await self._end_with_error(exchange, downstream, status, message)
        await self.addons.upstream(exchange, 200, exchange.upstream_seconds)
        reply = assembler.reply()
        await self.addons.replied(exchange, reply)
        if assembler.error is None and assembler.held:
            if not reply.complete:
                self.metrics.request_refused("framing")
                log_event(
                    "request_refused",
                    level=logging.WARNING,
                    log=log,
                    reason="framing",
                    path=exchange.url.path,
                    message="the upstream stream ended before its last event: held calls discarded",
                )
                return await self._end_with_error(
                    exchange, downstream, 502, "the upstream stream ended before its last event"
                )
            settlement = await self._settle_with_keepalive(exchange, downstream, reply, assembler.cut)
            await self._keep_stream_identity(exchange, reply, settlement.reply)
            if settlement.changed:
                start = assembler.cut if assembler.cut is not None else len(reply.items)
                tail = exchange.dialect.render_tail(settlement.reply, start, assembler.tail)
                if exchange.repair_rounds:
                    # Headers left long ago: say it the way clients ignore, an SSE comment.
                    tail = f": {REPAIR_HEADER}: {exchange.repair_rounds}\n\n".encode() + tail
                await downstream.write(tail)
            else:
                await downstream.write(b"".join(event.raw for event in assembler.held))
            await self.addons.delivered(exchange, settlement.delivered)
        await self._remember_chain(exchange, reply)
        await downstream.write_eof()
        await self._done(exchange, 200, stream=True)
        return downstream

    async def _end_with_error(
        self, exchange: Exchange, downstream: web.StreamResponse, status: int, message: str
    ) -> web.StreamResponse:
        """A broken stream ends with the protocol's error event, so the SDK raises its normal
        streaming error instead of taking a truncated answer as complete."""
        error = orjson.dumps(exchange.dialect.error_body(status, message))
        await downstream.write(format_event(error, "error"))
        await downstream.write_eof()
        await self._done(exchange, status, stream=True)
        return downstream

    async def _remember_chain(self, exchange: Exchange, shown: Reply) -> None:
        """A derived session is hashed from the first user message, which later turns of a
        `previous_response_id` chain no longer carry: remember it by response id."""
        response_id = exchange.dialect.response_id(shown)
        if exchange.dialect.server_side_state and response_id and is_derived(exchange.session):
            await self.enforcer.continuations.remember_session(response_id, exchange.session)

    async def _keep_stream_identity(self, exchange: Exchange, first: Reply, final: Reply) -> None:
        """A stream keeps the id it announced first; a stateful provider's chain continues
        from the last repair round, so the sidecar remembers which one that is."""
        dialect = exchange.dialect
        shown, actual = dialect.response_id(first), dialect.response_id(final)
        if shown and actual and shown != actual:
            final.envelope["id"] = shown
            if dialect.server_side_state:
                await self.enforcer.continuations.alias(shown, actual)

    async def _settle_with_keepalive(
        self, exchange: Exchange, downstream: web.StreamResponse, reply: Reply, cut: int | None
    ) -> Settlement:
        """Keep the client's connection alive while guards and repair rounds run."""
        task = asyncio.ensure_future(self.enforcer.settle(exchange, reply, cut))
        interval = self.settings.enforcement.keepalive_interval_s
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=interval)
                if done:
                    return task.result()
                await downstream.write(exchange.dialect.keepalive())
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _done(self, exchange: Exchange, status: int, stream: bool) -> None:
        overhead = max(0.0, time.perf_counter() - exchange.started - exchange.upstream_seconds)
        await self.addons.done(exchange, status, overhead, stream)


class RepairChannel:
    """The enforcer's way upstream: same URL and headers as the agent's own request."""

    def __init__(self, upstreams: Upstreams, addons: Addons) -> None:
        self.upstreams = upstreams
        self.addons = addons

    async def __call__(self, exchange: Exchange, body: dict[str, Any]) -> dict[str, Any]:
        sent = time.perf_counter()
        try:
            upstream = await self.upstreams.open("POST", exchange.url, exchange.headers, orjson.dumps(body))
            async with upstream:
                raw = await upstream.read()
        except (TimeoutError, UpstreamError, aiohttp.ClientError) as exc:
            raise RepairFailed(str(exc)) from exc
        finally:
            exchange.upstream_seconds += time.perf_counter() - sent
        await self.addons.upstream(exchange, upstream.status, time.perf_counter() - sent)
        try:
            parsed = ProxyHandler._json_object(raw)
        except TooDeep as exc:
            raise RepairFailed(str(exc)) from exc
        if upstream.status != 200 or parsed is None:
            raise RepairFailed(f"upstream answered {upstream.status}: {raw[:300]!r}")
        return parsed
