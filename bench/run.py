"""One-command benchmark of the sidecar: added latency, throughput and CPU per request, for
four scenarios (Anthropic and Chat, whole and streamed replies) through four targets.

  direct           the mock provider itself (bench/proxybench/mock.py)
  forwarder        a bare aiohttp pass-through forwarder: the floor for a Python proxy
  sidecar          `sidecar run`, default enforcement (lockdown, embedded policy, replay ledger,
                   metrics), tracing off
  sidecar+tracing  the same, exporting OTLP/HTTP traces to a loopback sink that drops them
  sidecar-wN       `sidecar run --workers N` (state in SQLite, which workers need), at c=64 only:
                   how throughput scales with worker processes (--workers, default 2; 1 skips it)

Each runs as its own process on a free loopback port; CPU per request is read from /proc. A
pre-flight proves that every target returns the model's tool calls unchanged (read by the
official SDKs) with no repair round, else the run aborts. Then, per scenario: c=1 with the
targets interleaved request by request (latency, first byte), and a closed loop at c=64 per
target, back to back (throughput, CPU). Then the targets the table does not show: paced
streams through the same sidecar (how soon each text event is forwarded, proxybench/paced.py),
the policy and validation loops of bench_policy.py and bench_validation.py, and, in the full
run, the RSS of a fresh sidecar after 100,000 new sessions (bench_sessions.py; its 10 minutes of
flatness need `bench_sessions.py --minutes 10`). The report prints the table, every issue-16
target (met / missed) and the ratios sidecar ÷ forwarder and sidecar ÷ direct; it never fails
on slow numbers. The machine is shared and noisy: compare within one run, prefer the ratios.

Run: .venv/bin/python bench/run.py [--quick] [--json FILE] [--policies SPEC] [--workers N]
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from bench_policy import embedded_p50_us
from bench_sessions import TARGET_SESSIONS, rss_after_sessions
from bench_validation import valid_call_median_us
from proxybench import report
from proxybench.bodies import Api, check_turn
from proxybench.load import Request, Series, closed_loop, interleaved
from proxybench.paced import per_event
from proxybench.preflight import PreflightError, check_sidecar_metrics, check_target
from proxybench.procs import Service, Services, StartError
from proxybench.report import CONCURRENCY, DIRECT, FORWARDER, SCENARIOS, SIDECAR, TARGET_NAMES, TRACED, Measured
from proxybench.targets import start_mock, start_sidecar


@dataclass(frozen=True, slots=True)
class Plan:
    """Request counts and wall-time caps of one mode (every run stops at whichever comes first)."""

    name: str
    c1_n: int  # requests per target at c=1
    c1_max_s: float
    c1_warmup: int
    c64_n: int
    c64_max_s: float
    paced_n: int  # paced streams per API each way (direct, sidecar)
    loop_n: int  # policy decisions and validations in the component loops
    rss_sessions: int  # new sessions for the RSS target (0: not measured)


QUICK = Plan(
    "quick", c1_n=120, c1_max_s=3.0, c1_warmup=10, c64_n=1200, c64_max_s=1.2, paced_n=3, loop_n=3000, rss_sessions=0
)
FULL = Plan(
    "full",
    c1_n=1000,
    c1_max_s=25.0,
    c1_warmup=50,
    c64_n=5000,
    c64_max_s=8.0,
    paced_n=20,
    loop_n=20000,
    rss_sessions=TARGET_SESSIONS,
)
PACE_MS = 2.0


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def machine() -> str:
    """CPUs, load and the interpreter the targets run on: its build moves CPU per request
    (bench/README.md, "The interpreter's build"), so the line names the binary."""
    load = Path("/proc/loadavg").read_text().split()[:3]
    interpreter = os.path.realpath(sys.executable)
    return f"{os.cpu_count()} CPUs, load {' '.join(load)}, Python {platform.python_version()} ({interpreter})"


async def start_all(services: Services, workdir: Path, policies: str, workers: int) -> dict[str, Service]:
    mock = start_mock(services)
    sink = services.bench_server("otlp-sink", "sink")
    forwarder = services.bench_server("forwarder", "forwarder", "--upstream", mock.url)
    forwarder.ready_url = f"{forwarder.url}/stats"  # answered by the mock, through the forwarder
    plain = start_sidecar(services, SIDECAR, mock.url, workdir, policies)
    traced = start_sidecar(services, TRACED, mock.url, workdir, policies, otlp_endpoint=sink.url)
    started = {DIRECT: mock, FORWARDER: forwarder, SIDECAR: plain, TRACED: traced}
    if workers > 1:
        started[report.scaled_name(workers)] = start_sidecar(
            services, report.scaled_name(workers), mock.url, workdir, policies, workers=workers
        )
    await asyncio.gather(*(s.wait_ready() for s in (sink, *started.values())))
    if workers > 1:
        await _all_workers_ready(started[report.scaled_name(workers)], workers)
    return started


async def _all_workers_ready(service: Service, workers: int) -> None:
    """The supervisor is ready with one worker; measure with all of them."""
    async with aiohttp.ClientSession() as session:
        for _ in range(600):
            async with session.get(service.ready_url) as response:
                if len((await response.json()).get("workers", {})) == workers:
                    return
            await asyncio.sleep(0.1)
    raise StartError(f"{service.name}: not every worker became ready:\n{service.log_tail()}")


async def preflight(targets: dict[str, Service]) -> list[str]:
    mock = targets[DIRECT]
    checks: list[str] = []
    async with aiohttp.ClientSession() as session:
        for name, service in targets.items():
            checks += await check_target(session, name, service.url, mock.url)
        for name in targets:
            if name in (DIRECT, FORWARDER):
                continue
            checks.append(await check_sidecar_metrics(session, name, targets[name].extra["admin"]))
    return checks


async def measure(targets: dict[str, Service], plan: Plan) -> list[Measured]:
    urls = {name: targets[name].url for name in TARGET_NAMES}
    cpus = {name: targets[name].cpu for name in TARGET_NAMES}
    out: list[Measured] = []
    for scenario in SCENARIOS:
        api = scenario.api
        request = Request.benchmark(api, scenario.stream)
        url_of = {name: f"{base}{api.value}" for name, base in urls.items()}
        c1 = await interleaved(url_of, request, plan.c1_n, plan.c1_max_s, plan.c1_warmup, cpus)
        _mock_share(c1)
        log(f"  {scenario.label}: c=1 done ({c1[DIRECT].completed} requests per target)")
        c64: dict[str, Series] = {}
        for name in TARGET_NAMES:
            c64[name] = await closed_loop(
                url_of[name], request, CONCURRENCY, plan.c64_n, plan.c64_max_s, 2 * CONCURRENCY, cpus[name]
            )
            log(f"  {scenario.label}: c={CONCURRENCY} {name}: {c64[name].rps:.0f} req/s, {c64[name].errors} errors")
        for name in set(targets) - set(TARGET_NAMES):  # the workers' sidecar: throughput only
            c64[name] = await closed_loop(
                targets[name].url + api.value,
                request,
                CONCURRENCY,
                plan.c64_n,
                plan.c64_max_s,
                2 * CONCURRENCY,
                targets[name].cpu,
            )
            log(f"  {scenario.label}: c={CONCURRENCY} {name}: {c64[name].rps:.0f} req/s, {c64[name].errors} errors")
        out.append(Measured(scenario, c1, c64))
    return out


async def paced(targets: dict[str, Service], plan: Plan) -> list[dict[str, Any]]:
    """Per API, how soon the sidecar forwards each event of a paced stream (proxybench/paced.py)."""
    out: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as http:
        for api in Api:
            found = await per_event(http, targets[DIRECT].url, targets[SIDECAR].url, api, plan.paced_n, PACE_MS)
            out.append(
                {
                    "api": api.name.lower(),
                    "label": api.label,
                    "worst_text_ms": found.worst_text_ms,
                    "first_event_ms": found.added_ms[0],
                    "events": len(found.added_ms),
                    "line": found.line(),
                }
            )
            log(f"  {api.label} paced stream: worst text event +{found.worst_text_ms:.3f} ms")
    return out


async def components(plan: Plan, policies: str, paced_found: list[dict[str, Any]]) -> dict[str, Any]:
    """The targets the scenario table does not show, each judged by this same command: the
    paced streams (measured while the targets run), then the policy and validation loops and
    the RSS after 100,000 sessions (a fresh sidecar of its own; full mode), on a machine the
    targets no longer load."""
    found: dict[str, Any] = {"paced": paced_found}
    found["policy_p50_us"] = await embedded_p50_us(plan.loop_n)
    found["validation_median_us"] = valid_call_median_us(plan.loop_n)
    log(f"  policy p50 {found['policy_p50_us']:.1f} µs, validation median {found['validation_median_us']:.1f} µs")
    if plan.rss_sessions:
        log(f"  {plan.rss_sessions:,} new sessions through a fresh sidecar (RSS) ...")
        rss = await rss_after_sessions(policies, plan.rss_sessions)
        found["rss_mb_after_100k_sessions"] = rss.worst_mb_after()
        found["rss_errors"] = rss.errors
        found["rss_seconds"] = round(rss.seconds, 1)
    return found


def _mock_share(c1: dict[str, Series]) -> None:
    """At c=1 the mock serves every target's requests: charge `direct` its share only."""
    total = sum(series.completed for series in c1.values())
    direct = c1[DIRECT]
    if total:
        direct.cpu_s *= direct.completed / total


async def run(plan: Plan, policies: str, workers: int) -> dict[str, Any]:
    check_turn()
    started = time.monotonic()
    result: dict[str, Any] = {"mode": plan.name, "machine": machine(), "policies": policies}
    with tempfile.TemporaryDirectory(prefix="sidecar-bench-") as tmp:
        services = Services(Path(tmp))
        atexit.register(services.stop_all)
        try:
            log("starting mock, OTLP sink, forwarder and two sidecars ...")
            targets = await start_all(services, Path(tmp), policies, workers)
            result["pids"] = {name: service.pid for name, service in targets.items()}
            log("pre-flight ...")
            try:
                checks = await preflight(targets)
            except PreflightError as exc:
                result["preflight"] = {"passed": False, "error": str(exc)}
                return result
            result["preflight"] = {"passed": True, "checks": checks}
            for line in checks:
                log(f"  ok  {line}")
            log(f"measuring ({plan.name}) ...")
            measured = await measure(targets, plan)
            paced_found = await paced(targets, plan)
        finally:
            services.stop_all()
        found = await components(plan, policies, paced_found)
    rows = [report.row(m, name) for m in measured for name in TARGET_NAMES]
    result.update(rows=rows, targets=report.targets(rows) + report.component_targets(found), ratios=report.ratios(rows))
    result["components"] = found
    result["scaling"] = report.scaling(measured, workers) if workers > 1 else []
    result["not_measured"] = report.not_measured(bool(plan.rss_sessions))
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small counts, short runs (under a minute)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument(
        "--policies", default="builtin", help="policy spec for both sidecars (default: builtin; see docs/policies.md)"
    )
    parser.add_argument(
        "--workers", type=int, default=2, metavar="N", help="also measure `sidecar run --workers N` at c=64 (1: skip)"
    )
    args = parser.parse_args()
    try:
        result = _run_loop(run(QUICK if args.quick else FULL, args.policies, args.workers))
    except StartError as exc:
        log(f"could not start the benchmark's processes: {exc}")
        return 2
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    if not result["preflight"]["passed"]:
        log(f"pre-flight FAILED, nothing measured: {result['preflight']['error']}")
        return 2
    print(report.text(result))
    print(f"\n({result['wall_s']} s; reproduce: .venv/bin/python bench/run.py{' --quick' if args.quick else ''})")
    return 0


def _run_loop(coroutine: Any) -> dict[str, Any]:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        result: dict[str, Any] = asyncio.run(coroutine)
        return result
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        out: dict[str, Any] = runner.run(coroutine)
        return out


if __name__ == "__main__":
    sys.exit(main())
