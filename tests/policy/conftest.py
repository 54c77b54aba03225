"""Fixtures for the policy tests: engines over the packaged support example, an OPA Data API
stub, a real `opa run --server` when an opa binary is on PATH, a writable copy of the
policies, log capture for the policy logger, /metrics scraping, polling with a deadline."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import aiohttp
import orjson
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from sidecar.config import PolicySettings
from sidecar.policy.opa_stub import make_app
from sidecar.policy.sources import init_directory
from sidecar.scripted import RecordedRequest
from tests.helpers import opa_go

REPO = Path(__file__).resolve().parents[2]
# The packaged support example (sidecar/policy/library), by the name users give it.
POLICIES = "example:support"
T = TypeVar("T")


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
def opa_bindings(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """OPA's Go evaluator (see tests/helpers/opa_go.py)."""
    return opa_go.load(tmp_path_factory.mktemp("opa-go"))


def copy_policies(target: Path) -> Path:
    """The packaged support example in a directory the test may edit (`sidecar policy init`)."""
    init_directory(target, "support")
    return target


def edit_data(directory: Path, change: Callable[[dict[str, Any]], None]) -> None:
    path = directory / "data.json"
    data = orjson.loads(path.read_bytes())
    change(data["sidecar"])
    path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))


def deny_unlisted(sidecar_data: dict[str, Any]) -> None:
    sidecar_data["unlisted_tool"]["allow"] = False


@pytest.fixture
def strict_policies(tmp_path: Path) -> Path:
    """Shipped policies with unlisted tools denied (rule 4)."""
    directory = copy_policies(tmp_path / "policies")
    edit_data(directory, deny_unlisted)
    return directory


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.events: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "event", None)
        if event is not None:
            self.events.append({"event": event, **getattr(record, "fields", {})})

    def named(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event]


@pytest.fixture
def policy_log() -> Iterator[Captured]:
    """Structured events logged under sidecar.policy (and log_event's default logger)."""
    handler = Captured()
    loggers = [logging.getLogger("sidecar.policy"), logging.getLogger("sidecar")]
    saved = [(lg.level, lg.propagate) for lg in loggers]
    loggers[0].propagate = False  # captured here, not twice
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
    yield handler
    for lg, (level, propagate) in zip(loggers, saved, strict=True):
        lg.removeHandler(handler)
        lg.setLevel(level)
        lg.propagate = propagate


async def get_json(url: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.json(content_type=None)


async def metric(admin_url: str, name: str, **labels: str) -> float:
    """One sample from /metrics (0.0 when the series does not exist)."""
    async with aiohttp.ClientSession() as session, session.get(f"{admin_url}/metrics") as response:
        text = await response.text()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


async def poll(probe: Callable[[], Awaitable[T | None]], deadline_s: float = 2.0, what: str = "") -> T:
    """The first non-None probe result within the deadline (polled every 50 ms)."""
    started = time.monotonic()
    while True:
        value = await probe()
        if value is not None:
            return value
        if time.monotonic() - started > deadline_s:
            raise AssertionError(f"not within {deadline_s}s: {what}")
        await asyncio.sleep(0.05)


def declared_tools(request: RecordedRequest) -> list[str]:
    """Tool names a recorded upstream request offered the model, for any protocol."""
    names = []
    for tool in request.json.get("tools") or []:
        names.append(tool["function"]["name"] if "function" in tool else tool["name"])
    return names
