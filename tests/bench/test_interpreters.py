"""bench_interpreters.py: a short run reports each `sidecar` script with the interpreter it
runs on. It never asserts a number's size (the machine is shared and noisy)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_interpreters import interpreter_of

REPO = Path(__file__).resolve().parents[2]
SIDECAR = Path(sys.executable).with_name("sidecar")


def test_the_interpreter_is_the_scripts_first_line(tmp_path: Path) -> None:
    script = tmp_path / "tool"
    script.write_text(f"#!{sys.executable}\nprint()\n")
    assert interpreter_of(script) == os.path.realpath(sys.executable)
    script.write_text("print()\n")
    assert interpreter_of(script) == "?"
    assert interpreter_of(tmp_path / "absent") == "?"


def test_a_short_run_reports_each_sidecar() -> None:
    done = subprocess.run(
        [sys.executable, "bench_interpreters.py", str(SIDECAR), str(SIDECAR), "--rounds", "1", "--seconds", "0.5"],
        cwd=REPO / "bench",
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if os.path.realpath(sys.executable) in line]
    assert len(rows) == 2, done.stdout
    assert all(re.match(r"\s*\d+\s+[+-]\d+\.\d%", row) and "failed" not in row for row in rows), done.stdout
    assert rows[0].split()[1] == "+0.0%"
