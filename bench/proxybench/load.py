"""The closed-loop load driver: `c` loops, each sending its next request when the last one
ended, bounded by a request count and by wall time (a slow target stops at the time cap and
reports how many it completed). Latency is per request, from just before the request is
written to the last body byte; the first body byte is timed too (the first SSE event).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiohttp

from proxybench.bodies import HEADERS, Api, body_bytes


@dataclass(frozen=True, slots=True)
class Request:
    """One scenario's request, ready to send to any target's base URL."""

    api: Api
    stream: bool
    body: bytes
    headers: dict[str, str]

    @classmethod
    def benchmark(cls, api: Api, stream: bool) -> Request:
        """The benchmark's request for `api`, whole or streamed (proxybench/bodies.py)."""
        return cls(api, stream, body_bytes(api, stream), HEADERS[api])

    def ok(self, status: int, seen: bytes) -> bool:
        """A 200 whose stream ends with the end marker (`seen`: its tail), or whose whole body
        (`seen`: all of it) carries tool calls."""
        return status == 200 and (self.api.end_marker if self.stream else self.api.call_marker) in seen


@dataclass(slots=True)
class Series:
    """What one target's requests of one run measured."""

    total_s: list[float] = field(default_factory=list)
    first_byte_s: list[float] = field(default_factory=list)
    errors: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0

    @property
    def completed(self) -> int:
        return len(self.total_s)

    @property
    def rps(self) -> float:
        return self.completed / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def cpu_us_per_request(self) -> float:
        return self.cpu_s / self.completed * 1e6 if self.completed else float("nan")


def quantile_ms(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile in milliseconds (NaN for no samples)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))] * 1000


async def send(session: aiohttp.ClientSession, url: str, request: Request, series: Series) -> None:
    """One request; its timings go to `series`, a failure to `series.errors`."""
    started = time.perf_counter()
    try:
        async with session.post(url, data=request.body, headers=request.headers) as response:
            first = await response.content.readany()
            first_at = time.perf_counter()
            rest = await response.content.read()
            ended = time.perf_counter()
            good = request.ok(response.status, _seen(request, first, rest))
    except (TimeoutError, aiohttp.ClientError):
        good = False
    if not good:
        series.errors += 1
        return
    series.total_s.append(ended - started)
    series.first_byte_s.append(first_at - started)


def _seen(request: Request, first: bytes, rest: bytes) -> bytes:
    """What `Request.ok` looks at: a stream's tail (no copy of the whole stream), a whole body."""
    if not request.stream:
        return first + rest
    return rest[-128:] if len(rest) >= 128 else (first + rest)[-128:]


def session(connections: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections, limit_per_host=connections),
        timeout=aiohttp.ClientTimeout(total=30),
        skip_auto_headers=("User-Agent",),
    )


async def closed_loop(
    url: str, request: Request, concurrency: int, n: int, max_s: float, warmup: int, cpu: Callable[[], float]
) -> Series:
    """`concurrency` loops until `n` requests completed or `max_s` passed; CPU from `cpu()`."""
    async with session(concurrency) as client:
        await _loops(client, url, request, concurrency, warmup, max_s / 4, Series())
        series = Series()
        cpu_before, started = cpu(), time.perf_counter()
        await _loops(client, url, request, concurrency, n, max_s, series)
        series.wall_s = time.perf_counter() - started
        series.cpu_s = cpu() - cpu_before
    return series


async def _loops(
    client: aiohttp.ClientSession, url: str, request: Request, concurrency: int, n: int, max_s: float, series: Series
) -> None:
    deadline = time.perf_counter() + max_s
    issued = 0

    async def loop() -> None:
        nonlocal issued
        while issued < n and time.perf_counter() < deadline:
            issued += 1
            await send(client, url, request, series)

    await asyncio.gather(*(loop() for _ in range(concurrency)))


async def interleaved(
    urls: dict[str, str], request: Request, n: int, max_s: float, warmup: int, cpus: dict[str, Callable[[], float]]
) -> dict[str, Series]:
    """One request at a time, round-robin over the targets (so drift hits all alike)."""
    clients = {name: session(1) for name in urls}
    try:
        for name, url in urls.items():
            for _ in range(warmup):
                await send(clients[name], url, request, Series())
        out = {name: Series() for name in urls}
        before = {name: cpus[name]() for name in urls}
        started = time.perf_counter()
        deadline = started + max_s
        for _ in range(n):
            if time.perf_counter() >= deadline:
                break
            for name, url in urls.items():
                await send(clients[name], url, request, out[name])
        for name, series in out.items():
            series.wall_s = time.perf_counter() - started
            series.cpu_s = cpus[name]() - before[name]
        return out
    finally:
        for client in clients.values():
            await client.close()
