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

An item waits at most `BATCH_S` (or until `BATCH_MAX` are waiting). Every batch is settled
before the metrics are read (`Metrics.settle_before_read`), so a scrape or `/v1/status` never
misses an exchange that ended, and when the sidecar closes (`Metrics.settle`), so a graceful
stop loses no log line. A process killed outright loses what was waiting, at most `BATCH_S` of
it (the log writer may hold as much again: docs/operations.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

from sidecar.telemetry.metrics import Metrics

BATCH_S = 0.05
BATCH_MAX = 64

T = TypeVar("T")


class Batched(Generic[T]):
    """Items of one kind of after-exchange work, done together by `work`, one at a time.

    Best-effort like the filters that use it: an item whose work raises is handed to
    `failed` (inside the `except`, so it can log the traceback) and the others are done."""

    def __init__(self, metrics: Metrics, work: Callable[[T], None], failed: Callable[[T], None]) -> None:
        self._work = work
        self._failed = failed
        self._waiting: list[T] = []
        metrics.settle_before_read(self.settle)

    def add(self, item: T) -> None:
        """Called on the event loop (a filter's `on_done`)."""
        if not self._waiting:
            asyncio.get_running_loop().call_later(BATCH_S, self.settle)
        self._waiting.append(item)
        if len(self._waiting) >= BATCH_MAX:
            self.settle()

    def settle(self) -> None:
        """Do every item waiting: the batch's timer, a full batch, a read of the metrics, or
        the sidecar closing."""
        waiting, self._waiting = self._waiting, []
        for item in waiting:
            try:
                self._work(item)
            except Exception:
                self._failed(item)

    def __len__(self) -> int:
        return len(self._waiting)
