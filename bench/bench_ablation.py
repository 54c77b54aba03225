"""Where the sidecar's CPU per request goes: each part taken away in turn, under load.

A sampling profile spreads a request's cost over hundreds of frames, and a loop that runs
one part alone (bench_policy.py, bench_validation.py) runs it with warm caches, which the
proxy under load never has: between two calls of a part, a request's other work (and other
requests') evicted its code and data. This benchmark measures what removing a part saves
where it runs: one `sidecar run` with everything on ("full") and one per part with that part's
hooks made no-ops (proxybench/ablated.py), all in front of the same mock, loaded in turn by a
closed loop at c=64 for several rounds (drift hits all alike), CPU per request read from
/proc. The difference to "full" is the part's marginal cost, warm-cache effects included; the
differences need not add up to the whole (parts share caches and the loop's work).

Run: .venv/bin/python bench/bench_ablation.py [--api anthropic|chat] [--stream] [--rounds 3]
     [--seconds 5] [--concurrency 64] [--only cost,call_policy] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson
from proxybench.ablated import ABLATIONS
from proxybench.alternated import alternated
from proxybench.bodies import Api

FULL = "full"


@dataclass(slots=True)
class Part:
    """One sidecar's runs: CPU per request and requests per second of each round."""

    name: str
    what: str
    cpu_us: list[float] = field(default_factory=list)
    rps: list[float] = field(default_factory=list)
    errors: int = 0

    @property
    def cpu_median_us(self) -> float:
        return statistics.median(self.cpu_us) if self.cpu_us else float("nan")


def launcher(name: str) -> list[str]:
    return [sys.executable, "-m", "proxybench.ablated", "--without", name]


async def measure(
    api: Api, stream: bool, names: list[str], rounds: int, seconds: float, concurrency: int
) -> list[Part]:
    commands = [None, *(launcher(name) for name in names)]
    measured = await alternated(commands, api, stream, rounds, seconds, concurrency, prefix="bench-ablation-")
    parts = [Part(FULL, "everything on")] + [Part(name, ABLATIONS[name].what) for name in names]
    for part, runs in zip(parts, measured, strict=True):
        part.cpu_us, part.rps, part.errors = runs.cpu_us, runs.rps, runs.errors
    return parts


def report(parts: list[Part], title: str) -> str:
    full = parts[0].cpu_median_us
    lines = [
        title,
        f"{'without':<15} {'CPU µs/req':>11} {'saves µs':>9} {'of full':>8} {'req/s':>7}  rounds (CPU µs/req)",
    ]
    for part in parts:
        saves = full - part.cpu_median_us
        shown = "" if part.name == FULL else f"{saves:9.0f} {100 * saves / full:7.1f}%"
        rounds = ", ".join(f"{x:.0f}" for x in part.cpu_us)
        errors = f"  {part.errors} failed requests" if part.errors else ""
        rps = statistics.median(part.rps)
        lines.append(f"{part.name:<15} {part.cpu_median_us:11.0f} {shown:>18} {rps:7.0f}  {rounds}{errors}")
    lines += ["", *(f"  {part.name}: {part.what}" for part in parts[1:])]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--api", choices=[a.name.lower() for a in Api], default="anthropic")
    parser.add_argument("--stream", action="store_true", help="streamed replies (default: whole)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="per target and round")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--only", default=",".join(ABLATIONS), help="comma-separated parts to take away")
    parser.add_argument("--json", type=Path, help="also write the runs here")
    args = parser.parse_args()
    names = [name for name in args.only.split(",") if name]
    unknown = [name for name in names if name not in ABLATIONS]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; known: {', '.join(ABLATIONS)}")
    api = Api[args.api.upper()]
    parts = asyncio.run(measure(api, args.stream, names, args.rounds, args.seconds, args.concurrency))
    mode = "streamed" if args.stream else "whole"
    print(report(parts, f"{api.name.lower()} {mode}, c={args.concurrency}, {args.rounds} rounds of {args.seconds:g} s"))
    if args.json:
        args.json.write_bytes(orjson.dumps([asdict(p) for p in parts], option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
