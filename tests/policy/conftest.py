"""Fixtures for the policy tests: engines over the shipped policies, an OPA Data API stub,
and a real `opa run --server` when an opa binary is on PATH."""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from sidecar.config import PolicySettings
from sidecar.policy.opa_stub import make_app
from tests.helpers.ports import free_port

REPO = Path(__file__).resolve().parents[2]
POLICIES = str(REPO / "policies")
OPA_BINARY = shutil.which("opa")


def settings(**overrides: Any) -> PolicySettings:
    return PolicySettings.model_validate(overrides)


class StubServer:
    """The OPA stub app served on a free loopback port."""

    def __init__(self, runner: web.AppRunner, url: str, app: web.Application) -> None:
        self.runner = runner
        self.url = url
        self.app = app


async def start_stub(policies_dir: str = POLICIES, **knobs: Any) -> StubServer:
    app = make_app(policies_dir, **knobs)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return StubServer(runner, f"http://127.0.0.1:{port}", app)


@pytest.fixture
async def opa_stub() -> AsyncIterator[StubServer]:
    server = await start_stub()
    yield server
    await server.runner.cleanup()


@pytest.fixture(scope="session")
def real_opa() -> Iterator[str]:
    """`opa run --server` over the shipped policies (only when the binary exists)."""
    assert OPA_BINARY is not None
    port = free_port()
    proc = subprocess.Popen(
        [OPA_BINARY, "run", "--server", "--addr", f"127.0.0.1:{port}", POLICIES],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def wait() -> None:  # sync: this fixture may be set up while an event loop runs
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("opa did not start")

    try:
        wait()
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
