"""The upstream client's own cost: CPU per reply read, the sidecar's client against aiohttp's.

    .venv/bin/python bench/bench_client.py [--requests 4000] [--concurrency 8] [--rounds 3]

Starts the benchmark's mock provider (its own process) and, in this process, reads its replies
(the benchmark's large Anthropic and Chat bodies, whole and streamed) with each client in
turn: `sidecar/proxy/http_client.py` (what the sidecar uses) and an `aiohttp.ClientSession`
set up as the sidecar's was before it (one kept-alive pool, no limit). Each body is read the
way the sidecar reads it, chunk by chunk. Rounds alternate the clients, so both see the same
machine; the table gives this process's CPU (user + system) per request, the median of the
rounds. The mock's own CPU is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import uvloop
from yarl import URL

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from proxybench.bodies import Api, body_bytes
from proxybench.procs import Services

from sidecar.proxy.http_client import ClientPool

HEADERS = {"Content-Type": "application/json", "x-api-key": "k", "anthropic-version": "2023-06-01"}
Reader = Callable[[URL, bytes], Awaitable[int]]


def sidecar_reader(pool: ClientPool) -> Reader:
    async def read(url: URL, body: bytes) -> int:
        async with pool.opened("POST", url, HEADERS, body) as response:
            size = 0
            while chunk := await response.chunk():
                size += len(chunk)
            return size

    return read


def aiohttp_reader(session: aiohttp.ClientSession) -> Reader:
    async def read(url: URL, body: bytes) -> int:
        async with session.request("POST", url, headers=HEADERS, data=body, allow_redirects=False) as response:
            size = 0
            while chunk := await response.content.readany():
                size += len(chunk)
            return size

    return read


async def cpu_per_request(read: Reader, url: URL, body: bytes, requests: int, concurrency: int) -> float:
    async def worker(n: int) -> None:
        for _ in range(n):
            if not await read(url, body):
                raise RuntimeError("an empty reply")

    await asyncio.gather(*(worker(20) for _ in range(concurrency)))  # warm: connections, caches
    start = time.process_time()
    await asyncio.gather(*(worker(requests // concurrency) for _ in range(concurrency)))
    return (time.process_time() - start) / (requests // concurrency * concurrency) * 1e6


async def main(requests: int, concurrency: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-client-") as workdir:
        services = Services(Path(workdir))
        try:
            mock = services.bench_server("mock", "mock")
            await _ready(mock.url)
            pool = ClientPool(read_timeout_s=60, connect_timeout_s=5)
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=True)
            readers = {"sidecar client": sidecar_reader(pool), "aiohttp ClientSession": aiohttp_reader(session)}
            try:
                print(f"CPU µs per reply read, this process only ({requests} requests at c={concurrency}, ", end="")
                print(f"median of {rounds} alternating rounds)")
                print(f"{'reply':<22}" + "".join(f"{name:>24}" for name in readers) + f"{'ratio':>8}")
                for api in Api:
                    for stream in (False, True):
                        url = URL(mock.url + api.value)
                        body = body_bytes(api, stream)
                        seen: dict[str, list[float]] = {name: [] for name in readers}
                        for _ in range(rounds):
                            for name, read in readers.items():
                                seen[name].append(await cpu_per_request(read, url, body, requests, concurrency))
                        medians = [statistics.median(values) for values in seen.values()]
                        label = f"{api.label} {'streamed' if stream else 'whole'}"
                        cells = "".join(f"{value:>24.0f}" for value in medians)
                        print(f"{label:<22}{cells}{medians[1] / medians[0]:>7.1f}x")
            finally:
                await pool.close()
                await session.close()
        finally:
            services.stop_all()


async def _ready(base: str) -> None:
    """The mock answers 404 to a GET of its root once it listens."""
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(base + "/"):
                    return
            except aiohttp.ClientError:
                await asyncio.sleep(0.1)
    raise RuntimeError(f"the mock at {base} did not start")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    uvloop.run(main(args.requests, args.concurrency, args.rounds))
