"""Fixtures for the MCP path: the scripted MCP server (official `mcp` SDK) behind a real sidecar,
with the packaged support example as the policy (the same files the model-path tests use)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from sidecar.app import Running
from sidecar.scripted.mcp import ScriptedMcpServer

ADMIN_TOKEN = "mcp-admin-token-0123456789"
# The sidecar's view of the token (`TOKEN NAME GROUP,GROUP`): lee approves for the support leads
# (the group example:support names for customer replies).
ADMIN_TOKEN_LINE = f"{ADMIN_TOKEN} lee support-leads,finance-approvers"
# Both ways the official client connects: the current revision (stateless, _meta) and the
# previous one (initialize, Mcp-Session-Id), which it negotiates as 2025-11-25.
MODES = ("2026-07-28", "legacy")

StartMcp = Callable[..., Awaitable[Running]]


@pytest.fixture(params=[False, True], ids=["sse", "json"])
async def mcp_server(request: pytest.FixtureRequest) -> AsyncIterator[ScriptedMcpServer]:
    """The scripted server, answering requests as SSE streams (the SDK default) or JSON."""
    async with ScriptedMcpServer(json_response=request.param) as server:
        yield server


@pytest.fixture
async def sse_server() -> AsyncIterator[ScriptedMcpServer]:
    async with ScriptedMcpServer() as server:
        yield server


@pytest.fixture
def start_mcp(start_sidecar: Any) -> Callable[..., Awaitable[Running]]:
    async def _start(server: ScriptedMcpServer, **overrides: Any) -> Running:
        flags: dict[str, Any] = {
            "policies": "example:support",
            "admin_token": ADMIN_TOKEN_LINE,
            "mcp": {"servers": {"support": server.url}},
        }
        flags.update(overrides)
        running: Running = await start_sidecar(**flags)
        return running

    return _start


async def approve(admin_url: str, approval_id: str) -> dict[str, Any]:
    """What an approver does: the admin API, with a bearer token (its identity is recorded)."""
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{admin_url}/approvals/{approval_id}/approve", json={}, headers=headers) as r,
    ):
        assert r.status == 200, await r.text()
        body: dict[str, Any] = await r.json()
        return body


def payload(result: Any) -> dict[str, Any]:
    """The structured error a refused call carries (its one text block)."""
    assert result.is_error is True
    [block] = result.content
    value: dict[str, Any] = json.loads(block.text)
    return value
