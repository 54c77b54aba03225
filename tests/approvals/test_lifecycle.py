"""Approvals outlive the process (SQLite, Redis) and expire on time (moved clock)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import redis

from sidecar.app import start
from sidecar.config import load_settings
from sidecar.scripted import Turn
from sidecar.timefmt import parse_iso
from tests.approvals.conftest import OUTSIDE, TOKEN_LINE, TOOLS, admin, cli, metric, pending, send
from tests.e2e.agents import AGENTS


def _settings(model, tmp_path, policies_dir, state):
    return load_settings(
        flags={
            "listen": "127.0.0.1:0",
            "admin_listen": "127.0.0.1:0",
            "anthropic_upstream": model.url,
            "openai_upstream": model.url,
            "rejection_log": {"path": str(tmp_path / "rejections.jsonl")},
            "policies": str(policies_dir),
            "admin_token": TOKEN_LINE,
            "state": state,
        },
        environ={},
    )


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_pending_approval_survives_a_restart(model, tmp_path, policies_dir, backend, request):
    if backend == "redis":
        url = request.getfixturevalue("redis_url")
        with redis.Redis.from_url(url) as client:
            client.flushdb()
        state = {"backend": "redis", "redis_url": url}
    else:
        state = {"backend": "sqlite", "sqlite_path": str(tmp_path / "state.db")}
    settings = _settings(model, tmp_path, policies_dir, state)
    headers = {"X-Sidecar-Session": "restart"}

    first = await start(settings)
    try:
        model.add_turns([Turn(tool_calls=[send(OUTSIDE)]), Turn(text="Awaiting approval.")])
        agent = AGENTS["anthropic"](first.proxy_url, TOOLS, headers=headers)
        await agent.ask(stream=True)
        [waiting] = await pending(first)
    finally:
        await first.stop()

    second = await start(settings)
    try:
        assert [a["id"] for a in await pending(second)] == [waiting["id"]]
        done = await cli(second.admin_url, "approve", waiting["id"])
        assert done.code == 0, done.err
        agent = AGENTS["anthropic"](second.proxy_url, TOOLS, headers=headers)
        model.add_turns([Turn(tool_calls=[send(OUTSIDE)])])
        received = await agent.ask(stream=False)
        assert received.calls == [("support_replies_send", OUTSIDE)]
        _, record = await admin(second, "GET", f"/approvals/{waiting['id']}")
        assert (record["status"], record["decided_by"]) == ("consumed", "alice")
    finally:
        await second.stop()


async def test_expiry(model, start_approvals, tmp_path):
    running = await start_approvals()
    store = running.sidecar.state
    now = [store.limits.clock()]
    store.limits = dataclasses.replace(store.limits, clock=lambda: now[0])
    agent = AGENTS["chat"](running.proxy_url, TOOLS, headers={"X-Sidecar-Session": "slow"})

    model.add_turns([Turn(tool_calls=[send(OUTSIDE)]), Turn(text="Awaiting approval.")])
    await agent.ask(stream=False)
    [first] = await pending(running)
    agent.answer({})
    assert parse_iso(first["expires"]) == pytest.approx(now[0] + 3600, abs=1)  # ttl_s of the policy data

    now[0] += 3601
    assert await pending(running) == []  # reads as expired at once
    expired = await running.sidecar.approvals.sweep()
    assert [a.id for a in expired] == [first["id"]]
    assert await running.sidecar.approvals.sweep() == []  # counted once
    assert await metric(running, 'sidecar_approvals_total{outcome="expired"}') == 1
    assert await metric(running, "sidecar_approvals_pending") == 0
    late = await cli(running.admin_url, "approve", first["id"])
    assert late.code == 1 and "conflict" in late.err and "already expired" in late.err

    # The call asks again: a new approval. Approved, then not used in time: a third.
    model.add_turns([Turn(tool_calls=[send(OUTSIDE)]), Turn(text="Awaiting approval.")])
    await agent.ask(stream=False)
    second = AGENTS["chat"].tool_outputs([r for r in model.requests if r.protocol][-1])[0]["approval_id"]
    assert second != first["id"]
    agent.answer({})
    assert (await admin(running, "POST", f"/approvals/{second}/approve"))[0] == 200
    now[0] += 3601
    model.add_turns([Turn(tool_calls=[send(OUTSIDE)]), Turn(text="Awaiting approval again.")])
    assert (await agent.ask(stream=False)).calls == []
    third = AGENTS["chat"].tool_outputs([r for r in model.requests if r.protocol][-1])[0]
    assert third["status"] == "approval_required" and third["approval_id"] not in (first["id"], second)

    await running.sidecar.rejections.aflush()
    statuses = [json.loads(line).get("status") for line in (tmp_path / "rejections.jsonl").read_text().splitlines()]
    assert statuses == ["approval_required"] * 3
