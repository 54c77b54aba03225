"""How soon each event of a paced stream is forwarded: the mock sends one event every few ms
and stamps when it sent each (`/stats/paced`, time.monotonic: one clock for every process of a
machine); the client stamps when each arrives.

Added per-event latency = (arrival - sent) through a proxy minus the same straight from the
mock, per event index (medians over the requests, which alternate direct and proxy, c=1). The
text events before the first tool call are the ones a sidecar forwards at once (issue 16:
within 0.3 ms of their arrival); from the first call on it holds the events until the call set
is checked, by design, so those are reported apart. The first event carries the response head:
its time is the added time to first byte (a target of its own), so the text events are judged
from the second event on. Used by `bench_paced.py` and `run.py`.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import aiohttp
import orjson

from proxybench.bodies import HEADERS, Api, body_bytes
from proxybench.load import quantile_ms
from proxybench.mock import PACE_HEADER, PACED_PATH

# What marks the first tool call of a stream in each API's event data.
FIRST_CALL = {Api.ANTHROPIC: b'"tool_use"', Api.CHAT: b'"tool_calls"'}


@dataclass(frozen=True, slots=True)
class Paced:
    """Per event index, the median added latency (ms) of one API's paced stream."""

    api: Api
    pace_ms: float
    requests: int
    added_ms: list[float]
    first_call: int  # index of the first tool call's event

    @property
    def text_ms(self) -> list[float]:
        """The text events: after the response head, before the first call."""
        return self.added_ms[1 : self.first_call]

    @property
    def worst_text_ms(self) -> float:
        return max(self.text_ms) if self.text_ms else float("nan")

    def line(self) -> str:
        text = [ms / 1000 for ms in self.text_ms]  # quantile_ms takes seconds
        held = self.added_ms[self.first_call :]
        return (
            f"{self.api.label} streamed, {len(self.added_ms)} events {self.pace_ms:g} ms apart, "
            f"{self.requests} requests each way: first event (response head) +{self.added_ms[0]:.2f} ms; "
            f"the {len(text)} text events after it, before the first call: median +{quantile_ms(text, 0.5):.3f} ms, "
            f"p90 +{quantile_ms(text, 0.9):.3f}, max +{quantile_ms(text, 1.0):.3f}; held events (from the first "
            f"call on, released at the end): median +{statistics.median(held):.1f} ms"
        )


async def _arrivals(http: aiohttp.ClientSession, url: str, api: Api, pace_ms: float) -> tuple[list[float], int]:
    """Each event's arrival time (time.monotonic), and the index of the first call's event."""
    headers = {**HEADERS[api], "content-type": "application/json", PACE_HEADER: str(pace_ms)}
    arrived: list[float] = []
    first_call = -1
    pending = b""
    async with http.post(url, data=body_bytes(api, True), headers=headers) as reply:
        if reply.status != 200:
            raise RuntimeError(f"{url} answered {reply.status}: {(await reply.text())[:300]}")
        async for chunk in reply.content.iter_any():
            now = time.monotonic()
            pending += chunk
            *events, pending = pending.split(b"\n\n")
            for event in events:
                if first_call < 0 and FIRST_CALL[api] in event:
                    first_call = len(arrived)
                arrived.append(now)
    return arrived, first_call


async def _latencies(
    http: aiohttp.ClientSession, mock: str, base: str, api: Api, pace_ms: float
) -> tuple[list[float], int]:
    arrived, first_call = await _arrivals(http, base + api.value, api, pace_ms)
    async with http.get(mock + PACED_PATH) as r:
        sent: list[float] = orjson.loads(await r.read())
    if len(sent) != len(arrived):  # a proxy that merged or split events: per-event timing is meaningless
        raise RuntimeError(f"{len(sent)} events sent, {len(arrived)} arrived through {base}")
    return [(a - s) * 1000 for a, s in zip(arrived, sent, strict=True)], first_call


async def per_event(
    http: aiohttp.ClientSession, mock: str, proxy: str, api: Api, requests: int, pace_ms: float
) -> Paced:
    """`requests` paced streams each way, alternating direct (`mock`) and through `proxy`."""
    direct: list[list[float]] = []
    through: list[list[float]] = []
    first_call = 0
    for _ in range(requests):
        direct.append((await _latencies(http, mock, mock, api, pace_ms))[0])
        lat, first_call = await _latencies(http, mock, proxy, api, pace_ms)
        through.append(lat)
    added = [
        statistics.median(s[i] for s in through) - statistics.median(d[i] for d in direct)
        for i in range(len(direct[0]))
    ]
    return Paced(api, pace_ms, requests, added, first_call)
