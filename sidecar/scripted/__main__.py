"""`python -m sidecar.scripted --listen 127.0.0.1:8000 --script FILE.json [--loop]`.

Runs the scripted model as a standalone process, e.g. as the upstream of a sidecar under
manual test or in a container demo.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence

from sidecar.scripted.script import Turn, load_script
from sidecar.scripted.server import ScriptedModel


def parse_listen(value: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 as `[::1]:PORT`) into its parts."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sidecar.scripted", description="Scripted stand-in for the Anthropic and OpenAI model APIs."
    )
    parser.add_argument(
        "--listen",
        type=parse_listen,
        default=("127.0.0.1", 8000),
        metavar="HOST:PORT",
        help="address to listen on (default %(default)s)",
    )
    parser.add_argument(
        "--script", metavar="FILE.json", help="JSON list of turns; without it every answer is the exhausted text"
    )
    parser.add_argument("--loop", action="store_true", help="cycle the script forever")
    parser.add_argument("--seed", type=int, help="seed the ids for reproducible output")
    return parser


async def serve(model: ScriptedModel, host: str, port: int) -> None:
    """Run until SIGINT/SIGTERM."""
    url = await model.start(host, port)
    print(f"scripted model listening on {url}", flush=True)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stopped.set)
    try:
        await stopped.wait()
    finally:
        await model.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    turns: list[Turn] = load_script(args.script) if args.script else []
    host, port = args.listen
    model = ScriptedModel(turns, loop=args.loop, seed=args.seed)
    asyncio.run(serve(model, host, port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
