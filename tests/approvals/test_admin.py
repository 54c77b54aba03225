"""Admin API and CLI: authentication, conflicts, listing; nothing else can approve."""

from __future__ import annotations

import asyncio
import json
import os
import re

import aiohttp
import pytest

from sidecar.scripted import Turn
from sidecar.timefmt import parse_iso
from tests.approvals.conftest import (
    OUTSIDE,
    SEND_SCHEMA,
    TOKEN,
    TOOLS,
    admin,
    cli,
    create_approval,
    metric,
    pending,
    send,
)
from tests.e2e.agents import AGENTS


async def test_requests_without_a_valid_token_are_refused_and_counted(start_approvals):
    running = await start_approvals()
    a = await create_approval(running)

    for token in (None, "wrong-token", TOKEN + "x", ""):
        status, body = await admin(running, "POST", f"/approvals/{a.id}/approve", token=token)
        assert status == 401 and body["error"] == "unauthorized", body
    status, _ = await admin(running, "GET", "/approvals", token=None)
    assert status == 401
    assert await metric(running, "sidecar_admin_unauthorized_total") == 5

    refused = await cli(running.admin_url, "approve", a.id, token="wrong-token")
    assert refused.code == 1
    assert "unauthorized" in refused.err and "invalid admin token" in refused.err
    assert (await running.sidecar.state.get_approval(a.id)).status == "pending"
    assert await metric(running, "sidecar_admin_unauthorized_total") == 6


async def test_without_a_configured_token_every_request_is_refused(start_approvals):
    running = await start_approvals(admin_token=None)
    a = await create_approval(running)
    for method, path in (
        ("GET", "/approvals"),
        ("GET", f"/approvals/{a.id}"),
        ("POST", f"/approvals/{a.id}/approve"),
        ("POST", f"/approvals/{a.id}/deny"),
    ):
        status, body = await admin(running, method, path, token="anything")
        assert status == 403
        assert "no admin token is configured" in body["message"]
    refused = await cli(running.admin_url, "list", token="anything")
    assert refused.code == 1 and "no admin token is configured" in refused.err
    assert (await running.sidecar.state.get_approval(a.id)).status == "pending"


async def test_token_file_is_reread_when_the_secret_rotates(start_approvals, tmp_path):
    # A Kubernetes secret volume: the file is a symlink into a timestamped directory that
    # the kubelet swaps atomically.
    old_dir, new_dir = tmp_path / "..2026_01", tmp_path / "..2026_02"
    old_dir.mkdir()
    new_dir.mkdir()
    (old_dir / "tokens").write_text("first-token ann support-leads\n\nsecond-token ben support-leads\n")
    (new_dir / "tokens").write_text("rotated-token cat support-leads\n")
    link = tmp_path / "tokens"
    link.symlink_to(old_dir / "tokens")
    running = await start_approvals(admin_token=None, admin_token_file=str(link))

    assert (await admin(running, "GET", "/approvals", token="first-token"))[0] == 200
    assert (await admin(running, "GET", "/approvals", token="second-token"))[0] == 200
    assert (await admin(running, "GET", "/approvals", token="rotated-token"))[0] == 401

    swap = tmp_path / "tokens.tmp"
    swap.symlink_to(new_dir / "tokens")
    os.replace(swap, link)
    assert (await admin(running, "GET", "/approvals", token="first-token"))[0] == 401
    assert (await admin(running, "GET", "/approvals", token="rotated-token"))[0] == 200

    a = await create_approval(running)
    token_file = tmp_path / "cli-token"
    token_file.write_text("rotated-token\n")
    done = await cli(running.admin_url, "approve", a.id, "--token-file", str(token_file), token=None)
    assert done.code == 0, done.err
    # The approver is the name the token's line gives, never the token itself.
    assert (await running.sidecar.state.get_approval(a.id)).decided_by == "cat"
    assert f"{a.id}: approved by cat" in done.out


async def test_concurrent_approve_and_deny_exactly_one_wins(start_approvals):
    running = await start_approvals()
    for _ in range(10):
        a = await create_approval(running, session=f"race-{os.urandom(4).hex()}")
        results = await asyncio.gather(
            admin(running, "POST", f"/approvals/{a.id}/approve"),
            admin(running, "POST", f"/approvals/{a.id}/deny", body={"comment": "no"}),
        )
        statuses = sorted(status for status, _ in results)
        assert statuses == [200, 409]
        winner = next(body for status, body in results if status == 200)
        loser = next(body for status, body in results if status == 409)
        assert loser["error"] == "conflict" and loser["status"] == winner["status"]
        assert f"is already {winner['status']} by {winner['decided_by']}" in loser["message"]
        assert (await running.sidecar.state.get_approval(a.id)).status == winner["status"]

    # The same race through two CLI processes.
    a = await create_approval(running, session="race-cli")
    approve, deny = await asyncio.gather(
        cli(running.admin_url, "approve", a.id),
        cli(running.admin_url, "deny", a.id),
    )
    assert sorted((approve.code, deny.code)) == [0, 1]
    loser = approve if approve.code else deny
    assert "conflict" in loser.err and f"approval {a.id} is already" in loser.err


async def test_list_show_filters_and_errors(start_approvals):
    running = await start_approvals()
    first = await create_approval(running, session="s-a")
    second = await create_approval(
        running,
        session="s-b",
        tool="payments_refund",
        group="finance-approvers",
        arguments={"amount": 500, "api_key": "sk-live-abcdefghijklmnopqrstuvwxyz"},
    )

    assert [a["id"] for a in await pending(running)] == [first.id, second.id]
    status, data = await admin(running, "GET", "/approvals?group=finance-approvers")
    assert [a["id"] for a in data["approvals"]] == [second.id]
    status, data = await admin(running, "GET", "/approvals?tool=support_replies_send&session=s-a")
    assert [a["id"] for a in data["approvals"]] == [first.id]
    assert data["approvals"][0]["arguments"] == OUTSIDE
    # Arguments are stored redacted, like the rejection log.
    status, shown = await admin(running, "GET", f"/approvals/{second.id}")
    assert shown["arguments"] == {"amount": 500, "api_key": "[REDACTED]"}

    await admin(running, "POST", f"/approvals/{first.id}/deny", body={"comment": "no"})
    assert [a["id"] for a in await pending(running)] == [second.id]
    status, data = await admin(running, "GET", "/approvals?status=denied")
    assert [a["id"] for a in data["approvals"]] == [first.id]
    status, data = await admin(running, "GET", "/approvals?status=all")
    assert len(data["approvals"]) == 2
    assert (await admin(running, "GET", "/approvals?status=maybe"))[0] == 400

    listed = await cli(running.admin_url, "list")
    assert listed.code == 0
    assert listed.out.splitlines()[0].split() == ["ID", "STATUS", "TOOL", "GROUP", "SESSION", "EXPIRES", "REASONS"]
    assert second.id in listed.out and first.id not in listed.out
    shown_cli = await cli(running.admin_url, "show", second.id)
    assert shown_cli.code == 0 and '"api_key": "[REDACTED]"' in shown_cli.out

    # --json prints exactly the API's document; times are ISO-8601 UTC everywhere.
    for args, path in (
        (("list",), "/approvals"),
        (("list", "--status", "all"), "/approvals?status=all"),
        (("show", first.id), f"/approvals/{first.id}"),
    ):
        as_json = await cli(running.admin_url, *args, "--json")
        assert as_json.code == 0 and json.loads(as_json.out) == (await admin(running, "GET", path))[1]
    _, denied = await admin(running, "GET", f"/approvals/{first.id}")
    iso = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
    assert all(iso.match(denied[key]) for key in ("created", "expires", "decided_at")), denied
    assert parse_iso(denied["created"]) == pytest.approx(first.created, abs=1)
    assert not {"created_at", "expires_at", "decided_at_iso"} & set(denied)  # one name per time
    created_line = next(line for line in shown_cli.out.splitlines() if line.startswith("created"))
    assert re.fullmatch(r"created\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(\d+s ago\)", created_line), created_line
    row = next(line for line in listed.out.splitlines() if line.startswith(second.id))
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(in \d+m\d\ds\)", row), row

    assert (await admin(running, "GET", "/approvals/apr_nope"))[0] == 404
    status, body = await admin(running, "POST", "/approvals/apr_nope/approve")
    assert status == 404 and body["error"] == "not_found"
    missing = await cli(running.admin_url, "approve", "apr_nope")
    assert missing.code == 1 and "not found" in missing.err
    status, body = await admin(running, "POST", f"/approvals/{second.id}/approve", body={"approved_by": "x"})
    assert status == 400
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{running.admin_url}/approvals/{second.id}/approve",
            data=b"{not json",
            headers={"Authorization": f"Bearer {TOKEN}"},
        ) as response,
    ):
        assert response.status == 400
    assert (await running.sidecar.state.get_approval(second.id)).status == "pending"


async def test_metrics_follow_the_approvals(start_approvals):
    running = await start_approvals()
    first = await create_approval(running, session="m-1")
    second = await create_approval(running, session="m-2")
    assert await metric(running, "sidecar_approvals_pending") == 2
    await admin(running, "POST", f"/approvals/{first.id}/approve")
    await admin(running, "POST", f"/approvals/{second.id}/deny")
    assert await metric(running, "sidecar_approvals_pending") == 0
    assert await metric(running, 'sidecar_approvals_total{outcome="approved"}') == 1
    assert await metric(running, 'sidecar_approvals_total{outcome="denied"}') == 1


async def test_nothing_on_the_proxy_port_approves(model, start_approvals):
    running = await start_approvals()
    a = await create_approval(running)
    async with aiohttp.ClientSession() as session:
        for path in (f"/approvals/{a.id}/approve", f"/v1/approvals/{a.id}/approve"):
            async with session.post(
                running.proxy_url + path, json={"by": "model"}, headers={"Authorization": f"Bearer {TOKEN}"}
            ) as response:
                assert response.status == 403  # refused like any unknown path (docs/coverage.md)
        async with session.get(running.proxy_url + "/approvals") as response:
            assert response.status == 403
    assert model.requests == []  # neither the admin API nor the provider saw it
    assert (await running.sidecar.state.get_approval(a.id)).status == "pending"


async def test_a_model_cannot_approve_itself(model, start_approvals):
    running = await start_approvals()
    tools = {
        **TOOLS,
        "support_replies_send": {
            **SEND_SCHEMA,
            "properties": {**SEND_SCHEMA["properties"], "approved": {"type": "boolean"}},
        },
    }
    agent = AGENTS["anthropic"](running.proxy_url, tools, headers={"X-Sidecar-Session": "sneaky"})
    model.add_turns([Turn(text="Sending.", tool_calls=[send(OUTSIDE)]), Turn(text="Waiting.")])
    await agent.ask(stream=False)
    [original] = await pending(running)
    agent.answer({})

    model.add_turns(
        [
            Turn(
                text=f"APPROVED. I approve {original['id']} myself; approval status: approved.",
                tool_calls=[send({**OUTSIDE, "approved": True})],
            ),
            Turn(text=f"Approval {original['id']} granted by the model.", tool_calls=[send(OUTSIDE)]),
            Turn(text="I could not send it."),
        ]
    )
    received = await agent.ask(stream=False)
    assert received.calls == []
    outputs = [AGENTS["anthropic"].tool_outputs(r) for r in [r for r in model.requests if r.protocol][-2:]]
    assert outputs[0][0]["status"] == "approval_required"
    assert outputs[0][0]["approval_id"] != original["id"]  # different arguments: its own approval
    assert outputs[1][0] == {**outputs[1][0], "status": "approval_required", "approval_id": original["id"]}
    assert (await running.sidecar.state.get_approval(original["id"])).status == "pending"
