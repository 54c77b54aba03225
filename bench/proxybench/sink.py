"""A loopback OTLP/HTTP receiver that accepts and drops everything (`/v1/traces`,
`/v1/metrics`, `/v1/logs`): the sidecar's export cost is measured without a collector's."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable

from aiohttp import web

from proxybench.serve import Handler, nothing, run_main


async def accept(request: web.BaseRequest) -> web.StreamResponse:
    await request.read()
    return web.Response(body=b"", content_type="application/x-protobuf")


async def make(_args: argparse.Namespace) -> tuple[Handler, Callable[[], Awaitable[None]]]:
    return accept, nothing


if __name__ == "__main__":
    run_main(__doc__.splitlines()[0] if __doc__ else "OTLP sink", make)
