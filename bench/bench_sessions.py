"""Memory of a sidecar serving many distinct sessions: RSS of `sidecar run` (default limits,
memory state) while N requests, each in a new session (`X-Sidecar-Session`), go through it.

The sidecar and the mock provider (proxybench/mock.py) run as their own processes; the driver
is a closed loop of aiohttp connections in this one. Each request is the benchmark's 16 KB
Anthropic body whose reply carries two read-only calls, so every session adds two ledger
entries until `state.max_entries_total` (100,000) is reached; from there the ledger evicts the
oldest and RSS should stay flat. Nothing is asserted: the numbers are printed, and the last
line judges the memory target (every RSS from 100,000 sessions on within 150 MB, over a run of
at least 10 minutes). `--minutes 10` keeps sending new sessions past `--sessions` until the run
has lasted that long, whatever the machine's speed (a fixed count does not: 380,000 sessions
took 14.4 minutes at one stop and 9.2 at the next).

Run: .venv/bin/python bench/bench_sessions.py [--sessions 100000] [--every 25000] [--minutes M]
     [--policies SPEC] [--max-entries N]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from proxybench.bodies import Api, body_bytes, check_turn
from proxybench.procs import Service
from proxybench.report import RSS_MB
from proxybench.targets import mock_and_sidecar

HEADERS = {"x-api-key": "sk-bench-not-a-key", "anthropic-version": "2023-06-01", "content-type": "application/json"}
CONNECTIONS = 48
TARGET_SESSIONS, TARGET_MB, TARGET_S = 100_000, RSS_MB, 600.0  # issue 16: RSS <= 150 MB, flat for 10 min
MIB = 1024 * 1024


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@dataclass(slots=True)
class Run:
    """RSS readings (sessions so far, MiB) of one run, how long it lasted, and failed requests."""

    readings: list[tuple[int, float]] = field(default_factory=list)
    seconds: float = 0.0
    errors: int = 0

    def worst_mb_after(self, sessions: int = TARGET_SESSIONS) -> float | None:
        """The highest RSS (MB, 10^6 bytes) from `sessions` sessions on; None before that."""
        after = [mib for n, mib in self.readings if n >= sessions]
        return max(after) * MIB / 1e6 if after else None


def verdict(run: Run) -> str:
    """The memory target, judged from one run's readings: every RSS from 100,000 sessions on
    within 150 MB (10^6 bytes), over a run of at least 10 minutes, with no failed request."""
    worst_mb = run.worst_mb_after()
    if worst_mb is None:
        return f"target RSS <= {TARGET_MB:.0f} MB after {TARGET_SESSIONS:,} sessions: not shown (fewer sessions)"
    after = [mib for n, mib in run.readings if n >= TARGET_SESSIONS]
    seconds, errors = run.seconds, run.errors
    met = worst_mb <= TARGET_MB and seconds >= TARGET_S and errors == 0
    shown = "met" if met else "missed"
    if worst_mb <= TARGET_MB and (seconds < TARGET_S or errors):
        shown = "not shown (" + ("errors" if errors else "the run was shorter than 10 minutes") + ")"
    return (
        f"target RSS <= {TARGET_MB:.0f} MB after {TARGET_SESSIONS:,} sessions, flat for 10 minutes: {shown}; "
        f"from {TARGET_SESSIONS:,} sessions on: {min(after):.1f}-{max(after):.1f} MiB "
        f"(at most {worst_mb:.1f} MB) over a run of {seconds / 60:.1f} minutes"
    )


async def drive(sidecar: Service, sessions: int, every: int, minutes: float, echo: bool = True) -> Run:
    """`sessions` new sessions at least, and more until the run has lasted `minutes`."""
    body = body_bytes(Api.ANTHROPIC, False)
    url = f"{sidecar.url}/v1/messages"
    numbers = itertools.count()
    done = 0
    run = Run([(0, rss_mib(sidecar.pid))])
    started = time.monotonic()
    if echo:
        print(f"{0:>8} sessions  RSS {run.readings[0][1]:7.1f} MiB", flush=True)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONNECTIONS)) as http:

        async def loop() -> None:
            nonlocal done
            for n in numbers:
                if n >= sessions and time.monotonic() - started >= minutes * 60:
                    return
                headers = {**HEADERS, "X-Sidecar-Session": f"bench-session-{n}"}
                async with http.post(url, data=body, headers=headers) as reply:
                    await reply.read()
                    run.errors += reply.status != 200
                done += 1
                if done % every == 0 or done == TARGET_SESSIONS:
                    seconds = time.monotonic() - started
                    run.readings.append((done, rss_mib(sidecar.pid)))
                    if echo:
                        print(
                            f"{done:>8} sessions  RSS {run.readings[-1][1]:7.1f} MiB  {run.errors} errors  "
                            f"{done / seconds:6.0f} req/s",
                            flush=True,
                        )

        await asyncio.gather(*(loop() for _ in range(CONNECTIONS)))
    run.seconds = time.monotonic() - started
    return run


async def rss_after_sessions(policies: str, sessions: int = TARGET_SESSIONS) -> Run:
    """A fresh sidecar (default limits) through `sessions` new sessions: `run.py` judges the
    RSS point of the memory target with it (the 10 minutes of flatness need `--minutes 10`)."""
    async with mock_and_sidecar("sidecar-sessions-", policies) as (_mock, sidecar):
        return await drive(sidecar, sessions, max(1, sessions // 4), 0.0, echo=False)


async def main(sessions: int, every: int, minutes: float, policies: str, max_entries: int | None) -> None:
    check_turn()
    state: dict[str, object] = {} if max_entries is None else {"max_entries_total": max_entries}
    async with mock_and_sidecar("sidecar-sessions-", policies, state) as (_mock, sidecar):
        run = await drive(sidecar, sessions, every, minutes)
    print(verdict(run), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=25_000, help="print RSS every this many sessions")
    parser.add_argument(
        "--minutes", type=float, default=0.0, help="go on with new sessions until the run has lasted this long"
    )
    parser.add_argument("--policies", default="builtin")
    parser.add_argument(
        "--max-entries",
        type=int,
        default=None,
        help="state.max_entries_total instead of its default (100,000): what the rest of the sidecar holds",
    )
    args = parser.parse_args()
    asyncio.run(main(args.sessions, args.every, args.minutes, args.policies, args.max_entries))
