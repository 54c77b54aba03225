"""The same sidecar code on several Python interpreters: CPU per request of each, alternated.

How the interpreter was built moves the sidecar's CPU per request as much as a round of code
changes: a build with profile-guided optimisation and link-time optimisation (the official
Docker images', Debian's /usr/bin/python3) runs the same Python faster than one configured
without them (pyenv's default). bench/run.py measures whichever interpreter runs it; this
script puts several side by side, each a `sidecar run` in front of the same mock, loaded in turn
at c=64 for several rounds (drift hits all alike), CPU per request read from /proc.

Each interpreter needs its own environment with the project installed, for example:

    /usr/bin/python3 -m venv /tmp/venv-debian && /tmp/venv-debian/bin/pip install -e .

Run: .venv/bin/python bench/bench_interpreters.py .venv/bin/sidecar /tmp/venv-debian/bin/sidecar
     [--api anthropic|chat] [--stream] [--rounds 3] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
from pathlib import Path

from proxybench.alternated import alternated
from proxybench.bodies import Api

CONCURRENCY = 64


def interpreter_of(script: Path) -> str:
    """The interpreter a console script runs on: its `#!` line, symlinks resolved."""
    first = script.read_text(errors="replace").splitlines()[0] if script.exists() else ""
    return os.path.realpath(first[2:].strip()) if first.startswith("#!") else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sidecars", nargs="+", type=Path, help="`sidecar` console scripts, one per interpreter")
    parser.add_argument("--api", choices=[a.name.lower() for a in Api], default="anthropic")
    parser.add_argument("--stream", action="store_true", help="streamed replies (default: whole)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="per sidecar and round")
    args = parser.parse_args()
    api = Api[args.api.upper()]
    missing = [str(script) for script in args.sidecars if not script.is_file()]
    if missing:
        parser.error(f"no such sidecar script: {', '.join(missing)}")
    # Absolute: the sidecars are started in a working directory of their own.
    commands = [[str(script.resolve())] for script in args.sidecars]
    measured = asyncio.run(
        alternated(commands, api, args.stream, args.rounds, args.seconds, CONCURRENCY, prefix="bench-interpreters-")
    )
    first = statistics.median(measured[0].cpu_us)
    print(f"{api.name.title()} {'streamed' if args.stream else 'whole'}, c={CONCURRENCY}, CPU µs per request")
    for script, runs in zip(args.sidecars, measured, strict=True):
        median = statistics.median(runs.cpu_us)
        failed = f"  {runs.errors} failed requests" if runs.errors else ""
        print(
            f"{median:7.0f}  {100 * (median - first) / first:+6.1f}%  {interpreter_of(script)}"
            f"  (rounds: {', '.join(f'{x:.0f}' for x in runs.cpu_us)}){failed}"
        )


if __name__ == "__main__":
    main()
