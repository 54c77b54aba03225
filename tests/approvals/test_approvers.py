"""Approvals bound to people and groups: a token is an approver (a name and groups); only a token
in the approval's group decides, its name is what is recorded, and nothing a caller sends can
say otherwise."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from sidecar.admin.auth import AdminAuth, fingerprint
from sidecar.app import start
from sidecar.approvals.approvers import IdentityError, IdentityLine, parse_line, parse_lines
from sidecar.config import ConfigError, Settings, load_settings
from sidecar.scripted import Turn
from tests.approvals.conftest import (
    OTHER_LINE,
    OTHER_TOKEN,
    OUTSIDE,
    TOKEN,
    TOKEN_LINE,
    TOOLS,
    admin,
    cli,
    create_approval,
    metric,
    pending,
    send,
)
from tests.e2e.agents import AGENTS
from tests.helpers.ports import free_port

REFUSED = 'sidecar_approval_decisions_refused_total{reason="outside_group",via="api"}'


def _tokens(tmp_path, *lines: str):
    path = tmp_path / "tokens"
    path.write_text("".join(line + "\n" for line in lines))
    return path


async def _two_approvers(start_approvals, tmp_path, **overrides):
    """alice (support-leads, finance-approvers) and bob (operators), from a token file."""
    path = _tokens(tmp_path, TOKEN_LINE, OTHER_LINE)
    return await start_approvals(admin_token=None, admin_token_file=str(path), **overrides), path


# -- the line format --------------------------------------------------------------------------


def test_a_line_is_a_key_a_name_and_groups():
    assert parse_line("tok alice support-leads,finance") == IdentityLine(
        "tok", "alice", frozenset({"support-leads", "finance"})
    )
    assert parse_line("  tok\talice  ") == IdentityLine("tok", "alice", frozenset())
    assert parse_line("tok") == IdentityLine("tok", None, frozenset())  # the format before identities


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("s3cr3t alice a,b extra", "expected TOKEN [NAME [GROUP,GROUP…]] (3 fields at most), got 4 fields"),
        ("s3cr3t alice a,,b", "empty group name"),
        ("s3cr3t alice a,", "empty group name"),
        ("s3cr3t token:1a2b3c4d ops", "may not start with token: or slack:"),
        ("s3cr3t slack:U1 ops", "may not start with"),
    ],
)
def test_a_malformed_line_is_refused_without_repeating_it(line, problem):
    with pytest.raises(IdentityError) as error:
        parse_line(line, "TOKEN")
    assert problem in str(error.value)
    assert "s3cr3t" not in str(error.value)


def test_a_file_skips_blanks_and_comments_and_refuses_a_token_given_twice():
    entries = parse_lines("# approvers\n\ntok-a ann ops\n   # indented comment\ntok-b ben ops\n")
    assert sorted(entries) == ["tok-a", "tok-b"]
    with pytest.raises(IdentityError, match="line 3: the same TOKEN as an earlier line"):
        parse_lines("tok-a ann ops\n\ntok-a ben finance\n", "TOKEN")


# -- group enforcement ------------------------------------------------------------------------


async def test_a_token_outside_the_group_gets_403_and_one_inside_decides(start_approvals, tmp_path, audit, caplog):
    running, _ = await _two_approvers(start_approvals, tmp_path)
    a = await create_approval(running)  # group support-leads

    for action in ("approve", "deny"):
        status, body = await admin(running, "POST", f"/approvals/{a.id}/{action}", token=OTHER_TOKEN)
        assert status == 403, body
        assert body == {
            "error": "forbidden",
            "message": f"approval {a.id} is for group support-leads: bob is in operators, not in support-leads",
            "group": "support-leads",
        }
    refused = await cli(running.admin_url, "approve", a.id, token=OTHER_TOKEN)
    assert refused.code == 1
    assert refused.err.strip() == (
        f"sidecar approvals: forbidden: approval {a.id} is for group support-leads: "
        "bob is in operators, not in support-leads"
    )
    assert (await running.sidecar.state.get_approval(a.id)).status == "pending"
    assert await metric(running, REFUSED) == 3
    assert await metric(running, 'sidecar_approvals_total{outcome="approved"}') == 0

    status, body = await admin(running, "POST", f"/approvals/{a.id}/approve", body={"comment": "fine"})
    assert status == 200 and (body["status"], body["decided_by"], body["comment"]) == ("approved", "alice", "fine")

    refusals = [line for line in audit if line["action"] == "refused"]
    assert len(refusals) == 3
    assert {(r["approver"], r["credential"], r["via"], r["group"]) for r in refusals} == {
        ("bob", fingerprint(OTHER_TOKEN), "api", "support-leads")
    }
    assert [r["attempted"] for r in refusals] == ["approved", "denied", "approved"]
    [approved] = [line for line in audit if line["action"] == "approved"]
    assert (approved["approver"], approved["decided_by"], approved["via_admin_group"]) == ("alice", "alice", False)
    everything = " ".join(str(line) for line in audit) + caplog.text
    assert TOKEN not in everything and OTHER_TOKEN not in everything


async def test_end_to_end_the_agents_call_waits_until_a_token_in_the_group_approves(model, start_approvals, tmp_path):
    """Issue 14's done-when: an approval by a token outside the group is refused with 403."""
    running, _ = await _two_approvers(start_approvals, tmp_path)
    agent = AGENTS["anthropic"](running.proxy_url, TOOLS, headers={"X-Sidecar-Session": "e2e-groups"})
    model.add_turns([Turn(text="Sending.", tool_calls=[send(OUTSIDE)]), Turn(text="It awaits approval.")])
    assert (await agent.ask(stream=True)).calls == []
    agent.answer({})
    [waiting] = await pending(running)

    status, body = await admin(running, "POST", f"/approvals/{waiting['id']}/approve", token=OTHER_TOKEN)
    assert (status, body["error"]) == (403, "forbidden")
    model.add_turns([Turn(tool_calls=[send(OUTSIDE)]), Turn(text="Still waiting.")])
    assert (await agent.ask(stream=True)).calls == []  # bob's attempt approved nothing
    agent.answer({})

    done = await cli(running.admin_url, "approve", waiting["id"], "--comment", "checked")
    assert done.code == 0, done.err
    assert done.out.startswith(f"{waiting['id']}: approved by alice (checked)")
    model.add_turns([Turn(tool_calls=[send(OUTSIDE)])])
    received = await agent.ask(stream=True)
    assert received.calls == [("support_replies_send", OUTSIDE)]
    record = await running.sidecar.state.get_approval(waiting["id"])
    assert (record.status, record.decided_by) == ("consumed", "alice")


async def test_changed_groups_in_the_token_file_apply_without_a_restart(start_approvals, tmp_path, caplog):
    path = _tokens(tmp_path, f"{TOKEN} alice operators")
    running = await start_approvals(admin_token=None, admin_token_file=str(path))
    a = await create_approval(running)
    assert (await admin(running, "POST", f"/approvals/{a.id}/approve"))[0] == 403

    _tokens(tmp_path, f"{TOKEN} alice operators,support-leads")
    status, body = await admin(running, "POST", f"/approvals/{a.id}/approve")
    assert status == 200 and body["decided_by"] == "alice"

    b = await create_approval(running, session="s-2")
    _tokens(tmp_path, f"{TOKEN} alicia operators")  # renamed and out of the group again
    status, body = await admin(running, "POST", f"/approvals/{b.id}/approve")
    assert status == 403 and "alicia is in operators" in body["message"]

    # A broken edit refuses every token in the file (a revoked line must not survive it) and says
    # why, naming the line, never its content; fixing the file restores them.
    with caplog.at_level(logging.WARNING, logger="sidecar"):
        _tokens(tmp_path, f"{TOKEN} alice support-leads", f"{OTHER_TOKEN} bob ops extra-field")
        status, body = await admin(running, "GET", "/approvals")
    assert status == 403
    assert f"admin token file {path}: line 2: expected" in body["message"] and TOKEN not in body["message"]
    assert "line 2" in caplog.text and TOKEN not in caplog.text and OTHER_TOKEN not in caplog.text
    _tokens(tmp_path, f"{TOKEN} alice support-leads")
    assert (await admin(running, "POST", f"/approvals/{b.id}/approve"))[0] == 200


async def test_nobody_names_the_approver_but_the_token(start_approvals):
    running = await start_approvals()
    a = await create_approval(running)
    status, body = await admin(running, "POST", f"/approvals/{a.id}/approve", body={"by": "mallory"})
    assert (status, body["error"]) == (400, "bad_request")
    assert body["message"] == "'by' is not accepted: the approver is the identity of your token (alice)"
    old_cli = await cli(running.admin_url, "approve", a.id, "--by", "mallory")
    assert old_cli.code == 1 and "--by is no longer accepted" in old_cli.err
    assert (await running.sidecar.state.get_approval(a.id)).status == "pending"

    helped = await cli(running.admin_url, "approve", "--help")
    assert "--by" not in helped.out
    done = await cli(running.admin_url, "approve", a.id)
    assert done.code == 0 and done.out.startswith(f"{a.id}: approved by alice")


async def test_listing_and_showing_are_scoped_to_the_callers_groups(start_approvals, tmp_path):
    running, _ = await _two_approvers(start_approvals, tmp_path)
    support = await create_approval(running, session="s-a")
    finance = await create_approval(running, session="s-b", tool="payments_refund", group="finance-approvers")
    ops = await create_approval(running, session="s-c", tool="payments_close_account", group="operators")

    status, alice = await admin(running, "GET", "/approvals")
    assert [a["id"] for a in alice["approvals"]] == [support.id, finance.id]
    assert alice["caller"] == {"name": "alice", "groups": ["finance-approvers", "support-leads"], "all_groups": False}
    status, bob = await admin(running, "GET", "/approvals", token=OTHER_TOKEN)
    assert [a["id"] for a in bob["approvals"]] == [ops.id]

    status, body = await admin(running, "GET", "/approvals?group=operators")
    assert status == 403 and body["message"] == (
        "alice (finance-approvers, support-leads) may not see approvals of group operators"
    )
    status, body = await admin(running, "GET", f"/approvals/{ops.id}")
    assert status == 403 and body["group"] == "operators"
    assert (await admin(running, "GET", f"/approvals/{ops.id}", token=OTHER_TOKEN))[0] == 200

    await admin(running, "POST", f"/approvals/{ops.id}/approve", token=OTHER_TOKEN)
    empty = await cli(running.admin_url, "list", token=OTHER_TOKEN)
    assert empty.code == 0 and empty.out.strip() == "no pending approvals for bob (operators)"


async def test_an_explicit_admin_group_decides_and_sees_every_group(start_approvals, tmp_path, audit):
    running, _ = await _two_approvers(start_approvals, tmp_path, approvals={"admin_group": "operators"})
    a = await create_approval(running)  # support-leads
    status, listed = await admin(running, "GET", "/approvals", token=OTHER_TOKEN)
    assert [x["id"] for x in listed["approvals"]] == [a.id] and listed["caller"]["all_groups"] is True
    status, body = await admin(running, "POST", f"/approvals/{a.id}/deny", token=OTHER_TOKEN, body={"comment": "no"})
    assert status == 200 and body["decided_by"] == "bob"
    [denied] = [line for line in audit if line["action"] == "denied"]
    assert (denied["approver"], denied["group"], denied["via_admin_group"]) == ("bob", "support-leads", True)


async def test_a_token_without_groups_reads_nothing_and_decides_nothing(start_approvals):
    running = await start_approvals(admin_token="plain-old-token-0123")  # the format before identities
    a = await create_approval(running)
    status, body = await admin(running, "GET", "/approvals", token="plain-old-token-0123")
    assert status == 200 and body["approvals"] == []
    assert body["caller"] == {"name": fingerprint("plain-old-token-0123"), "groups": [], "all_groups": False}
    status, body = await admin(running, "POST", f"/approvals/{a.id}/approve", token="plain-old-token-0123")
    assert status == 403
    assert body["message"].endswith("is in no group (give it one: TOKEN [NAME [GROUP,GROUP…]])")
    listed = await cli(running.admin_url, "list", token="plain-old-token-0123")
    assert listed.out.strip().endswith("the token is in no approval group")


async def test_the_cli_takes_the_token_from_a_line_in_the_servers_format(start_approvals, tmp_path):
    running = await start_approvals()
    a = await create_approval(running)
    line = tmp_path / "my-token"
    line.write_text(f"# mine\n{TOKEN_LINE}\n")
    done = await cli(running.admin_url, "approve", a.id, "--token-file", str(line), token=None)
    assert done.code == 0 and "approved by alice" in done.out


# -- start-up ---------------------------------------------------------------------------------


def test_a_malformed_admin_token_setting_stops_start_up_without_showing_it():
    settings = Settings(admin_token="s3cr3t-token alice support-leads,,x")
    with pytest.raises(ConfigError) as error:
        AdminAuth(settings)
    assert str(error.value) == (
        "admin_token (SIDECAR_ADMIN_TOKEN): empty group name (GROUP,GROUP: no leading, trailing or doubled comma)"
    )


async def test_a_malformed_token_file_stops_start_up(tmp_path):
    path = _tokens(tmp_path, TOKEN_LINE, "another-token-0123456 ann ops surplus")
    flags = {"listen": "127.0.0.1:0", "admin_listen": "127.0.0.1:0", "admin_token_file": str(path)}
    with pytest.raises(ConfigError, match=rf"admin token file {path}: line 2: expected TOKEN"):
        await start(load_settings(flags=flags, environ={}))


def test_sidecar_run_with_a_malformed_token_file_exits_2_naming_the_line(tmp_path):
    path = _tokens(tmp_path, TOKEN_LINE, "another-token-0123456 ann ops surplus")
    listen = ["--listen", f"127.0.0.1:{free_port()}", "--admin-listen", f"127.0.0.1:{free_port()}"]
    result = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "run", *listen, "--admin-token-file", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert f"admin token file {path}: line 2: expected TOKEN [NAME [GROUP,GROUP…]]" in result.stderr
    printed = result.stderr + result.stdout
    assert TOKEN not in printed and "another-token" not in printed
