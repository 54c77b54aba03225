"""A sidecar as its own OS process (`python -m sidecar.cli run`), for what in-process tests
cannot show: two replicas, a restart, or the sidecar's own event loop measured alone."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from tests.helpers.ports import free_port

REPO = Path(__file__).resolve().parents[2]


@dataclass
class SidecarProcess:
    proxy: str
    admin: str
    proc: asyncio.subprocess.Process
    log: Path


@asynccontextmanager
async def sidecar_process(model_url: str, env: dict[str, str], tmp: Path, *args: str) -> AsyncIterator[tuple[str, str]]:
    """Yields (proxy URL, admin URL) once /healthz answers; stops the process afterwards."""
    async with running_sidecar(model_url, env, tmp, *args) as running:
        yield running.proxy, running.admin


@asynccontextmanager
async def running_sidecar(model_url: str, env: dict[str, str], tmp: Path, *args: str) -> AsyncIterator[SidecarProcess]:
    """The process itself too (to signal it, read its log)."""
    listen, admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    log = tmp / f"sidecar-{listen[-5:]}.log"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sidecar.cli",
        "run",
        "--listen",
        listen,
        "--admin-listen",
        admin,
        "--anthropic-upstream",
        model_url,
        "--openai-upstream",
        model_url,
        *args,
        cwd=REPO,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=log.open("wb"),
        env={**os.environ, "SIDECAR_REJECTION_LOG__PATH": str(tmp / f"rejections-{listen[-5:]}.jsonl"), **env},
    )
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(300):  # up to ~15 s for the interpreter to start
                assert proc.returncode is None, log.read_text()
                try:
                    async with http.get(f"http://{admin}/healthz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
            else:
                raise AssertionError("sidecar process did not become healthy")
        yield SidecarProcess(f"http://{listen}", f"http://{admin}", proc, log)
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()
