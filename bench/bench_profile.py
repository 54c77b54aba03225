"""Where a loaded sidecar spends its CPU: a py-spy sampling profile of one `sidecar run` under
the benchmark's closed loop, printed as the functions with the most samples of their own and
the most samples in all (the function and what it calls).

Run: .venv/bin/python bench/bench_profile.py [--api anthropic|chat] [--stream] [--concurrency 64]
     [--seconds 12] [--rate 400] [--top 15] [--raw FILE] [--blocking]

Needs py-spy (`pip install py-spy`, installed with the `test` extra) and the right to read
another process's memory (root, or CAP_SYS_PTRACE). The sidecar runs as in the other
benchmarks (proxybench/targets.py: the shipped policy library, the mock's two tools
read-only, memory state), in front of the mock provider; the load warms it up first, then
py-spy samples it for `--seconds` while the loop goes on.

py-spy's `--nonblocking` mode is the default here. Its default mode stops the process for
every sample, and on this project's benchmark machine that stop lands on one cheap system
call far more often than the call's share of the time: at c=64, whole Anthropic replies,
`LineWriter._hold` (whose only notable work is asyncio's running-loop check, a `getpid` of
0.1 µs) had 1.3-4.7% of the own samples with stops (runs on two days), 0.1% or less without
(two runs), same load. Without stops py-spy reads a stack while it changes, and many stacks
come out cut short (the report says how many reached the event loop's entry; about half at
c=64): so "in all" shares are a lower bound, and the own shares (the innermost frame) are the
better guide. `--blocking` samples the other way: whole stacks, for the "in all" view, with the
stops' bias in the own view.

A profile says where time goes, not what taking a part away would save: bench_ablation.py
measures that.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from proxybench.bodies import Api
from proxybench.load import Request, Series, closed_loop
from proxybench.targets import mock_and_sidecar

# `function (path/to/file.py:LINE)`: the path shortened to what follows site-packages/ or the
# repository, the line dropped (a function's samples are added up over its lines).
_FRAME = re.compile(r"^(?P<function>.*) \((?P<path>.*?)(?::\d+)?\)$")
_REPOSITORY = str(Path(__file__).resolve().parents[1]) + "/"
# The event loop's entry: it and the frames above it (the CLI) are on every whole stack, so the
# "in all" list starts below it, and the stacks that reach it are the ones not cut short.
ENTRY = "Runner.run (asyncio/runners.py)"


def frame_name(frame: str) -> str:
    """`function (file)` of one py-spy frame, its path cut to a readable tail."""
    match = _FRAME.match(frame)
    if match is None:
        return frame
    path = match["path"]
    if "site-packages/" in path:
        path = path.rsplit("site-packages/", 1)[1]
    elif path.startswith(_REPOSITORY):
        path = path[len(_REPOSITORY) :]
    return f"{match['function']} ({path})"


@dataclass
class Profile:
    """Samples per function: of its own (the innermost frame) and in all (anywhere on the stack)."""

    samples: int = 0
    whole: int = 0  # samples whose stack reaches ENTRY
    own: Counter[str] = field(default_factory=Counter)
    total: Counter[str] = field(default_factory=Counter)

    @classmethod
    def from_raw(cls, text: str) -> Profile:
        """py-spy's `--format raw` output: one `frame;frame;...;innermost COUNT` per line."""
        profile = cls()
        for line in text.splitlines():
            stack, _, count = line.rstrip().rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            names = [frame_name(frame) for frame in stack.split(";")]
            profile.samples += n
            profile.own[names[-1]] += n
            if ENTRY in names:
                profile.whole += n
                names = names[names.index(ENTRY) + 1 :]
            for name in set(names):  # a recursive function counts once per sample
                profile.total[name] += n
        return profile

    def top(self, counter: Counter[str], n: int) -> list[tuple[float, str]]:
        return [(100 * count / self.samples, name) for name, count in counter.most_common(n)]


def report(profile: Profile, series: Series, title: str, top: int) -> str:
    lines = [
        title,
        f"load while sampled: {series.rps:.0f} req/s, {series.cpu_us_per_request:.0f} µs of CPU per request, "
        f"{series.errors} failed; {profile.samples} samples, {profile.whole} of them whole stacks "
        f"(reaching {ENTRY}; the others were cut short)",
    ]
    for heading, counter in (("own", profile.own), ("in all, below the event loop's entry", profile.total)):
        lines += ["", f"share of samples, {heading}:"]
        lines += [f"{share:6.1f}%  {name}" for share, name in profile.top(counter, top)]
    return "\n".join(lines)


def py_spy() -> str:
    found = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if found is None:
        raise SystemExit("py-spy is not installed: pip install py-spy (it comes with the `test` extra)")
    return found


async def sample(
    api: Api, stream: bool, concurrency: int, seconds: float, rate: int, blocking: bool
) -> tuple[str, Series]:
    """py-spy's raw output for `seconds` of load on a fresh sidecar, and the load it measured."""
    request = Request.benchmark(api, stream)
    executable = py_spy()
    async with mock_and_sidecar("bench-profile-", "builtin") as (_, sidecar):
        url = sidecar.url + api.value
        await closed_loop(url, request, concurrency, 10**9, 2.0, 2 * concurrency, sidecar.cpu)  # warm up
        with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
            out = Path(tmp) / "profile.txt"
            argv = [executable, "record", "--rate", str(rate), "--duration", f"{seconds:g}", "--format", "raw"]
            argv += [] if blocking else ["--nonblocking"]
            argv += ["--output", str(out), "--pid", str(sidecar.pid)]
            spy = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            # The loop outlasts the sampling a little: py-spy's last samples are of a loaded sidecar.
            load = closed_loop(url, request, concurrency, 10**9, seconds + 1.0, 2 * concurrency, sidecar.cpu)
            series, (_, error) = await asyncio.gather(load, spy.communicate())
            if spy.returncode != 0 or not out.exists():
                message = error.decode(errors="replace").strip()
                raise SystemExit(f"py-spy failed (exit {spy.returncode}): {message or 'no output'}")
            return out.read_text(), series


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--api", choices=[a.name.lower() for a in Api], default="anthropic")
    parser.add_argument("--stream", action="store_true", help="streamed replies (default: whole)")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=12.0, help="how long py-spy samples")
    parser.add_argument("--rate", type=int, default=400, help="samples per second")
    parser.add_argument("--top", type=int, default=15, help="functions per list")
    parser.add_argument("--raw", type=Path, help="also write py-spy's raw stacks here")
    parser.add_argument("--blocking", action="store_true", help="stop the process for each sample (py-spy's default)")
    args = parser.parse_args()
    api = Api[args.api.upper()]
    raw, series = asyncio.run(sample(api, args.stream, args.concurrency, args.seconds, args.rate, args.blocking))
    if args.raw:
        args.raw.write_text(raw)
    mode = "streamed" if args.stream else "whole"
    how = "stopping it for each sample" if args.blocking else "without stopping it"
    title = f"{api.name.lower()} {mode}, c={args.concurrency}, {args.seconds:g} s at {args.rate} Hz, {how}"
    print(report(Profile.from_raw(raw), series, title, args.top))


if __name__ == "__main__":
    main()
