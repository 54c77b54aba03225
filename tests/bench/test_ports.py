"""The benchmarks' ports: free, distinct, and outside the kernel's ephemeral range, so that no
outgoing connection can take one between the check and the server's bind."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from proxybench import procs
from proxybench.procs import _ephemeral_low, free_port


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    ports = [free_port() for _ in range(100)]
    assert len(set(ports)) == len(ports)
    assert all(10_000 <= port < _ephemeral_low() for port in ports)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[-1]))


def test_a_port_in_use_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        picks = iter([busy, busy, 20_001])
        monkeypatch.setattr(procs.random, "randrange", lambda low, high: next(picks))
        monkeypatch.setattr(procs, "_ephemeral_low", lambda: 60_000)
        assert procs.free_port() == 20_001
