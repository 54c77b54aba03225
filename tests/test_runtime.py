"""The process runtime: free C-heap pages go back to the system once start-up is done."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from sidecar.runtime import settle_heap


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_settle_heap_returns_freed_heap_pages() -> None:
    # 40 MiB in C-heap blocks (above pymalloc's 512 bytes, below mmap's threshold), freed but
    # for every 64th: the survivors pin the heap's top, so only malloc_trim gives pages back.
    blocks = [bytes(2048) + i.to_bytes(4, "little") for i in range(20_000)]
    keep = blocks[::64]
    del blocks
    before = _rss_mib()
    assert settle_heap()
    assert before - _rss_mib() > 10
    assert keep
