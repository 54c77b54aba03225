"""The one aiohttp client session the sidecar uses to reach its configured upstreams."""

from __future__ import annotations

import functools
from collections.abc import Mapping

import aiohttp
from aiohttp.client_proto import ResponseHandler
from yarl import URL

from sidecar.exchange.runner import UpstreamCause, UpstreamError
from sidecar.model import Provider


def classify(exc: BaseException) -> UpstreamCause:
    """The cause of a client-side failure, most specific first."""
    if isinstance(exc, (TimeoutError, aiohttp.ServerTimeoutError)):
        return UpstreamCause.TIMEOUT
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return UpstreamCause.DNS
    if isinstance(exc, aiohttp.ClientSSLError):
        return UpstreamCause.TLS
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return UpstreamCause.DISCONNECTED
    if isinstance(exc, (aiohttp.ClientPayloadError, aiohttp.ClientResponseError)):
        return UpstreamCause.PROTOCOL
    return UpstreamCause.CONNECT


_PHRASES = {
    UpstreamCause.DNS: "could not be resolved",
    UpstreamCause.CONNECT: "is unreachable",
    UpstreamCause.TLS: "failed the TLS handshake",
    UpstreamCause.TIMEOUT: "timed out",
    UpstreamCause.DISCONNECTED: "closed the connection",
    UpstreamCause.PROTOCOL: "sent an invalid answer",
}


def upstream_error(exc: BaseException, upstream: str) -> UpstreamError:
    """A provider-shaped status (504 for timeouts, else 502) and a message naming the cause."""
    cause = classify(exc)
    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
    status = 504 if cause is UpstreamCause.TIMEOUT else 502
    return UpstreamError(status, f"upstream {upstream} {_PHRASES[cause]} ({detail})", cause)


class _ChunkedReplyHandler(ResponseHandler):
    """aiohttp's client protocol, minus one call per HTTP chunk that does nothing.

    Providers stream each SSE event as its own HTTP chunk. aiohttp (3.14) asks the protocol
    to resume reading after every chunk the reader takes, whether or not reading was paused,
    and each such resume feeds the parser an empty read: 68 of them for the benchmark's
    streamed reply, one Python round trip each. A resume while nothing is paused has nothing
    to resume (no parser state waits for it: only a pause leaves some), so it is skipped here;
    a resume after a real pause (a slow agent, a large decompressed body) runs unchanged. The
    flags read are aiohttp's own; where a version has neither, every resume runs as usual.
    Counted with bench/bench_instructions.py (200 requests, c=8): 3.3% fewer instructions per
    streamed Anthropic reply, 2.5% per streamed Chat reply."""

    def resume_reading(self, resume_parser: bool = True) -> None:
        if getattr(self, "_reading_paused", True) or getattr(self, "_buffer_paused", True):
            super().resume_reading(resume_parser)


def _connector() -> aiohttp.TCPConnector:
    """The upstream pool: no connection limit (the agents bound concurrency), DNS cached."""
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, enable_cleanup_closed=True)
    stock = getattr(connector, "_factory", None)
    if isinstance(stock, functools.partial) and stock.func is ResponseHandler:
        handler: type[ResponseHandler] = _ChunkedReplyHandler
        connector._factory = functools.partial(handler, *stock.args, **stock.keywords)
    return connector


class Upstreams:
    def __init__(
        self,
        bases: Mapping[Provider, str],
        read_timeout_s: float,
        connect_timeout_s: float,
    ) -> None:
        self.bases = {provider: URL(base) for provider, base in bases.items()}
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = _connector()
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            auto_decompress=True,
            skip_auto_headers=("User-Agent", "Content-Type"),
            # No cookies kept: this one client serves every agent, so a cookie the provider set
            # on one agent's answer would ride on the others' requests. Each agent's own
            # Cookie and Set-Cookie headers pass through as they are.
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,  # never route through a proxy named by the environment
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def open(self, method: str, url: URL, headers: Mapping[str, str], body: bytes) -> aiohttp.ClientResponse:
        """Send the request; the caller owns (and must release) the response."""
        assert self._session is not None, "Upstreams.start() was not awaited"
        try:
            return await self._session.request(method, url, headers=headers, data=body or None, allow_redirects=False)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise upstream_error(exc, str(url.origin())) from exc
