"""Shared plumbing of the benchmark's small servers: aiohttp's low-level server on a loopback
port, run until SIGTERM/SIGINT, under uvloop when installed (each server is its own process)."""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Awaitable, Callable

from aiohttp import web

Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


async def start_server(handler: Handler, host: str = "127.0.0.1", port: int = 0) -> tuple[web.ServerRunner, str]:
    """Serve `handler` on host:port (0: a free port); returns the runner and the base URL."""
    runner = web.ServerRunner(web.Server(handler, access_log=None), shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner, f"http://{host}:{runner.addresses[0][1]}"


async def _serve_until_signal(
    make: Callable[[], Awaitable[tuple[Handler, Callable[[], Awaitable[None]]]]], port: int
) -> None:
    handler, close = await make()
    runner, _url = await start_server(handler, port=port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await close()


def run_main(
    description: str,
    make: Callable[[argparse.Namespace], Awaitable[tuple[Handler, Callable[[], Awaitable[None]]]]],
    add_arguments: Callable[[argparse.ArgumentParser], None] = lambda _parser: None,
) -> None:
    """The `python -m proxybench.X --port N` entry point of every server process."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--port", type=int, required=True, help="loopback port to listen on")
    add_arguments(parser)
    args = parser.parse_args()

    async def main() -> None:
        await _serve_until_signal(lambda: make(args), args.port)

    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(main())
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())


async def nothing() -> None:
    """A server with nothing to close."""
