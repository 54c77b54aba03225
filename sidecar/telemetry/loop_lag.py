"""How long the event loop was kept from running: `sidecar_event_loop_lag_seconds`.

A task asks to wake every `interval_s`; how late it wakes is the time something held the loop
(a slow computation, a blocking call, a long GC pause), during which no other request moved.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

INTERVAL_S = 0.02


class LoopLagMonitor:
    def __init__(self, observe: Callable[[float], None], interval_s: float = INTERVAL_S) -> None:
        self._observe = observe
        self._interval = interval_s
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(self._interval)
            self._observe(max(0.0, time.perf_counter() - asked - self._interval))

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="loop-lag")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
