"""Fixtures for the approval tests: the real policy, an admin token, the CLI as a subprocess."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sidecar.app import Running
from sidecar.model import ToolCall
from sidecar.policy.sources import init_directory
from sidecar.scripted import ToolCallSpec
from sidecar.state import Approval
from tests.helpers.redis_server import run_redis_server

REPO = Path(__file__).resolve().parents[2]
SIDECAR_BIN = str(Path(sys.executable).with_name("sidecar"))
TOKEN = "admin-token-0123456789"
# The sidecar's view of TOKEN (`TOKEN NAME GROUP,GROUP`): alice decides for both groups the
# support example names. OTHER_TOKEN (bob) is an operator: outside both.
APPROVER = "alice"
TOKEN_LINE = f"{TOKEN} {APPROVER} support-leads,finance-approvers"
OTHER_TOKEN = "operator-token-0123456789"
OTHER_LINE = f"{OTHER_TOKEN} bob operators"
SEND_SCHEMA = {
    "type": "object",
    "properties": {
        "ticket_id": {"type": "string"},
        "to": {"type": "string"},
        "body": {"type": "string"},
    },
    "required": ["ticket_id", "to", "body"],
}
SEARCH_SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
TOOLS = {"support_replies_send": SEND_SCHEMA, "support_tickets_search": SEARCH_SCHEMA}
OUTSIDE = {"ticket_id": "T-1", "to": "bob@outside.org", "body": "Your refund is on its way."}
INSIDE = {"ticket_id": "T-1", "to": "ana@example.com", "body": "Hello"}


def send(arguments: dict[str, Any]) -> ToolCallSpec:
    return ToolCallSpec("support_replies_send", dict(arguments))


@pytest.fixture
def policies_dir(tmp_path: Path) -> Path:
    """The packaged support example, with `support_replies_send` repeatable (so that a second
    identical call reaches the approval logic instead of the replay guard's remembered answer)
    and approval only for recipients outside example.com (the example asks for every reply)."""
    target = tmp_path / "policies"
    init_directory(target, "support")
    data = json.loads((target / "data.json").read_text())
    send = data["sidecar"]["tools"]["support_replies_send"]
    send["repeatable"] = True
    send["approval"] = {
        "recipient_arg": "to",
        "allowed_domains": ["example.com"],
        "group": "support-leads",
        "ttl_s": 3600,
    }
    (target / "data.json").write_text(json.dumps(data))
    return target


StartApprovals = Callable[..., Awaitable[Running]]


async def create_approval(
    running: Running,
    session: str = "s-1",
    tool: str = "support_replies_send",
    group: str = "support-leads",
    arguments: dict[str, Any] | None = None,
) -> Approval:
    """A pending approval, created the way the approval filter does (no model round needed)."""
    arguments = dict(OUTSIDE if arguments is None else arguments)
    call = ToolCall("call_1", tool, arguments, "")
    a, created = await running.sidecar.approvals.find_or_create(
        session, tool, arguments, call.args_hash, group, 600, ["needs a human"]
    )
    assert created
    return a


@pytest.fixture
def start_approvals(start_sidecar: Any, policies_dir: Path) -> StartApprovals:
    """A sidecar with the real policy and an admin token, alice's (overridable)."""

    async def _start(**overrides: Any) -> Running:
        flags: dict[str, Any] = {"policies": str(policies_dir), "admin_token": TOKEN_LINE}
        flags.update(overrides)
        running: Running = await start_sidecar(**flags)
        return running

    return _start


@dataclass
class CliResult:
    code: int
    out: str
    err: str


async def cli(admin_url: str, *args: str, token: str | None = TOKEN) -> CliResult:
    """`sidecar approvals …` as a real subprocess (async: the sidecar shares this loop)."""
    command = [SIDECAR_BIN, "approvals", *args, "--admin-url", admin_url]
    if token is not None:
        command += ["--token", token]
    proc = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin"},
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return CliResult(proc.returncode, out.decode(), err.decode())


async def admin(
    running: Running, method: str, path: str, token: str | None = TOKEN, body: Any = None
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, running.admin_url + path, headers=headers, json=body) as response,
    ):
        return response.status, await response.json(content_type=None)


async def pending(running: Running) -> list[dict[str, Any]]:
    status, data = await admin(running, "GET", "/approvals")
    assert status == 200, data
    approvals: list[dict[str, Any]] = data["approvals"]
    return approvals


async def wait_for_pending(running: Running, count: int = 1) -> list[dict[str, Any]]:
    """Until `count` approvals are pending (a held request is waiting for a human). Polls the
    admin API, as an operator would: there is no event to wait on across the HTTP boundary."""
    while len(found := await pending(running)) < count:  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    return found


async def metric(running: Running, line_prefix: str) -> float:
    async with aiohttp.ClientSession() as session, session.get(running.admin_url + "/metrics") as response:
        text = await response.text()
    for line in text.splitlines():
        if line.startswith(line_prefix + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{line_prefix} not in /metrics")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with run_redis_server() as url:
        yield url


@pytest.fixture
def audit() -> Iterator[list[dict[str, Any]]]:
    """The fields of every `approval` audit line logged while the test runs."""
    lines: list[dict[str, Any]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if getattr(record, "event", None) == "approval":
                lines.append(record.fields)  # type: ignore[attr-defined]

    handler, logger = Keep(), logging.getLogger("sidecar")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
