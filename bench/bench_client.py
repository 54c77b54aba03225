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
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import aiohttp
import uvloop
from yarl import URL

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from proxybench.bodies import HEADERS, Api, body_bytes
from proxybench.procs import Services
from proxybench.targets import start_mock

from sidecar.proxy.http_client import ClientPool

Reader = Callable[[URL, Mapping[str, str], bytes], Awaitable[int]]


def sidecar_reader(pool: ClientPool) -> Reader:
    async def read(url: URL, headers: Mapping[str, str], body: bytes) -> int:
        async with pool.opened("POST", url, headers, body) as response:
            size = 0
            while chunk := await response.chunk():
                size += len(chunk)
            return size

    return read


def aiohttp_reader(session: aiohttp.ClientSession) -> Reader:
    async def read(url: URL, headers: Mapping[str, str], body: bytes) -> int:
        async with session.request("POST", url, headers=headers, data=body, allow_redirects=False) as response:
            size = 0
            while chunk := await response.content.readany():
                size += len(chunk)
            return size

    return read


async def cpu_per_request(
    read: Reader, url: URL, headers: Mapping[str, str], body: bytes, requests: int, concurrency: int
) -> float:
    async def worker(n: int) -> None:
        for _ in range(n):
            if not await read(url, headers, body):
                raise RuntimeError("an empty reply")

    await asyncio.gather(*(worker(20) for _ in range(concurrency)))  # warm: connections, caches
    start = time.process_time()
    await asyncio.gather(*(worker(requests // concurrency) for _ in range(concurrency)))
    return (time.process_time() - start) / (requests // concurrency * concurrency) * 1e6


async def print_table(base: str, readers: dict[str, Reader], requests: int, concurrency: int, rounds: int) -> None:
    """One row per reply kind: each reader's median CPU per reply, and aiohttp's ÷ ours."""
    print(f"CPU µs per reply read, this process only ({requests} requests at c={concurrency}, ", end="")
    print(f"median of {rounds} alternating rounds)")
    print(f"{'reply':<22}" + "".join(f"{name:>24}" for name in readers) + f"{'ratio':>8}")
    for api in Api:
        headers = {"Content-Type": "application/json", **HEADERS[api]}
        for stream in (False, True):
            url, body = URL(base + api.value), body_bytes(api, stream)
            seen: dict[str, list[float]] = {name: [] for name in readers}
            for _ in range(rounds):
                for name, read in readers.items():
                    seen[name].append(await cpu_per_request(read, url, headers, body, requests, concurrency))
            medians = [statistics.median(values) for values in seen.values()]
            cells = "".join(f"{value:>24.0f}" for value in medians)
            print(f"{api.label + (' streamed' if stream else ' whole'):<22}{cells}{medians[1] / medians[0]:>7.1f}x")


async def main(requests: int, concurrency: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-client-") as workdir:
        services = Services(Path(workdir))
        try:
            mock = start_mock(services)
            await mock.wait_ready()
            pool = ClientPool(read_timeout_s=60, connect_timeout_s=5)
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=True)
            readers = {"sidecar client": sidecar_reader(pool), "aiohttp ClientSession": aiohttp_reader(session)}
            try:
                await print_table(mock.url, readers, requests, concurrency, rounds)
            finally:
                await pool.close()
                await session.close()
        finally:
            services.stop_all()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    uvloop.run(main(args.requests, args.concurrency, args.rounds))
