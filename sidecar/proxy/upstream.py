"""The one client the sidecar uses to reach its configured upstreams (model providers and MCP
servers), and how its failures reach the agent: a provider-shaped 502 or 504 naming the cause.

The client itself is `sidecar/proxy/http_client.py`."""

from __future__ import annotations

from collections.abc import Mapping

from yarl import URL

from sidecar.exchange.filters import WhileAwaited
from sidecar.exchange.runner import UpstreamCause, UpstreamError
from sidecar.model import Provider
from sidecar.proxy.http_client import ClientPool, Opened, Response, UpstreamFailure

_PHRASES = {
    UpstreamCause.DNS: "could not be resolved",
    UpstreamCause.CONNECT: "is unreachable",
    UpstreamCause.TLS: "failed the TLS handshake",
    UpstreamCause.TIMEOUT: "timed out",
    UpstreamCause.DISCONNECTED: "closed the connection",
    UpstreamCause.PROTOCOL: "sent an invalid answer",
}


def upstream_error(failure: UpstreamFailure, url: URL) -> UpstreamError:
    """A provider-shaped status (504 for timeouts, else 502) and a message naming the cause."""
    status = 504 if failure.cause is UpstreamCause.TIMEOUT else 502
    return UpstreamError(status, f"upstream {url.origin()} {_PHRASES[failure.cause]} ({failure.detail})", failure.cause)


class Upstreams:
    def __init__(
        self,
        bases: Mapping[Provider, str],
        read_timeout_s: float,
        connect_timeout_s: float,
    ) -> None:
        self.bases = {provider: URL(base) for provider, base in bases.items()}
        self._read_timeout_s = read_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._pool: ClientPool | None = None

    async def start(self) -> None:
        self._pool = ClientPool(self._read_timeout_s, self._connect_timeout_s, failed=upstream_error)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()

    async def open(self, method: str, url: URL, headers: Mapping[str, str], body: bytes) -> Response:
        """Send the request; the caller owns (and must release) the response. Raises
        UpstreamError, as do the response's reads."""
        assert self._pool is not None, "Upstreams.start() was not awaited"
        return await self._pool.request(method, url, headers, body)

    def opened(
        self, method: str, url: URL, headers: Mapping[str, str], body: bytes, sent: WhileAwaited | None = None
    ) -> Opened:
        """`async with upstreams.opened(...) as response`: sent on entry, released on exit;
        `sent` is awaited once the request is written (`ClientPool.request`)."""
        assert self._pool is not None, "Upstreams.start() was not awaited"
        return self._pool.opened(method, url, headers, body, sent)
