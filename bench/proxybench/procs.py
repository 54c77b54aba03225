"""The processes a benchmark run starts: each on a free loopback port, its output in a log
file, its CPU time read from /proc, and every one stopped by its PID when the run ends.

Each process writes its output to a pipe, which `cat` copies to the log file: in a container,
stdout and stderr are pipes to the runtime, and the sidecar writes its log lines to a pipe
differently than to a regular file (sidecar/telemetry/logs.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from proxybench.ports import free_port

BENCH_DIR = Path(__file__).resolve().parents[1]
REPO = BENCH_DIR.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads (/proc/<pid>/stat fields 14 and 15)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may contain spaces
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class StartError(RuntimeError):
    """A process exited or never became ready; the message carries its log's tail."""


@dataclass
class Service:
    """One started process: its name, base URL, PID and log."""

    name: str
    url: str
    proc: subprocess.Popen[bytes]
    log: Path
    copier: subprocess.Popen[bytes] | None = None  # the `cat` from the process's pipe to its log
    ready_url: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu(self) -> float:
        """The process and its children (the workers of `sidecar run --workers N`)."""
        return sum(cpu_seconds(pid) for pid in _tree(self.pid))

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Poll `ready_url` (or the base URL) until it answers 200, or fail with the log."""
        target = self.ready_url or self.url
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise StartError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
                try:
                    async with session.get(target, timeout=aiohttp.ClientTimeout(total=2)) as response:
                        if response.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        raise StartError(f"{self.name} not ready at {target} after {timeout_s:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s: by this process's own PID only."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if self.copier is not None:  # the pipe's write end is gone with the process: cat ends
            try:
                self.copier.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.copier.kill()
                self.copier.wait(timeout=5)


class Services:
    """Starts processes and stops every one of them (also from atexit, via `stop_all`)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.started: list[Service] = []

    def spawn(self, name: str, url: str, argv: list[str], env: dict[str, str] | None = None) -> Service:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            copier = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=out)
            assert copier.stdin is not None
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=REPO,
                    stdin=subprocess.DEVNULL,
                    stdout=copier.stdin,
                    stderr=subprocess.STDOUT,
                    env=_environment(env or {}),
                )
            finally:
                copier.stdin.close()  # the process holds the write end now
        service = Service(name, url, proc, log, copier=copier)
        self.started.append(service)
        return service

    def bench_server(self, name: str, module: str, *args: str, prefix: Sequence[str] = ()) -> Service:
        """A server of this package (`python -m proxybench.<module> --port N`); `prefix` runs it
        under another command (bench_instructions.py: valgrind)."""
        port = free_port()
        argv = [*prefix, sys.executable, "-m", f"proxybench.{module}", "--port", str(port), *args]
        return self.spawn(name, f"http://127.0.0.1:{port}", argv)

    def stop_all(self) -> None:
        for service in reversed(self.started):
            service.stop()
        self.started.clear()


def _tree(pid: int) -> list[int]:
    """pid and its descendants, from /proc/<pid>/task/<tid>/children; gone processes skipped."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                pending += [int(child) for child in task.read_text().split()]
            except OSError:
                continue
    return found


def _environment(extra: dict[str, str]) -> dict[str, str]:
    """The caller's environment without SIDECAR_* (they would override a sidecar's config
    file), with this package importable."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SIDECAR_")}
    current = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join([str(BENCH_DIR), str(REPO), *([current] if current else [])])
    return {**env, **extra}
