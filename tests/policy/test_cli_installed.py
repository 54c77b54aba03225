"""The installed `sidecar policy` command, as CI and policy authors run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.policy.conftest import POLICIES, copy_policies

SIDECAR = str(Path(sys.executable).parent / "sidecar")


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """From a directory that is not the checkout: nothing may depend on the working directory."""
    return subprocess.run([SIDECAR, "policy", *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def test_shipped_policy_tests_pass(tmp_path: Path) -> None:
    done = _run("test", POLICIES, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("PASS: ")


def test_check_reports_file_and_line(tmp_path: Path) -> None:
    copy_policies(tmp_path)
    (tmp_path / "extra.rego").write_text("package sidecar\nimport rego.v1\n\nbroken := [1,, 2]\n")
    done = _run("check", str(tmp_path), cwd=tmp_path)
    assert done.returncode != 0
    assert f"{tmp_path}/extra.rego:4:" in done.stdout + done.stderr
