"""A lean HTTP/1.1 client for the sidecar's upstreams: asyncio protocols, llhttp's parser.

Why not aiohttp's client: every model request pays the client, and the sidecar's CPU per
request is the root of its latency and throughput targets. Reading the benchmark's replies from
its mock provider at c=8 (`bench/bench_client.py`, two runs), aiohttp's `ClientSession` spent
215-255 µs of CPU per whole reply and 297-419 µs per streamed one; this client 113-158 and
139-186 (1.6-2.3x less).

What it does, and no more (the sidecar's upstreams are a fixed set of configured bases):

- one pool of kept-alive connections per origin, reused last-in first-out; a connection idle
  for `KEEPALIVE_S` is closed, never reused (servers close idle connections, and a request
  written into one that is closing fails), by a sweep that runs while any connection is idle;
- requests are written whole (the sidecar has every body in memory), with `Host`,
  `Content-Length` and `Accept: */*` when the caller sets none;
- replies are parsed by llhttp (the parser aiohttp also uses, through `httptools`): bodies
  framed by length, chunked or by the connection's end; `Content-Encoding` gzip and deflate are
  decoded as the reader reads (in bounded pieces, so a small compressed body cannot fill memory
  at once); any other encoding is refused as a protocol error, because the sidecar cannot read
  what it would forward;
- bounds: the socket is paused while more than `HIGH_WATER` bytes wait for the reader, and an
  answer's head (status line, headers, interim answers) may take `MAX_HEAD_BYTES` (llhttp
  itself limits neither a line nor the headers);
- timeouts: connecting (`connect_timeout_s`), and the gap between two reads of one reply
  (`read_timeout_s`, also the wait for its head);
- no redirects, cookies or proxies from the environment; a request is sent once, except an
  idempotent one (GET, DELETE, ...) that a kept-alive connection lost before any byte of its
  answer, which goes once more on a new connection (RFC 9112 9.3.1, as aiohttp did).

Failures are `UpstreamFailure`s with a cause (the runner's `UpstreamCause`); the pool raises
them through its `failed` mapping, which `sidecar/proxy/upstream.py` sets to the provider-shaped
502/504 (`UpstreamError`).
"""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
import zlib
from collections import deque
from collections.abc import Callable, Mapping
from typing import Protocol, cast

import httptools
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from sidecar.exchange.filters import WhileAwaited
from sidecar.exchange.runner import UpstreamCause

KEEPALIVE_S = 15.0  # aiohttp's default keep-alive for idle client connections
MAX_IDLE_PER_ORIGIN = 256  # idle connections kept per origin; more are closed when released
HIGH_WATER = 256 * 1024  # body bytes waiting for the reader before the socket is paused
LOW_WATER = 64 * 1024  # ... and resumed
DECODED_PIECE = 256 * 1024  # the most decoded bytes one read returns from a compressed body
MAX_HEAD_BYTES = 64 * 1024  # an answer's status line and headers (aiohttp's limit: 8 KiB per line)
_NO_BODY_METHODS = frozenset({"HEAD"})
_NO_HEADERS: Mapping[str, str] = CIMultiDictProxy(CIMultiDict())  # a response's until its head is in
_LENGTH_METHODS = frozenset({"POST", "PUT", "PATCH"})  # a Content-Length even when empty
# Sent once more when a kept-alive connection is lost before any answer (RFC 9110 9.2.2).
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})


class UpstreamFailure(Exception):
    """The upstream could not be reached, or its answer could not be read."""

    def __init__(self, cause: UpstreamCause, detail: str) -> None:
        super().__init__(detail)
        self.cause = cause
        self.detail = detail


def _connect_failure(exc: OSError) -> UpstreamFailure:
    if isinstance(exc, TimeoutError):
        return UpstreamFailure(UpstreamCause.TIMEOUT, "TimeoutError")
    if isinstance(exc, ssl.SSLError):  # certificate errors included
        return UpstreamFailure(UpstreamCause.TLS, getattr(exc, "reason", None) or type(exc).__name__)
    if isinstance(exc, socket.gaierror):
        return UpstreamFailure(UpstreamCause.DNS, exc.strerror or type(exc).__name__)
    return UpstreamFailure(UpstreamCause.CONNECT, exc.strerror or type(exc).__name__)


class _Decoder(Protocol):
    def decompress(self, data: bytes, max_length: int = ..., /) -> bytes: ...

    @property
    def unconsumed_tail(self) -> bytes: ...

    @property
    def eof(self) -> bool: ...


def _decoder(encoding: str | None) -> _Decoder | None:
    """The decoder of a `Content-Encoding` (None: the body is plain); UpstreamFailure for one
    the sidecar cannot decode."""
    if encoding is None:
        return None
    name = encoding.strip().lower()
    if name in ("", "identity"):
        return None
    if name in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if name == "deflate":
        return _Deflate()
    raise UpstreamFailure(UpstreamCause.PROTOCOL, f"unsupported Content-Encoding {encoding!r}")


class _Deflate:
    """`deflate` as servers send it: zlib-wrapped (RFC 9110), or raw deflate (a common error
    that every HTTP client accepts); the first bytes tell which."""

    def __init__(self) -> None:
        self._inner: zlib._Decompress | None = None

    def decompress(self, data: bytes, max_length: int = 0, /) -> bytes:
        if self._inner is None:
            if not data:
                return b""
            wrapped = (data[0] & 0x0F) == 8 and len(data) > 1 and ((data[0] << 8) | data[1]) % 31 == 0
            self._inner = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        return self._inner.decompress(data, max_length)

    @property
    def unconsumed_tail(self) -> bytes:
        return self._inner.unconsumed_tail if self._inner is not None else b""

    @property
    def eof(self) -> bool:
        return self._inner is not None and self._inner.eof


class _Connection(asyncio.Protocol):
    """One upstream connection, reading one reply at a time into the response that owns it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        # llhttp's body callback is this list's `append`, called from C: no Python frame per
        # piece of body (a provider sends each SSE event as an HTTP chunk, and each chunk is a
        # piece). What one read of the socket brought goes to the response at once
        # (`_deliver_body`), after the read, or before the message's end is handled. The
        # benchmark's streamed Chat reply (64 chunks) fed in one read: 33 -> 21 us.
        self._body: list[bytes] = []
        self.on_body: Callable[[bytes], None] = self._body.append
        self.parser = httptools.HttpResponseParser(self)  # after `on_body`: it reads it once
        self.closed = False
        self.idle_since = 0.0
        self.response: Response | None = None
        self._paused = False

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not registered as asyncio.Transport: no isinstance check.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        response = self.response
        if response is None:  # bytes nobody asked for: the connection cannot be trusted again
            self.close()
            return
        response.last_read = self.loop.time()
        try:
            self.parser.feed_data(data)
            self._deliver_body()
        except httptools.HttpParserUpgrade:
            response.fail(UpstreamFailure(UpstreamCause.PROTOCOL, "the upstream switched protocols"))
            self.close()
            return
        except httptools.HttpParserError as exc:
            response.fail(UpstreamFailure(UpstreamCause.PROTOCOL, f"unparsable HTTP answer ({exc})"))
            self.close()
            return
        if not response.head_done:
            response.head_bytes += len(data)
            if response.head_bytes > MAX_HEAD_BYTES:  # llhttp itself bounds neither lines nor headers
                response.fail(UpstreamFailure(UpstreamCause.PROTOCOL, f"an answer head over {MAX_HEAD_BYTES} bytes"))
                self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        response = self.response
        if response is not None:
            response.connection_ended()

    # -- llhttp callbacks (httptools) --------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.response is not None:
            self.response.message_begun()

    def on_status(self, status: bytes) -> None:
        if self.response is not None:
            self.response.reason_bytes += status

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.response is not None and not self.response.head_done:
            self.response.raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self.response is not None:
            self.response.head_complete(self.parser.get_status_code(), self.parser.should_keep_alive())

    def _deliver_body(self) -> None:
        """The body pieces llhttp found since the last delivery, to the response, in one piece."""
        pieces = self._body
        if pieces:
            data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            pieces.clear()  # the same list: `on_body` is its `append`
            if self.response is not None:
                self.response.body_received(data)

    def on_message_complete(self) -> None:
        self._deliver_body()  # the body before its end
        if self.response is not None:
            self.response.message_complete()

    # -- flow control and life -----------------------------------------------------------------

    def reusable(self, now: float) -> bool:
        """Open, and idle for less than `KEEPALIVE_S` (kept in the pool since `idle_since`)."""
        return not self.closed and now - self.idle_since < KEEPALIVE_S

    def pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class Response:
    """An upstream reply being read: its status line and headers once `ClientPool.request`
    returns, its body by `chunk()` (or `read()`); release it (or use it as an async context
    manager) to give its connection back. Reads raise the pool's mapped failures."""

    def __init__(self, pool: ClientPool, connection: _Connection, origin: Origin, url: URL, method: str) -> None:
        self._pool = pool
        self._connection = connection
        self._origin = origin
        self._loop = connection.loop
        self.url = url
        self.status = 0
        self.reason: str | None = None
        self.headers: Mapping[str, str] = _NO_HEADERS
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.reason_bytes = b""
        self.head_done = False
        self.head_bytes = 0  # read before the head was complete (bounded: MAX_HEAD_BYTES)
        self.last_read = self._loop.time()
        self._no_body = method in _NO_BODY_METHODS
        self._interim = False  # a 1xx answer is being skipped
        self._keep_alive = False
        self._complete = False
        self._failure: UpstreamFailure | None = None
        self._decoder: _Decoder | None = None
        self._pending: deque[bytes] = deque()
        self._pending_size = 0
        self._bodied = False  # a byte of the body arrived
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._released = False

    # -- fed by the connection ---------------------------------------------------------------

    def head_complete(self, status: int, keep_alive: bool) -> None:
        if self.head_done:  # a second answer (see message_begun)
            return
        if 100 <= status < 200 and status != 101:  # an interim answer (100 Continue, 103 ...)
            self._interim = True
            self.raw_headers.clear()
            self.reason_bytes = b""
            return
        self.status = status
        self._keep_alive = keep_alive
        self.head_done = True
        self.reason = self.reason_bytes.decode("latin-1") or None
        headers: CIMultiDict[str] = CIMultiDict(
            [(name.decode("latin-1"), value.decode("utf-8", "surrogateescape")) for name, value in self.raw_headers]
        )
        self.headers = headers
        if status == 101:  # the sidecar never asks to switch protocols (Upgrade is hop-by-hop)
            self._fail_now(UpstreamFailure(UpstreamCause.PROTOCOL, "the upstream switched protocols"))
            return
        try:
            self._decoder = _decoder(headers.get("Content-Encoding"))
        except UpstreamFailure as failure:  # raised here, it would reach llhttp as a callback error
            self._fail_now(failure)
            return
        if self._no_body:  # llhttp cannot be told a HEAD answer has no body: stop reading here
            self._keep_alive = False
            self._complete = True
        self._wake()

    def body_received(self, data: bytes) -> None:
        if self._complete or self._failure is not None:
            return
        self._pending.append(data)
        self._pending_size += len(data)
        self._bodied = True
        if self._pending_size > HIGH_WATER:
            self._connection.pause()
        self._wake()

    def message_complete(self) -> None:
        if self._complete:
            return
        if self._interim:
            self._interim = False
            return
        self._complete = True
        self._wake()

    def connection_ended(self) -> None:
        if self._complete or self._failure is not None:
            return
        if self.head_done and self._framed_by_close():
            self._complete = True
            self._keep_alive = False
        else:
            self._failure = UpstreamFailure(UpstreamCause.DISCONNECTED, "ServerDisconnectedError")
        self._wake()

    def lost_unanswered(self) -> bool:
        """The connection ended before a byte of the answer arrived."""
        failure = self._failure
        return failure is not None and failure.cause is UpstreamCause.DISCONNECTED and self.head_bytes == 0

    def _fail_now(self, failure: UpstreamFailure) -> None:
        """A head the sidecar cannot read a body under: the reads raise, the connection goes."""
        self._failure = failure
        self._keep_alive = False
        self._connection.close()
        self._wake()

    def message_begun(self) -> None:
        if self.head_done:  # a second answer to one request: never trust the connection again
            self._keep_alive = False
            self._connection.close()

    def fail(self, failure: UpstreamFailure) -> None:
        if self._failure is None and not self._complete:
            self._failure = failure
        self._wake()

    def _framed_by_close(self) -> bool:
        """A body with neither a length nor chunks ends when the connection does."""
        headers = self.headers
        return "Content-Length" not in headers and "chunked" not in headers.get("Transfer-Encoding", "").lower()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        """Until the connection feeds something; UpstreamFailure(TIMEOUT) after the read timeout
        without a byte. One timer serves the whole reply: it is checked against the last read
        when it fires, rather than reset on every read or armed on every wait."""
        waiter = self._waiter = self._loop.create_future()
        if self._timer is None:
            self._timer = self._loop.call_at(self.last_read + self._pool.read_timeout_s, self._check_timeout)
        try:
            await waiter
        finally:
            self._waiter = None

    def _check_timeout(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done() or self._released:
            return  # not waiting: the next wait arms it again
        due = self.last_read + self._pool.read_timeout_s
        if self._loop.time() < due:  # bytes came meanwhile: wait the rest
            self._timer = self._loop.call_at(due, self._check_timeout)
            return
        self._failure = UpstreamFailure(UpstreamCause.TIMEOUT, "TimeoutError")
        self._connection.abort()
        waiter.set_result(None)

    # -- read by the caller ------------------------------------------------------------------

    async def _head(self) -> None:
        """Until the status line and headers are in; failures after them surface on reads."""
        while not self.head_done:
            if self._failure is not None:
                raise self._raised(self._failure)
            await self._wait()

    def ready(self) -> bool:
        """Whether `chunk()` has something to give without waiting: body bytes already read
        (typically in the same read as the head), the body's end, or a failure."""
        return bool(self._pending) or self._complete or self._failure is not None

    async def chunk(self) -> bytes:
        """The next bytes of the body as they arrive (decoded); b"" at its end."""
        while True:
            data = self._next_decoded()
            if data:
                return data
            if self._pending:
                continue  # a compressed piece that decoded to nothing (a header, a flush)
            if self._failure is not None:
                raise self._raised(self._failure)
            if self._complete:
                return self._finish_decoding()
            await self._wait()

    def _next_decoded(self) -> bytes:
        """Everything that waits, in one piece (the reader's loop then runs once per read of
        the socket, not once per HTTP chunk: providers send each SSE event as a chunk)."""
        pending = self._pending
        if not pending:
            return b""
        raw = pending.popleft() if len(pending) == 1 else self._joined()
        decoder = self._decoder
        if decoder is None:
            self._consumed(len(raw))
            return raw
        try:
            data = decoder.decompress(raw, DECODED_PIECE)
        except zlib.error as exc:
            self._failure = UpstreamFailure(UpstreamCause.PROTOCOL, f"undecodable body ({exc})")
            self._connection.abort()
            raise self._raised(self._failure) from None
        tail = decoder.unconsumed_tail
        if tail:
            pending.appendleft(tail)
        self._consumed(len(raw) - len(tail))
        return data

    def _joined(self) -> bytes:
        pending = self._pending
        raw = b"".join(pending)
        pending.clear()
        return raw

    def _consumed(self, size: int) -> None:
        self._pending_size -= size
        if self._pending_size < LOW_WATER:
            self._connection.resume()

    def _finish_decoding(self) -> bytes:
        decoder = self._decoder
        if decoder is None or decoder.eof or not self._bodied:  # no body at all is not a cut one
            return b""
        # A compressed body that ended before its stream did: truncated, as aiohttp reads it.
        self._failure = UpstreamFailure(UpstreamCause.PROTOCOL, "compressed body ended early")
        raise self._raised(self._failure)

    def _raised(self, failure: UpstreamFailure) -> Exception:
        return self._pool.failed(failure, self.url)

    async def read(self) -> bytes:
        """The whole body (decoded)."""
        parts = []
        while data := await self.chunk():
            parts.append(data)
        return b"".join(parts)

    def release(self) -> None:
        """Give the connection back: kept alive if the reply was read whole, else closed."""
        if self._released:
            return
        self._released = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        connection = self._connection
        connection.response = None
        reusable = self._complete and self._keep_alive and self._failure is None and not self._pending
        if reusable and not connection.closed:
            self._pool.put_back(self._origin, connection)
        else:
            connection.close()

    async def __aenter__(self) -> Response:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self.release()


class Opened:
    """`async with pool.opened(...) as response`: the request sent on entry, the response
    released on exit (a plain class: cheaper per request than a generator-based manager)."""

    __slots__ = ("_pool", "_request", "_response", "_sent")

    def __init__(
        self,
        pool: ClientPool,
        method: str,
        url: URL,
        headers: Mapping[str, str],
        body: bytes,
        sent: WhileAwaited | None = None,
    ) -> None:
        self._pool = pool
        self._request = (method, url, headers, body)
        self._sent = sent
        self._response: Response | None = None

    async def __aenter__(self) -> Response:
        self._response = await self._pool.request(*self._request, sent=self._sent)
        return self._response

    async def __aexit__(self, *_exc: object) -> None:
        if self._response is not None:
            self._response.release()


def _has_accept(headers: Mapping[str, str]) -> bool:
    if isinstance(headers, (CIMultiDict, CIMultiDictProxy)):  # the proxy's: looked up in C
        return "Accept" in headers
    return any(name.lower() == "accept" for name in headers)


Origin = tuple[str, str, int]  # scheme, host, port: what a kept-alive connection can serve


def _origin(url: URL) -> Origin:
    return (url.scheme, url.raw_host or "", url.port or 0)


def _default_tls() -> ssl.SSLContext:
    return ssl.create_default_context()


FailureMapper = Callable[[UpstreamFailure, URL], Exception]


def _as_is(failure: UpstreamFailure, _url: URL) -> Exception:
    return failure


class ClientPool:
    """Kept-alive connections to the upstreams, and the requests written on them.

    `failed` turns a failure into the exception the caller's code expects (the proxy's is its
    provider-shaped UpstreamError); it is raised from `request` and from every read."""

    def __init__(
        self,
        read_timeout_s: float,
        connect_timeout_s: float,
        failed: FailureMapper = _as_is,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.failed = failed
        self.read_timeout_s = read_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._tls = tls
        self._idle: dict[Origin, list[_Connection]] = {}
        self._expiry: asyncio.TimerHandle | None = None  # the next sweep of idle connections
        self._heads: dict[str, bytes] = {}  # the Host line (and credentials) per URL authority
        self._closed = False

    async def request(
        self, method: str, url: URL, headers: Mapping[str, str], body: bytes, sent: WhileAwaited | None = None
    ) -> Response:
        """Write the request and wait for the reply's head; the caller owns (and must release)
        the response. Raises the mapped failure when there is no answer.

        `sent`: awaited once, after the request is written and before its answer is read
        (work that need not delay the request, done while the upstream works on it).

        An idempotent request (RFC 9110 9.2.2) that a kept-alive connection lost before a byte
        of its answer came is sent once more on a new connection (RFC 9112 9.3.1): the server
        may have closed the idle connection as it was reused. Others are never sent twice (as
        aiohttp did: a model request may have been read)."""
        if self._closed:
            raise self.failed(UpstreamFailure(UpstreamCause.CONNECT, "the client is closed"), url)
        origin = _origin(url)
        try:
            head = self._head(method, url, headers, body)
            connection, reused = await self._acquire(origin, url)
        except UpstreamFailure as failure:
            raise self.failed(failure, url) from failure
        while True:
            response = self._send(connection, origin, url, method, head, body)
            try:
                if sent is not None:
                    while_awaited, sent = sent, None  # once: not again for a second attempt
                    await while_awaited()
                await response._head()
            except BaseException:
                response.release()
                if not (reused and method in IDEMPOTENT_METHODS and response.lost_unanswered()):
                    raise
            else:
                return response
            reused = False  # the second attempt is on a new connection, and the last
            try:
                connection = await self._connect(url)
            except UpstreamFailure as failure:
                raise self.failed(failure, url) from failure

    def _send(
        self, connection: _Connection, origin: Origin, url: URL, method: str, head: bytes, body: bytes
    ) -> Response:
        response = Response(self, connection, origin, url, method)
        connection.response = response
        transport = connection.transport
        assert transport is not None
        if body:
            transport.writelines((head, body))
        else:
            transport.write(head)
        return response

    def opened(
        self, method: str, url: URL, headers: Mapping[str, str], body: bytes, sent: WhileAwaited | None = None
    ) -> Opened:
        """The request as an async context manager that releases its response."""
        return Opened(self, method, url, headers, body, sent)

    def _head(self, method: str, url: URL, headers: Mapping[str, str], body: bytes) -> bytes:
        authority = url.raw_authority  # the credentials too: they make the Authorization line
        own = self._heads.get(authority)
        if own is None:
            own = self._heads[authority] = self._own_lines(url)
        fields = "".join([f"{name}: {value}\r\n" for name, value in headers.items()])
        count = len(headers)
        if fields.count("\n") != count or fields.count("\r") != count:  # a CR or LF in a name or value
            raise UpstreamFailure(UpstreamCause.PROTOCOL, "a header with a line break cannot be written")
        if not _has_accept(headers):
            fields += "Accept: */*\r\n"
        if body or method in _LENGTH_METHODS:
            fields += f"Content-Length: {len(body)}\r\n"
        request_line = f"{method} {url.raw_path_qs or '/'} HTTP/1.1\r\n".encode("utf-8", "surrogateescape")
        return request_line + own + fields.encode("utf-8", "surrogateescape") + b"\r\n"

    @staticmethod
    def _own_lines(url: URL) -> bytes:
        host = url.host_port_subcomponent or url.raw_host or ""
        own = f"Host: {host}\r\n"
        if url.user is not None:  # credentials in a configured base URL: Basic auth, as aiohttp did
            token = base64.b64encode(f"{url.user}:{url.password or ''}".encode()).decode("ascii")
            own += f"Authorization: Basic {token}\r\n"
        return own.encode("ascii")  # yarl keeps an international name in its IDNA form

    async def _acquire(self, origin: Origin, url: URL) -> tuple[_Connection, bool]:
        """A kept-alive connection (True) or a new one (False)."""
        idle = self._idle.get(origin)
        if idle:
            now = asyncio.get_running_loop().time()
            while idle:
                connection = idle.pop()
                if connection.reusable(now):
                    return connection, True
                connection.close()
        return await self._connect(url), False

    async def _connect(self, url: URL) -> _Connection:
        loop = asyncio.get_running_loop()
        secure = url.scheme == "https"
        host = url.raw_host or ""
        port = url.port or (443 if secure else 80)
        tls: ssl.SSLContext | None = None
        if secure:
            if self._tls is None:
                self._tls = _default_tls()
            tls = self._tls
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _transport, connection = await loop.create_connection(
                    lambda: _Connection(loop), host.strip("[]"), port, ssl=tls, server_hostname=host if secure else None
                )
        except OSError as exc:  # TimeoutError and ssl.SSLError are OSErrors
            raise _connect_failure(exc) from exc
        return connection

    def put_back(self, origin: Origin, connection: _Connection) -> None:
        if self._closed:
            connection.close()
            return
        idle = self._idle.setdefault(origin, [])
        if len(idle) >= MAX_IDLE_PER_ORIGIN:
            connection.close()
            return
        connection.idle_since = connection.loop.time()
        idle.append(connection)
        if self._expiry is None:
            self._expiry = connection.loop.call_later(KEEPALIVE_S, self._expire)

    def _expire(self) -> None:
        """Close the connections idle for `KEEPALIVE_S`: an upstream that never closes one would
        otherwise keep its socket open for as long as no request needs it."""
        self._expiry = None
        loop = asyncio.get_running_loop()
        now, due = loop.time(), None
        for origin, idle in list(self._idle.items()):
            kept = []
            for connection in idle:
                if not connection.reusable(now):
                    connection.close()
                    continue
                kept.append(connection)
                expires = connection.idle_since + KEEPALIVE_S
                due = expires if due is None else min(due, expires)
            if kept:
                self._idle[origin] = kept
            else:
                del self._idle[origin]
        if due is not None:
            self._expiry = loop.call_at(due, self._expire)

    async def close(self) -> None:
        self._closed = True
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()
