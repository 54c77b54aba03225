"""How a sidecar process runs: its event loop and its garbage collector (one process, or each
worker of `sidecar run --workers N`)."""

from __future__ import annotations

import asyncio
import ctypes
import gc
from collections.abc import Coroutine
from typing import Any

# A young collection runs when the tracked objects allocated since the last one, minus those
# freed, pass the first threshold. Under load that count swings with the requests in flight:
# 64 of them allocate and free tens of thousands of objects (parsed bodies, filters' state,
# aiohttp's). The defaults (700) and the 7,000 used before trip on that swing alone, and each
# collection walks everything the requests in flight hold, which is acyclic and freed by
# reference counting anyway. Measured at c=64 on the shared harness's bodies (shipped policy
# library; collections counted and timed with gc.callbacks in the sidecar, over 8 s of load):
# at 7,000, ~200 young collections of ~2.4 ms each, 0.45-0.5 s of every 8 (60-100 us per
# request); at 50,000, none in the whole-reply scenario and one in the streamed one. A
# collection now runs when 50,000 objects are kept (the ledger, the legs index) or left in
# cycles (tracebacks): it walks more at once (14-20 ms measured), far less often, and cyclic
# garbage waits for up to 50,000 objects. `bench/bench_sessions.py` (100,000 sessions): the
# same RSS with either threshold (138.8 MiB).
GC_THRESHOLDS = (50_000, 20, 20)


def settle_process() -> None:
    """Once serving: what start-up built (modules, policy, schemas) is never collected, young
    collections run a tenth as often, and the C heap is settled (`settle_heap`)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    settle_heap()


# glibc's mallopt parameter, and the size from which a block gets a mapping of its own.
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 1 << 20


def _glibc() -> ctypes.CDLL | None:
    """The process's own symbols where libc is glibc (probed by `malloc_trim`, which only glibc
    has; `mallopt` comes with it); None elsewhere."""
    try:
        libc = ctypes.CDLL(None)
        libc.malloc_trim  # noqa: B018 (the probe: AttributeError without glibc)
    except (OSError, AttributeError):
        return None
    return libc


def settle_heap() -> bool:
    """Fix glibc's mmap threshold at 1 MiB, then give the heap's free pages back to the system;
    False where there is no glibc.

    The threshold: glibc raises it after freeing a large mapped block, and then a resized
    dict's old table (the in-memory ledger's session table holds tens of thousands of sessions)
    is allocated in the heap and stays there once freed. Measured with
    `bench/bench_sessions.py` when the ledger still had a 100,000-entry replay index: one such
    resize added 10 MiB of RSS at 225,000 sessions (not measured again since the index went).
    The trim: compiling the policy frees several MiB the heap would otherwise keep (5 MiB of
    RSS after start-up)."""
    libc = _glibc()
    if libc is None:
        return False
    libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    libc.malloc_trim(0)
    return True


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """uvloop when it is installed (a faster event loop and socket transports, in C), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)
