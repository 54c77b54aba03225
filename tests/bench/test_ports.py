"""The ports benchmarks and tests start servers on: free, distinct, below the kernel's ephemeral
range (no outgoing connection can take one between the check and the server's bind), and in a
parallel test run from the worker's own slice (no other worker picks it)."""

from __future__ import annotations

import itertools
import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from proxybench import ports

from tests.helpers.ports import free_port


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    picked = [free_port() for _ in range(100)]
    assert len(set(picked)) == len(picked)
    low, high = ports.port_range()
    assert all(low <= port < high <= ports.ephemeral_low() for port in picked)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", picked[-1]))


def test_a_port_in_use_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        real, picks = ports.random.randrange, iter([busy, busy])
        monkeypatch.setattr(ports.random, "randrange", lambda low, high: next(picks, None) or real(low, high))
        assert ports.free_port() != busy
        assert next(picks, None) is None  # both picks of the busy port were tried and skipped


def test_each_worker_of_a_parallel_run_has_its_own_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "ephemeral_low", lambda: 32_768)
    slices = [ports.port_range({"PYTEST_XDIST_WORKER": f"gw{i}", "PYTEST_XDIST_WORKER_COUNT": "3"}) for i in range(3)]
    assert slices[0][0] == ports.LOWEST_PORT and slices[-1][1] <= 32_768
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(slices))
    assert all(high - low >= 7_000 for low, high in slices)
    assert ports.port_range({}) == (ports.LOWEST_PORT, 32_768)
    assert ports.port_range({"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "1"}) == (10_000, 32_768)
