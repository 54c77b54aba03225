"""A wheel install works from anywhere: built from this checkout, installed into a fresh venv
(dependencies from the environment's pip sources and cache), then `sidecar demo` and
`sidecar policy test` run from an unrelated directory."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(*cmd: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=540, cwd=cwd)


def test_wheel_installs_and_runs_outside_the_checkout(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(REPO), cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    [wheel] = wheels.glob("sidecar-*.whl")
    env = tmp_path / "venv"
    # A fresh venv: dependencies come from the configured pip sources (PyPI), mostly its cache.
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env)
    pip = str(env / "bin" / "pip")
    installed = _run(pip, "install", "-q", f"{wheel}[demo]", cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sidecar = str(env / "bin" / "sidecar")
    demo = _run(sidecar, "demo", cwd=elsewhere)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    shown = " ".join(line.strip() for line in demo.stdout.splitlines())  # the demo wraps long lines
    assert "support_replies_send always needs approval by group support-leads" in shown
    assert "that domain is blocked for this tool" in shown
    tested = _run(sidecar, "policy", "test", "example:support", cwd=elsewhere)
    assert tested.returncode == 0, tested.stdout
    assert tested.stdout.strip().splitlines()[-1].startswith("PASS: ")
    copied = _run(sidecar, "policy", "init", "mine", "--example", "support", cwd=elsewhere)
    assert copied.returncode == 0, copied.stderr
    again = _run(sidecar, "policy", "test", "mine", cwd=elsewhere)
    assert again.returncode == 0 and "PASS: " in again.stdout
    assert not (elsewhere / "policies").exists()
