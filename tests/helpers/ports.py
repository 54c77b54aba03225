"""Free loopback ports for servers the tests start: the benchmarks' picker
(bench/proxybench/ports.py), below the kernel's ephemeral range and, in a parallel run, from
this worker's own slice, so that neither an outgoing connection nor another worker takes a port
between its check and the server's bind."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from proxybench.ports import free_port

__all__ = ["free_port"]
