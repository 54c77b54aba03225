"""How a sidecar process runs: its event loop and its garbage collector (one process, or each
worker of `sidecar run --workers N`)."""

from __future__ import annotations

import asyncio
import ctypes
import gc
from collections.abc import Coroutine
from typing import Any

# The cyclic collector's default thresholds (700, 10, 10) run a young collection every 700 net
# allocations: several per request (a 16 KB agent body parses into thousands of objects), each
# also walking what the request keeps alive. Measured on the shared harness's whole-reply
# scenario at c=64: 1170 us of CPU per request with the defaults, 950 with these and the
# start-up heap frozen (no different from the collector off). Request objects are acyclic;
# cycles (tracebacks, closures) wait a little longer for a collection.
GC_THRESHOLDS = (7_000, 20, 20)


def settle_gc() -> None:
    """Once serving: what start-up built (modules, policy, schemas) is never collected, and
    young collections run a tenth as often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    release_free_memory()


def release_free_memory() -> bool:
    """Give the C heap's free pages back to the system (glibc's `malloc_trim`); False where
    there is no glibc. Compiling the policy frees several MiB that the heap would otherwise
    keep: measured 5 MiB of RSS after start-up with the packaged policy."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own symbols: libc's where it is glibc
    except (OSError, AttributeError):
        return False
    trim(0)
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
