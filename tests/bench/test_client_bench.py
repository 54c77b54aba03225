"""bench_client.py: a short run prints one row per reply kind, with a CPU figure for each client
and their ratio. It never asserts a number's size (the machine is shared and noisy)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_short_run_reports_both_clients_for_every_reply() -> None:
    done = subprocess.run(
        [sys.executable, "bench_client.py", "--requests", "16", "--rounds", "1"],
        cwd=REPO / "bench",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if re.match(r"(Anthropic|Chat) (whole|streamed) ", line)]
    assert len(rows) == 4, done.stdout
    assert all(re.search(r"\s\d+\s+\d+\s+\d+\.\dx$", row) for row in rows), done.stdout
