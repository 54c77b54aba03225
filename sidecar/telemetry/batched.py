"""Work an exchange leaves for after it ended, done in batches: token attribution per tool (the
cost filter) and the request's log line and overhead sample (the telemetry filter).

Why batches: under load, work done right after each exchange runs with the caches the other
exchanges in flight have just evicted, and between two of its runs the interpreter runs
everything else a request needs. Token attribution cost 126 us of CPU per request that way
in the proxy at c=64 (bench/bench_ablation.py) against 56 us in a loop; in batches, the
whole-reply benchmark's CPU per request went from 1,182 to 1,116 us (c=64, 4 alternated
rounds, both sidecars in one run); the request line and overhead sample in batches too,
892 -> 841 us (6 alternated rounds). Nothing the agent gets waits for this work: it only
counts and logs.

When the sidecar is handling no other request (`Metrics.requests_in_flight`: only the one
that just ended), the work is done at once, right after that exchange's answer is written: at
low load there is nothing to share caches with, and a batch held for `BATCH_S` would run in
the middle of a later request and delay it (at c=1, whole Anthropic replies, a 50 ms batch
held ~37 exchanges; p99 5.00 ms that way, 2.38 ms with the work done at once when idle, same
run). Otherwise an item waits at most `BATCH_S`, or until `BATCH_MAX` are waiting: that bounds
what one batch holds the loop for (16 exchanges, ~1.6 ms at the 103 us per exchange
bench_ablation.py measured), the delay the requests in flight then share.

An item is what the filter read of its exchange at `on_done` (a handful of fields, the
request's sizes, each reply's usage), never the exchange: a batch would otherwise keep up to 16
parsed requests and replies alive for up to 50 ms, and free them when its memory had most
likely gone cold. At c=64, whole Anthropic replies, freeing them in the batch had 4.4-5.1% of
py-spy's samples (two runs), at the line that runs a full batch; the exchanges are now freed as
their requests end (the event loop's own share rose 2.4 points). Timed CPU per request did not
resolve the difference (521 against 520 µs, medians of 8 alternated rounds), and RSS after
100,000 sessions went from 138.3 to 137.0 MiB (`bench/bench_sessions.py`, one run each).

Every batch is settled before the metrics are read (`Metrics.settle_before_read`), so a
scrape or `/v1/status` never misses an exchange that ended, and when the sidecar closes
(`Metrics.settle`), so a graceful stop loses no log line. A process killed outright loses what
was waiting, at most `BATCH_S` of it (the log writer may hold as much again: docs/operations.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

from sidecar.telemetry.metrics import Metrics

BATCH_S = 0.05
BATCH_MAX = 16

T = TypeVar("T")


class Batched(Generic[T]):
    """Items of one kind of after-exchange work, done together by `work`, one at a time.

    Best-effort like the filters that use it: an item whose work raises is handed to
    `failed` (inside the `except`, so it can log the traceback) and the others are done.
    `finish`, when given, runs once after each batch's items: what the items gathered can be
    handed on once per batch (the cost filter's counter increments) instead of once per item;
    it handles its own failures, as `failed` does an item's."""

    def __init__(
        self,
        metrics: Metrics,
        work: Callable[[T], None],
        failed: Callable[[T], None],
        finish: Callable[[], None] | None = None,
    ) -> None:
        self._metrics = metrics
        self._work = work
        self._failed = failed
        self._finish = finish
        self._waiting: list[T] = []
        self._timer: asyncio.TimerHandle | None = None  # the batch's
        self._soon = False  # a settle is due at the next turn of the loop
        metrics.settle_before_read(self.settle)

    def add(self, item: T) -> None:
        """Called on the event loop (a filter's `on_done`, while its request is in flight)."""
        self._waiting.append(item)
        if len(self._waiting) >= BATCH_MAX:
            self.settle()
        elif self._metrics.requests_in_flight <= 1:  # idle once this request is done: at once
            if not self._soon:
                self._soon = True
                asyncio.get_running_loop().call_soon(self.settle)
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(BATCH_S, self.settle)

    def settle(self) -> None:
        """Do every item waiting: idle, the batch's timer, a full batch, a read of the
        metrics, or the sidecar closing."""
        self._soon = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting, self._waiting = self._waiting, []
        for item in waiting:
            try:
                self._work(item)
            except Exception:
                self._failed(item)
        if waiting and self._finish is not None:
            self._finish()

    def __len__(self) -> int:
        return len(self._waiting)
