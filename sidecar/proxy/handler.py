"""The proxy port's request handler: transport only.

It reads the agent's request (bounded), routes it, refuses what it cannot read, forwards
untouched what cannot carry a tool call, and hands every parsed endpoint to the exchange
runner (`sidecar/exchange/runner.py`), which owns the rest. It also implements the runner's
two ports: `UpstreamChannel` (the provider, over sidecar/proxy/http_client.py) and
`AiohttpAgent` (the agent, over aiohttp's server).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import orjson
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from sidecar.config import Settings
from sidecar.dialects.base import MAX_DEPTH, Dialect, TooDeep
from sidecar.dialects.request_body import request_object
from sidecar.exchange.filters import WhileAwaited
from sidecar.exchange.runner import ExchangeRunner, UpstreamAnswer, UpstreamError
from sidecar.exchange.state import Exchange, Origin
from sidecar.identity import session_id
from sidecar.model import Provider, RefusalReason, RequestView
from sidecar.proxy.coverage import WEBSOCKET_MESSAGE, Handling, refusal_message, refused
from sidecar.proxy.headers import downstream_response_headers, upstream_request_headers
from sidecar.proxy.history import HistoryScreen, Unscreenable
from sidecar.proxy.routing import Route, resolve, upstream_url
from sidecar.proxy.upstream import Upstreams
from sidecar.state import StateUnavailable

log = logging.getLogger("sidecar.proxy")

_READ_CHUNK = 64 * 1024


class BodyTooLarge(Exception):
    pass


class _Unreadable(Exception):
    """A request body on a parsed endpoint that the sidecar cannot read: refused, never forwarded."""

    def __init__(self, reason: RefusalReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _request_object(body: bytes) -> dict[str, Any]:
    """The agent's body as a JSON object, or _Unreadable: what the sidecar cannot read, it
    cannot check, and the provider might still read it (another decoder, another reading)."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Unreadable(
            RefusalReason.ENCODING, f"the request body is not valid UTF-8 (byte {exc.start}): send UTF-8 JSON"
        ) from None
    try:
        payload = request_object(body)
    except TooDeep:
        raise _Unreadable(RefusalReason.DEPTH, f"request JSON nests deeper than {MAX_DEPTH} levels") from None
    if payload is None:
        raise _Unreadable(RefusalReason.FRAMING, "the request body is not a JSON object: send the API's JSON body")
    return payload


def _is_websocket(request: web.BaseRequest) -> bool:
    """An upgrade to WebSocket (RFC 6455: `Upgrade: websocket`, case-insensitive)."""
    upgrade = request.headers.get("Upgrade", "")
    return "websocket" in upgrade.lower()


class UpstreamChannel:
    """The runner's way to the provider: the exchange's URL and headers, the given body."""

    def __init__(self, upstreams: Upstreams) -> None:
        self.upstreams = upstreams

    def open(
        self, ex: Exchange, body: bytes, sent: WhileAwaited | None = None
    ) -> AbstractAsyncContextManager[UpstreamAnswer]:
        return self.upstreams.opened(ex.method, ex.url, ex.headers, body, sent)


class _HeadWithFirstWrite(web.StreamResponse):
    """A stream whose head aiohttp holds until the first `write` and sends with it, in one
    send, as it does for a `web.Response` (the class attribute that says so; an aiohttp
    without it sends the head at `prepare`, as for any stream)."""

    _send_headers_immediately = False


class AiohttpAgent:
    """The runner's way to the agent: one `web.Response`, or one prepared stream."""

    def __init__(self, request: web.BaseRequest) -> None:
        self.request = request
        self.response: web.StreamResponse | None = None

    async def respond(
        self, status: int, body: bytes, upstream: UpstreamAnswer | None = None, extra: Mapping[str, str] | None = None
    ) -> None:
        if upstream is not None:
            headers = downstream_response_headers(upstream.headers)
            reason = upstream.reason
        else:
            headers, reason = CIMultiDict({"Content-Type": "application/json"}), None
        if extra:
            headers.update(extra)
        response = web.Response(body=body, status=status, reason=reason, headers=headers)
        self.response = response
        # Sent now, not when the handler returns: the exchange's observation (`on_done`) runs
        # after the agent has its answer, as it does after a stream's last event.
        await response.prepare(self.request)
        await response.write_eof()

    async def open_stream(self, upstream: UpstreamAnswer, head_waits: bool = False) -> None:
        kind = _HeadWithFirstWrite if head_waits else web.StreamResponse
        response = kind(status=200, headers=downstream_response_headers(upstream.headers))
        await response.prepare(self.request)
        self.response = response

    async def write(self, data: bytes) -> None:
        assert self.response is not None, "open_stream first"
        await self.response.write(data)

    async def close_stream(self, last: bytes = b"") -> None:
        assert self.response is not None, "open_stream first"
        await self.response.write_eof(last)


async def read_body(request: web.BaseRequest, limit: int) -> bytes:
    """The whole request body, refused (BodyTooLarge) past `limit` bytes without reading more."""
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


class McpPort(Protocol):
    """The MCP path's transport (`sidecar/proxy/mcp.py`): it owns every `/mcp/…` path, so none
    of them is ever taken for a model provider's."""

    def claims(self, raw_path: str) -> bool: ...

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse: ...


def error_response(dialect: Dialect, status: int, message: str) -> web.Response:
    body = orjson.dumps(dialect.error_body(status, message))
    return web.Response(body=body, status=status, content_type="application/json")


class ProxyHandler:
    def __init__(
        self,
        settings: Settings,
        upstreams: Upstreams,
        runner: ExchangeRunner,
        refused: Callable[[RefusalReason, str, str], None],
        upstream_failed: Callable[[Provider, UpstreamError, str], None],
        passthrough: Callable[[Provider, str, str, str, int], None],
        history: HistoryScreen,
        mcp: McpPort | None = None,
    ) -> None:
        self.settings = settings
        self.history = history
        self.mcp = mcp
        self.upstreams = upstreams
        self.runner = runner
        self._refused = refused
        self._upstream_failed = upstream_failed
        self._passthrough_seen = passthrough

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if self.mcp is not None and self.mcp.claims(request.rel_url.raw_path):
            return await self.mcp.handle(request)
        route = resolve(request.method, request.rel_url.raw_path, request.headers)
        error_dialect = route.error_dialect
        if _is_websocket(request):
            return self._refuse(error_dialect, 400, RefusalReason.WEBSOCKET, WEBSOCKET_MESSAGE, route.path)
        if refused(route.rule, self.settings.coverage):
            message = refusal_message(route.rule, request.method, route.path)
            return self._refuse(error_dialect, 403, RefusalReason.UNSUPPORTED_PATH, message, route.path)
        try:
            body = await self._read_body(request)
        except BodyTooLarge:
            message = f"request body exceeds the sidecar limit of {self.settings.max_body_bytes} bytes"
            return self._refuse(error_dialect, 413, RefusalReason.SIZE, message, route.path)
        url = upstream_url(self.upstreams.bases[route.provider], route.path, request.rel_url.raw_query_string)
        headers = upstream_request_headers(request.headers, drop=[self.settings.session_header])
        if route.handling in (Handling.FORWARD, Handling.UNPARSED):
            try:
                return await self._passthrough(request, route, url, headers, body)
            except UpstreamError as exc:
                self._upstream_failed(route.provider, exc, route.path)
                return error_response(error_dialect, exc.status, exc.message)
        if route.handling is Handling.RETRIEVE:
            return await self._retrieve(request, route, url, headers)
        if route.handling is Handling.HISTORY:
            return await self._history(request, route, url, headers, body)
        dialect = error_dialect
        try:
            payload = _request_object(body)
        except _Unreadable as exc:
            return self._refuse(dialect, 400, exc.reason, exc.message, route.path)
        origin = Origin.BACKGROUND if payload.get("background") is True else Origin.CREATE
        if origin is Origin.BACKGROUND and self.settings.coverage.background == "refuse":
            message = (
                "the sidecar refuses background responses (coverage.background: refuse): send the request "
                "without background: true"
            )
            return self._refuse(dialect, 403, RefusalReason.UNSUPPORTED_PATH, message, route.path)
        view = dialect.read_request(payload)
        ex = self._exchange(route, dialect, request, view, payload, url, headers, body)
        ex.origin = origin
        return await self._run(ex, request)

    def _exchange(
        self,
        route: Route,
        dialect: Dialect,
        request: web.BaseRequest,
        view: RequestView,
        payload: dict[str, Any],
        url: URL,
        headers: CIMultiDict[str],
        body: bytes,
    ) -> Exchange:
        session = session_id(request.headers, self.settings.session_header, view)
        return Exchange(
            id=secrets.token_hex(8),
            provider=route.provider,
            dialect=dialect,
            session=session.id,
            session_source=session.source,
            view=view,
            request=payload,
            url=url,
            headers=headers,
            body=body,
            method=request.method.upper(),
        )

    async def _run(self, ex: Exchange, request: web.BaseRequest) -> web.StreamResponse:
        agent = AiohttpAgent(request)
        await self.runner.run(ex, agent)
        if agent.response is None:  # cannot happen: the runner always answers
            return error_response(ex.model_dialect, 502, "the sidecar produced no response")
        return agent.response

    async def _retrieve(
        self, request: web.BaseRequest, route: Route, url: URL, headers: CIMultiDict[str]
    ) -> web.StreamResponse:
        """A stored response read back (GET /v1/responses/{id}, the stream resume, POST
        …/cancel): checked like a created one, never repaired. A resumed stream is read from
        its start, so every call is assembled whole; the events the agent has are not resent."""
        dialect = route.error_dialect
        view = RequestView(stream=request.query.get("stream") == "true")
        ex = self._exchange(route, dialect, request, view, {}, url, headers, b"")
        ex.origin = Origin.RETRIEVE
        if view.stream and "starting_after" in request.query:
            try:
                ex.resume_after = int(request.query["starting_after"])
            except ValueError:
                message = "starting_after must be an integer (the sequence number of the last event received)"
                return self._refuse(dialect, 400, RefusalReason.FRAMING, message, route.path)
            query = [(k, v) for k, v in request.rel_url.query.items() if k != "starting_after"]
            ex.url = url.with_query(query)
        return await self._run(ex, request)

    async def _history(
        self, request: web.BaseRequest, route: Route, url: URL, headers: CIMultiDict[str], body: bytes
    ) -> web.StreamResponse:
        """A listing of stored items (input items, conversation items, a compaction): the
        calls the sidecar refused are removed; everything else passes as it came."""
        dialect = route.error_dialect
        try:
            upstream = await self.upstreams.open(request.method, url, headers, body)
        except UpstreamError as exc:
            self._upstream_failed(route.provider, exc, route.path)
            return error_response(dialect, exc.status, exc.message)
        async with upstream:
            try:
                raw = await upstream.read()
            except UpstreamError as failure:
                self._upstream_failed(route.provider, failure, route.path)
                return error_response(dialect, failure.status, failure.message)
            status, reason, answer_headers = upstream.status, upstream.reason, upstream.headers
        self._passthrough_seen(route.provider, request.method, route.path, "history", status)
        if status == 200:
            try:
                raw = await self.history.screen(raw)
            except Unscreenable as exc:
                return self._refuse(dialect, 502, exc.reason, exc.message, route.path)
            except StateUnavailable:
                message = "the sidecar cannot reach its state backend to screen this listing; try again later"
                return error_response(dialect, 503, message)
        return web.Response(body=raw, status=status, reason=reason, headers=downstream_response_headers(answer_headers))

    def _refuse(self, dialect: Dialect, status: int, reason: RefusalReason, message: str, path: str) -> web.Response:
        self._refused(reason, path, message)
        return error_response(dialect, status, message)

    async def _read_body(self, request: web.BaseRequest) -> bytes:
        return await read_body(request, self.settings.max_body_bytes)

    async def _passthrough(
        self, request: web.BaseRequest, route: Route, url: URL, headers: CIMultiDict[str], body: bytes
    ) -> web.StreamResponse:
        """Forwarded untouched: the path cannot carry a tool call (see docs/coverage.md)."""
        upstream = await self.upstreams.open(request.method, url, headers, body)
        path_class = route.rule.path_class.value
        self._passthrough_seen(route.provider, request.method, route.path, path_class, upstream.status)
        async with upstream:
            downstream = web.StreamResponse(
                status=upstream.status,
                reason=upstream.reason,
                headers=downstream_response_headers(upstream.headers),
            )
            await downstream.prepare(request)
            try:
                while chunk := await upstream.chunk():
                    await downstream.write(chunk)
            except UpstreamError as exc:
                log.warning("upstream body ended early on %s: %s", url.path, exc.message)
                if request.transport is not None:
                    request.transport.abort()  # a clean end would pass a truncated body off as whole
                return downstream
            await downstream.write_eof()
            return downstream
