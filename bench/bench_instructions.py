"""Instructions per request, counted by valgrind's callgrind: the CPU cost of a request in a
number that does not drift with the machine.

CPU time per request is what the issue-16 targets are stated in, and `bench/run.py` measures
it, but on a shared machine it moves between runs by more than most changes do: the bare
forwarder alone measured 140 us per whole reply on one day and 450 on another, and rounds of
one run spread by 10-40%. A change of a few percent cannot be told from that noise. The
instructions a process executes for the same requests hardly move: four runs of 200 whole
Anthropic replies through the same sidecar counted 4.346 to 4.371 M per request (0.6% apart;
what varies is most likely what depends on timing, such as how many exchanges share one
after-exchange batch). So this benchmark tells whether a commit made a request cheaper by 1% or
more, and by how much, where a timed A/B needs many alternated rounds to say it roughly.

What it is not: time. An instruction that misses the cache costs more than one that hits,
and valgrind sees no difference; a native library (orjson, regorus, uvloop) counts its
instructions like Python's own. Use it to compare code, and `bench/run.py` or the shared
harness for the targets themselves.

How: each target runs under `valgrind --tool=callgrind --instr-atstart=no` (10-50x slower;
counting starts only after a warm-up), in front of the mock provider, which runs natively. The
closed loop of `bench/run.py` sends `--requests` requests at `--concurrency`; the count
between `callgrind_control -i on` (after the warm-up) and a dump after the last answer (and
a pause, so the work the sidecar does in batches after its exchanges is in it), divided by
the requests, is the number printed. The sidecar runs as in the other benchmarks
(`proxybench/targets.py`); the forwarder is `proxybench/forwarder.py`, the floor for a
Python proxy.

Run: .venv/bin/python bench/bench_instructions.py [--requests 200] [--concurrency 8]
     [--scenarios anthropic_whole,anthropic_streamed,chat_whole,chat_streamed]
     [--targets sidecar,forwarder]
     [--sidecar-path DIR] [--without call_policy,replay,...]

`--sidecar-path DIR` runs the sidecar package found in DIR (a `git worktree` of another
commit: `git worktree add /tmp/base HEAD~1`) instead of this checkout's, for a before/after
comparison in one run: the target is then named `sidecar@DIR`.

`--without PART[,PART...]` also counts, per part, the sidecar with that part of the request
path taken away (bench_ablation.py's parts, `proxybench/ablated.py`), and prints what each
part costs a request in instructions: bench_ablation.py's table without its timing noise.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from proxybench.ablated import ABLATIONS
from proxybench.load import Request, closed_loop
from proxybench.procs import Service, Services
from proxybench.report import FORWARDER, SCENARIOS, SIDECAR, Scenario
from proxybench.targets import sidecar_command, start_mock, start_sidecar

WARMUP = 40  # requests before counting starts: caches, lazily built state, the first batch
SETTLE_S = 0.5  # after the last answer: the sidecar's after-exchange batches (at most 50 ms)
# `sidecar` from another directory: first on sys.path, ahead of this checkout (an editable
# install and the working directory would otherwise win).
_FROM_PATH = "import sys; sys.path.insert(0, {path!r}); from sidecar.cli import main; sys.exit(main())"
# The scenarios of bench/run.py, by their keys (anthropic_whole, anthropic_streamed, ...).
BY_KEY = {scenario.key: scenario for scenario in SCENARIOS}


def callgrind_total(text: str) -> int:
    """The instruction count of one callgrind output file (its `summary:` line, else `totals:`)."""
    found = re.search(r"^summary:\s*(\d+)", text, re.MULTILINE) or re.search(r"^totals:\s*(\d+)", text, re.MULTILINE)
    if found is None:
        raise ValueError("no summary or totals line: not a callgrind output file")
    return int(found.group(1))


def _valgrind(out: Path) -> list[str]:
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install -y valgrind)")
    return [valgrind, "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]


async def _control(*args: str) -> None:
    process = await asyncio.create_subprocess_exec(
        "callgrind_control", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await process.communicate()
    if process.returncode != 0 or b"OK" not in output:
        raise RuntimeError(f"callgrind_control {' '.join(args)} failed: {output.decode(errors='replace')}")


def _start(
    services: Services, target: str, mock: Service, workdir: Path, out: Path, path: Path | None, without: str | None
) -> Service:
    prefix = _valgrind(out)
    if target == FORWARDER:
        service = services.bench_server(target, "forwarder", "--upstream", mock.url, prefix=prefix)
        service.ready_url = f"{service.url}/stats"  # answered by the mock, through the forwarder
        return service
    command = [*prefix, *sidecar_argv(path, without)]
    return start_sidecar(services, target, mock.url, workdir, "builtin", command=command)


def sidecar_argv(path: Path | None, without: str | None) -> list[str]:
    """What runs the sidecar: this checkout's, the one in `path` (first on the path, see the
    module docstring), or this checkout's with the part `without` taken away."""
    if path is not None:
        return [sys.executable, "-c", _FROM_PATH.format(path=str(path))]
    if without is not None:
        return [sys.executable, "-m", "proxybench.ablated", "--without", without]
    return sidecar_command()


async def count(
    target: str,
    scenario: Scenario,
    requests: int,
    concurrency: int,
    path: Path | None = None,
    warmup: int = WARMUP,
    without: str | None = None,
) -> float:
    """Instructions per request of one target in one scenario (see the module docstring);
    `without` names a part of the sidecar's request path to take away (`proxybench.ablated`)."""
    request = Request.benchmark(scenario.api, scenario.stream)
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as tmp:
        workdir = Path(tmp)
        out = workdir / "callgrind.out"
        services = Services(workdir)
        try:
            mock = start_mock(services)
            service = _start(services, target, mock, workdir, out, path, without)
            await asyncio.gather(mock.wait_ready(), service.wait_ready(timeout_s=300))
            url = service.url + scenario.api.value
            await closed_loop(url, request, concurrency, warmup, 600, 0, lambda: 0.0)
            await _control("--instr=on", str(service.pid))
            series = await closed_loop(url, request, concurrency, requests, 1800, 0, lambda: 0.0)
            await asyncio.sleep(SETTLE_S)
            await _control("--dump", str(service.pid))
            if series.errors or series.completed != requests:
                raise RuntimeError(f"{target}: {series.errors} failed of {requests}:\n{service.log_tail()}")
            return _last_dump(workdir, service) / requests
        finally:
            services.stop_all()


def _last_dump(workdir: Path, service: Service) -> int:
    """The count of the dump `--dump` wrote (`callgrind.out.1`; the file without a suffix is
    written at exit, with what ran after the dump)."""
    dumps = sorted(workdir.glob("callgrind.out.*"), key=lambda p: p.stat().st_mtime)
    if not dumps:
        raise RuntimeError(f"{service.name}: callgrind wrote no dump:\n{service.log_tail()}")
    return callgrind_total(dumps[-1].read_text(errors="replace"))


def report(rows: dict[str, dict[str, float]], targets: list[str]) -> str:
    """One line per scenario: instructions per request of each target, and each sidecar's
    ratio to the forwarder when both ran."""
    header = f"{'scenario':<18}" + "".join(f"{t:>22}" for t in targets)
    lines = ["instructions per request (millions), counted by callgrind", header]
    for scenario, counts in rows.items():
        cells = "".join(f"{counts[t] / 1e6:22.3f}" for t in targets)
        ratios = [
            f"{t} ÷ {FORWARDER} {counts[t] / counts[FORWARDER]:.2f}"
            for t in targets
            if t != FORWARDER and FORWARDER in counts
        ]
        lines.append(f"{scenario:<18}{cells}" + ("   " + ", ".join(ratios) if ratios else ""))
    return "\n".join(lines)


def parts_report(without: dict[str, float], full: float) -> str:
    """What each part taken away saves a request, in instructions and as a share of the full
    sidecar's count (`without`: the count with each part taken away, by part)."""
    lines = [f"{'part taken away':<16}{'saves (M)':>10}{'of full':>9}  what it is"]
    for name, counted in sorted(without.items(), key=lambda item: item[1]):
        saves = full - counted
        lines.append(f"{name:<16}{saves / 1e6:10.3f}{100 * saves / full:8.1f}%  {ABLATIONS[name].what}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200, help="counted requests per target and scenario")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--scenarios", default=",".join(BY_KEY), help=f"comma-separated: {', '.join(BY_KEY)}")
    parser.add_argument("--targets", default=f"{SIDECAR},{FORWARDER}", help="comma-separated: sidecar, forwarder")
    parser.add_argument("--sidecar-path", type=Path, help="also count the sidecar package in this directory")
    parser.add_argument(
        "--without", default="", help=f"comma-separated parts to count without, each alone: {', '.join(ABLATIONS)}"
    )
    args = parser.parse_args()
    if unknown_scenarios := [name for name in args.scenarios.split(",") if name and name not in BY_KEY]:
        parser.error(f"unknown scenario(s): {', '.join(unknown_scenarios)}")
    scenarios = [BY_KEY[name] for name in args.scenarios.split(",") if name]
    targets = [t for t in args.targets.split(",") if t]
    if unknown := [t for t in targets if t not in (SIDECAR, FORWARDER)]:
        parser.error(f"unknown target(s): {', '.join(unknown)}")
    paths: dict[str, Path | None] = {t: None for t in targets}
    if args.sidecar_path is not None:
        paths[f"{SIDECAR}@{args.sidecar_path}"] = args.sidecar_path.resolve()
    parts = [name for name in args.without.split(",") if name]
    if unknown_parts := [name for name in parts if name not in ABLATIONS]:
        parser.error(f"unknown part(s): {', '.join(unknown_parts)}; known: {', '.join(ABLATIONS)}")
    if parts and SIDECAR not in targets:
        parser.error("--without compares with the full sidecar: keep `sidecar` in --targets")
    started = time.monotonic()
    rows: dict[str, dict[str, float]] = {}
    taken_away: dict[str, dict[str, float]] = {}
    for scenario in scenarios:
        rows[scenario.key], taken_away[scenario.key] = {}, {}
        for target, path in paths.items():
            kind = FORWARDER if target == FORWARDER else SIDECAR
            print(f"counting {target}, {scenario.key} ...", file=sys.stderr, flush=True)
            rows[scenario.key][target] = asyncio.run(count(kind, scenario, args.requests, args.concurrency, path))
        for name in parts:
            print(f"counting {SIDECAR} without {name}, {scenario.key} ...", file=sys.stderr, flush=True)
            taken_away[scenario.key][name] = asyncio.run(
                count(SIDECAR, scenario, args.requests, args.concurrency, without=name)
            )
    print(report(rows, list(paths)))
    for key, without in taken_away.items():
        if without:
            print(f"\n{key}: instructions per request each part costs (the full sidecar without it)")
            print(parts_report(without, rows[key][SIDECAR]))
    print(f"\n({time.monotonic() - started:.0f} s; {args.requests} requests per count at c={args.concurrency})")


if __name__ == "__main__":
    main()
