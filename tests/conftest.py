"""Fixtures shared by the whole suite: a scripted model and a sidecar in front of it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from sidecar.app import Running, start
from sidecar.config import load_settings
from sidecar.dialects.request_body import edited_shared_lists
from sidecar.policy.sources import init_directory
from sidecar.scripted import ScriptedModel
from tests.helpers.redis_server import run_redis_server

# Fixtures shared across directories (the OTLP receiver and traced sidecars).
pytest_plugins = ["tests.helpers.otlp"]

StartSidecar = Callable[..., Awaitable[Running]]


@pytest.fixture(autouse=True)
def _shared_tool_lists_untouched() -> Iterator[None]:
    """Tool lists are shared between requests (sidecar.dialects.request_body) and frozen; this
    checks after every test that nothing edited one behind the freeze (e.g. through dict.__setitem__)."""
    yield
    assert edited_shared_lists() == [], "a shared request tool list was edited in place"


@pytest.fixture
async def model() -> AsyncIterator[ScriptedModel]:
    async with ScriptedModel([]) as scripted:
        yield scripted


@pytest.fixture
async def start_sidecar(model: ScriptedModel, tmp_path: Any) -> AsyncIterator[StartSidecar]:
    """Starts sidecars on free ports, upstreams pointing at the scripted model.

    Unless a test picks `policies`, it gets the packaged default with one change: unlisted
    tools are read-only. Most tests send the same call more than once in one (derived)
    session to check transparency; under the real default (every tool side-effecting) those
    repeats are replays. The default itself is tested in tests/policy and tests/replay."""
    running: list[Running] = []
    transparent = tmp_path / "transparent-policy"
    init_directory(transparent)
    data_file = transparent / "data.json"
    data = json.loads(data_file.read_text())
    data["sidecar"]["unlisted_tool"]["side_effects"] = False
    data_file.write_text(json.dumps(data))

    async def _start(**overrides: Any) -> Running:
        flags: dict[str, Any] = {
            "listen": "127.0.0.1:0",
            "admin_listen": "127.0.0.1:0",
            "anthropic_upstream": model.url,
            "openai_upstream": model.url,
            "rejection_log": {"path": str(tmp_path / "rejections.jsonl")},
            "policies": str(transparent),
        }
        flags.update(overrides)
        sidecar = await start(load_settings(flags=flags, environ={}))
        running.append(sidecar)
        return sidecar

    yield _start
    for sidecar in running:
        await sidecar.stop()


@pytest.fixture
async def sidecar(start_sidecar: StartSidecar) -> Running:
    return await start_sidecar()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """One real redis-server for the whole run (tests that share it flush what they use)."""
    with run_redis_server() as url:
        yield url
