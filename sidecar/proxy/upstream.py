"""The one aiohttp client session the sidecar uses to reach its configured upstreams."""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp
from yarl import URL

from sidecar.model import Provider


class UpstreamError(Exception):
    """The upstream could not be reached or did not answer in time."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


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
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, enable_cleanup_closed=True)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            auto_decompress=True,
            skip_auto_headers=("User-Agent", "Content-Type"),
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
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise UpstreamError(504, f"upstream {url.origin()} timed out") from exc
        except aiohttp.ClientError as exc:
            raise UpstreamError(502, f"upstream {url.origin()} is unreachable: {type(exc).__name__}") from exc
        except OSError as exc:
            raise UpstreamError(502, f"upstream {url.origin()} is unreachable: {exc.strerror or exc}") from exc
