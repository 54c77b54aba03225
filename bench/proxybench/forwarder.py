"""A bare aiohttp pass-through forwarder: the floor for a Python proxy.

Low-level `aiohttp.web.Server` (no router, no middleware) and one shared `ClientSession` with
keep-alive to the upstream. It reads the request body, forwards method, path, query and the
end-to-end headers, and streams the reply back as it arrives; it parses nothing. Whatever the
sidecar adds beyond this is the sidecar's own work, not aiohttp's or Python's.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import hdrs, web
from multidict import CIMultiDict, CIMultiDictProxy

from proxybench.serve import Handler, run_main

# Hop-by-hop headers (RFC 9110 §7.6.1) and the ones the forwarder's own framing rewrites.
_NOT_FORWARDED = frozenset(
    h.lower()
    for h in (
        hdrs.CONNECTION,
        hdrs.KEEP_ALIVE,
        hdrs.PROXY_AUTHENTICATE,
        hdrs.PROXY_AUTHORIZATION,
        hdrs.TE,
        hdrs.TRAILER,
        hdrs.TRANSFER_ENCODING,
        hdrs.UPGRADE,
        hdrs.HOST,
        hdrs.CONTENT_LENGTH,
        hdrs.DATE,
        hdrs.SERVER,
    )
)


def _end_to_end(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in _NOT_FORWARDED)


class Forwarder:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        # auto_decompress off: bytes go through as the upstream encoded them.
        self.client = aiohttp.ClientSession(auto_decompress=False, skip_auto_headers=("User-Agent",))

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        body = await request.read()
        async with self.client.request(
            request.method, self.upstream + request.path_qs, data=body, headers=_end_to_end(request.headers)
        ) as answer:
            response = web.StreamResponse(
                status=answer.status, reason=answer.reason, headers=_end_to_end(answer.headers)
            )
            if answer.content_length is not None:
                response.content_length = answer.content_length
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    async def close(self) -> None:
        await self.client.close()


async def make(args: argparse.Namespace) -> tuple[Handler, Callable[[], Awaitable[None]]]:
    forwarder = Forwarder(args.upstream)
    return forwarder.handle, forwarder.close


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--upstream", required=True, help="base URL the requests go to")


if __name__ == "__main__":
    run_main(__doc__.splitlines()[0] if __doc__ else "forwarder", make, _arguments)
