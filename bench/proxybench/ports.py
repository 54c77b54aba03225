"""Free loopback ports for the servers a benchmark (or a test) starts.

A port is checked free, then handed to a server that binds it a moment later. Two things can
take it in between, and each made a start fail now and then with "address in use":

- an outgoing connection of any process (the load's, a sidecar's to the mock) takes its local
  port from the kernel's ephemeral range: so ports are picked below that range;
- another process picking at the same time, such as another worker of a parallel test run
  (pytest-xdist names each in PYTEST_XDIST_WORKER, gw0, gw1, ...): so each worker picks from
  its own slice of the ports.

Within one process a port is never handed out twice.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

LOWEST_PORT = 10_000
_handed_out: set[int] = set()


def ephemeral_low(default: int = 32_768) -> int:
    """The first port of the kernel's ephemeral range (Linux), else the usual one."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return default


def port_range(environ: dict[str, str] | None = None) -> tuple[int, int]:
    """[low, high) this process picks from: below the ephemeral range, its worker's slice of it
    when it is one of several pytest-xdist workers."""
    env = os.environ if environ is None else environ
    low, high = LOWEST_PORT, ephemeral_low()
    worker, count = env.get("PYTEST_XDIST_WORKER", ""), env.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1:
        index, width = int(worker[2:]), (high - low) // int(count)
        if index < int(count) and width >= 1000:
            low, high = low + index * width, low + (index + 1) * width
    return low, high


def free_port() -> int:
    """A loopback port free when asked, from this process's range, not handed out before by it.
    Falls back to one the kernel picks when the range is too small to pick from."""
    low, high = port_range()
    for _ in range(200):
        candidate = random.randrange(low, high) if high - low >= 1000 else 0
        if candidate in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            port: int = sock.getsockname()[1]
        _handed_out.add(port)
        return port
    raise OSError(f"no free loopback port in {low}-{high - 1} after 200 tries")
