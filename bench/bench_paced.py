"""How soon each streamed event is forwarded: a paced stream (one event every few ms) through
`sidecar run` and straight from the mock, each event's arrival at the client compared with
when the mock sent it (time.monotonic is one clock for every process of a machine).

Added per-event latency = (arrival - sent) through the sidecar minus the same, direct, per
event index (medians over the requests). The text events before the first tool call are the
ones a sidecar forwards at once (the issue's target: within 0.3 ms of their arrival); from the
first call on it holds the events until the call set is checked, by design, so those are
reported apart. c=1, requests alternating direct and sidecar. Nothing is asserted.

Run: .venv/bin/python bench/bench_paced.py [--n 20] [--pace-ms 2] [--policies SPEC]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import aiohttp
import orjson
from proxybench.bodies import Api, body_bytes, check_turn
from proxybench.load import quantile_ms
from proxybench.mock import PACE_HEADER, PACED_PATH
from proxybench.targets import mock_and_sidecar

HEADERS = {
    Api.ANTHROPIC: {"x-api-key": "sk-bench-not-a-key", "anthropic-version": "2023-06-01"},
    Api.CHAT: {"authorization": "Bearer sk-bench-not-a-key"},
}
# What marks the first tool call of a stream in each API's event data.
FIRST_CALL = {Api.ANTHROPIC: b'"tool_use"', Api.CHAT: b'"tool_calls"'}


async def one(http: aiohttp.ClientSession, url: str, api: Api, body: bytes, pace_ms: float) -> tuple[list[float], int]:
    """Each event's arrival time (time.monotonic), and the index of the first call's event."""
    headers = {**HEADERS[api], "content-type": "application/json", PACE_HEADER: str(pace_ms)}
    arrived: list[float] = []
    first_call = -1
    pending = b""
    async with http.post(url, data=body, headers=headers) as reply:
        assert reply.status == 200, await reply.text()
        async for chunk in reply.content.iter_any():
            now = time.monotonic()
            pending += chunk
            *events, pending = pending.split(b"\n\n")
            for event in events:
                if first_call < 0 and FIRST_CALL[api] in event:
                    first_call = len(arrived)
                arrived.append(now)
    return arrived, first_call


async def latencies(
    http: aiohttp.ClientSession, mock: str, url: str, api: Api, pace_ms: float
) -> tuple[list[float], int]:
    body = body_bytes(api, True)
    arrived, first_call = await one(http, url + api.value, api, body, pace_ms)
    async with http.get(mock + PACED_PATH) as r:
        sent: list[float] = orjson.loads(await r.read())
    if len(sent) != len(arrived):  # a proxy that merged or split events: per-event timing is meaningless
        raise RuntimeError(f"{len(sent)} events sent, {len(arrived)} arrived through {url}")
    return [(a - s) * 1000 for a, s in zip(arrived, sent, strict=True)], first_call


async def main(n: int, pace_ms: float, policies: str) -> None:
    check_turn()
    async with mock_and_sidecar("sidecar-paced-", policies) as (mock, sidecar), aiohttp.ClientSession() as http:
        for api in Api:
            direct: list[list[float]] = []
            through: list[list[float]] = []
            first_call = 0
            for _ in range(n):
                direct.append((await latencies(http, mock.url, mock.url, api, pace_ms))[0])
                lat, first_call = await latencies(http, mock.url, sidecar.url, api, pace_ms)
                through.append(lat)
            added = [
                statistics.median(s[i] for s in through) - statistics.median(d[i] for d in direct)
                for i in range(len(direct[0]))
            ]
            text = [ms / 1000 for ms in added[:first_call]]  # quantile_ms takes seconds
            print(
                f"{api.label} streamed, {len(added)} events {pace_ms:g} ms apart, {n} requests each way: "
                f"first event +{added[0]:.2f} ms; the {len(text)} events before the first call: "
                f"median +{quantile_ms(text, 0.5):.3f} ms, p90 +{quantile_ms(text, 0.9):.3f}, "
                f"max +{quantile_ms(text, 1.0):.3f}; held events (from the first call on, released at the end): "
                f"median +{statistics.median(added[first_call:]):.1f} ms",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--pace-ms", type=float, default=2.0)
    parser.add_argument("--policies", default="builtin")
    args = parser.parse_args()
    asyncio.run(main(args.n, args.pace_ms, args.policies))
