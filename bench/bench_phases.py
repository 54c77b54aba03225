"""Where one request's latency goes inside the sidecar: the median time, from the moment the
handler starts, at which an exchange reaches each phase of its path, at c=1.

`bench/run.py` and the shared harness say how much latency the sidecar adds; a profile
(bench_profile.py) and the ablations (bench_ablation.py, bench_instructions.py) say where its
CPU goes under load. Neither says which part of one request's path the agent waits for: the
request's filters before it goes upstream, the upstream itself, the reply's checks, the
writing of the answer, and for a stream, the time to its first bytes (issue 16's "first byte"
target). Here one `sidecar run` notes the time of each phase of every exchange
(proxybench/phased.py wraps the methods that end them), in front of the mock provider, under a
closed loop of one connection; the table gives each phase's median time since the start and
the median step from the phase before (medians of the steps, so they need not add up).

What "start" misses: aiohttp reading the request's head before it calls the handler, and the
kernel's delivery both ways; the added latency the harness measures is larger by those. The
step to `answer` holds the mock's own time (and a closed-loop client's turn when the
sidecar is busy elsewhere, which at c=1 it is not).

Run: .venv/bin/python bench/bench_phases.py [--requests 2000]
     [--scenarios anthropic_whole,anthropic_streamed,chat_whole,chat_streamed] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson
from proxybench.load import Request, closed_loop
from proxybench.phased import END, PHASES
from proxybench.report import SCENARIOS, Scenario
from proxybench.targets import mock_and_sidecar

WARMUP = 200
# The phases in path order, then the handler's return.
ORDER = [*(phase.name for phase in PHASES), END]
WHAT = {phase.name: phase.what for phase in PHASES} | {END: "the handler returns (after-work hooks ran)"}


@dataclass(frozen=True, slots=True)
class Row:
    phase: str
    exchanges: int  # how many exchanges reached it
    since_start_us: float  # median
    step_us: float  # median of the time from the phase before (the start for the first)


def rows(noted: list[dict[str, float]]) -> list[Row]:
    """Each phase that some exchange reached, in path order, with its medians."""
    out: list[Row] = []
    for name in ORDER:
        reached = [marks for marks in noted if name in marks]
        if not reached:
            continue
        steps = [marks[name] - _before(marks, name) for marks in reached]
        out.append(
            Row(name, len(reached), statistics.median(m[name] for m in reached) * 1e6, statistics.median(steps) * 1e6)
        )
    return out


def _before(marks: dict[str, float], name: str) -> float:
    """The time of the last phase before `name` that this exchange reached (0: the start)."""
    earlier = [marks[other] for other in ORDER[: ORDER.index(name)] if other in marks]
    return max(earlier, default=0.0)


def table(scenario: Scenario, found: list[Row]) -> str:
    exchanges = max((row.exchanges for row in found), default=0)
    lines = [
        f"{scenario.label}: {exchanges} exchanges at c=1 (median µs since the handler started)",
        f"  {'phase':<14}{'since start':>12}{'step':>9}  what",
    ]
    for row in found:
        lines.append(f"  {row.phase:<14}{row.since_start_us:12.1f}{row.step_us:9.1f}  {WHAT[row.phase]}")
    return "\n".join(lines)


async def measure(scenario: Scenario, requests: int) -> list[Row]:
    """One phased sidecar in front of the mock, `requests` at c=1 after a warm-up; its notes
    are read once it stopped (the warm-up's are left out)."""
    request = Request.benchmark(scenario.api, scenario.stream)
    with tempfile.TemporaryDirectory(prefix="bench-phases-") as tmp:
        out = Path(tmp) / "phases.json"
        command = [sys.executable, "-m", "proxybench.phased", "--phases-out", str(out)]
        async with mock_and_sidecar("bench-phases-", "builtin", command=command) as (_, sidecar):
            series = await closed_loop(sidecar.url + scenario.api.value, request, 1, requests, 600, WARMUP, lambda: 0.0)
            if series.errors:
                raise RuntimeError(f"{series.errors} of {requests} requests failed:\n{sidecar.log_tail()}")
        # Read once the sidecar stopped: it writes its notes then.
        noted: list[dict[str, float]] = orjson.loads(out.read_bytes())
    return rows(noted[-requests:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--scenarios", default=",".join(s.key for s in SCENARIOS))
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args()
    known = {s.key: s for s in SCENARIOS}
    wanted = [name for name in args.scenarios.split(",") if name]
    unknown = [name for name in wanted if name not in known]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(known)}")
    found: dict[str, list[Row]] = {}
    for name in wanted:
        found[name] = asyncio.run(measure(known[name], args.requests))
        print(table(known[name], found[name]), flush=True)
    if args.json:
        as_json = {name: [asdict(row) for row in found_rows] for name, found_rows in found.items()}
        Path(args.json).write_bytes(orjson.dumps(as_json, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
