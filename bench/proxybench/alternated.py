"""Several `sidecar run`s in front of one mock, loaded in turn: the CPU each uses per request.

`bench_ablation.py` (the sidecar with parts taken away) and `bench_interpreters.py` (the same
sidecar on several Python builds) compare variants whose differences are smaller than what the
machine drifts between runs. Loading every variant in each round, at c=N for the same time,
spreads that drift over all of them alike; CPU per request is read from /proc.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from proxybench.bodies import Api
from proxybench.load import Request, closed_loop
from proxybench.procs import Services
from proxybench.targets import start_mock, start_sidecar


@dataclass(slots=True)
class Rounds:
    """One variant's rounds: CPU µs per request and requests per second of each, failures."""

    cpu_us: list[float] = field(default_factory=list)
    rps: list[float] = field(default_factory=list)
    errors: int = 0


async def alternated(
    commands: Sequence[list[str] | None],
    api: Api,
    stream: bool,
    rounds: int,
    seconds: float,
    concurrency: int,
    prefix: str = "bench-alternated-",
) -> list[Rounds]:
    """Each command runs `sidecar` (None: the installed one; `start_sidecar`'s `command`); one
    `Rounds` per command, in order (a command may come twice)."""
    request = Request.benchmark(api, stream)
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        workdir = Path(tmp)
        services = Services(workdir)
        try:
            mock = start_mock(services)
            sidecars = [
                start_sidecar(services, f"sidecar{i}", mock.url, workdir, "builtin", command=command)
                for i, command in enumerate(commands)
            ]
            await asyncio.gather(mock.wait_ready(), *(sidecar.wait_ready() for sidecar in sidecars))
            measured = [Rounds() for _ in commands]
            for _ in range(rounds):
                for sidecar, runs in zip(sidecars, measured, strict=True):
                    url = sidecar.url + api.value
                    series = await closed_loop(url, request, concurrency, 10**9, seconds, 2 * concurrency, sidecar.cpu)
                    runs.cpu_us.append(series.cpu_us_per_request)
                    runs.rps.append(series.rps)
                    runs.errors += series.errors
            return measured
        finally:
            services.stop_all()
