"""Small stand-in servers for tests: a handler or an app on a free loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def serve(target: Handler | web.Application) -> AsyncIterator[str]:
    """Serve `target` (an app, or one handler for every method and path); yields the base URL."""
    if isinstance(target, web.Application):
        app = target
    else:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", target)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def sse_response(request: web.Request, events: bytes) -> web.StreamResponse:
    """Stream SSE `events` one event per write, as a provider does."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for event in events.split(b"\n\n")[:-1]:
        await response.write(event + b"\n\n")
    await response.write_eof()
    return response
