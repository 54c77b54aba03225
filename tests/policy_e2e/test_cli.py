"""The installed `sidecar policy` command, as CI and policy authors run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.policy_e2e.conftest import POLICIES, REPO

SIDECAR = str(Path(sys.executable).parent / "sidecar")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SIDECAR, "policy", *args], capture_output=True, text=True, timeout=60, cwd=REPO)


def test_shipped_policy_tests_pass() -> None:
    done = _run("test", f"{POLICIES}/")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("PASS: ")


def test_check_reports_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "data.json").write_text((POLICIES / "data.json").read_text())
    (tmp_path / "sidecar.rego").write_text((POLICIES / "sidecar.rego").read_text())
    (tmp_path / "extra.rego").write_text("package sidecar\nimport rego.v1\n\nbroken := [1,, 2]\n")
    done = _run("check", str(tmp_path))
    assert done.returncode != 0
    assert f"{tmp_path}/extra.rego:4:" in done.stdout + done.stderr
