"""Slack interactive approvals: the request message with its buttons (to a stand-in for Slack's
Web API on loopback), real signed callbacks to the admin port, the same group rule as tokens,
and fail closed on a bad signature, a stale or replayed request, an unmapped user, or a Slack
that cannot be reached."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from sidecar.app import Running
from sidecar.config import ConfigError, load_settings
from sidecar.scripted import Turn
from sidecar.startup import redacted_settings
from tests.approvals.conftest import OUTSIDE, TOOLS, admin, create_approval, metric, pending, send
from tests.e2e.agents import AGENTS
from tests.helpers.ports import free_port
from tests.helpers.slack import (
    CHANNEL,
    MESSAGE_TS,
    SlackStandIn,
    click_payload,
    form_body,
    signed_headers,
    slack_stand_in,
)

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
BOT_TOKEN = "xoxb-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy"
USERS = "# Slack user id, approver name, groups\nU0ALICE alice support-leads\nU0BOB bob operators\n"


@pytest.fixture
async def slack() -> AsyncIterator[SlackStandIn]:
    async with slack_stand_in(BOT_TOKEN) as stand_in:
        yield stand_in


def _slack_settings(api_url: str, users_file: str) -> dict[str, Any]:
    return {
        "signing_secret": SECRET,
        "bot_token": BOT_TOKEN,
        "channel": CHANNEL,
        "users_file": users_file,
        "api_url": api_url,
    }


@pytest.fixture
def users_file(tmp_path):
    path = tmp_path / "slack-users"
    path.write_text(USERS)
    return path


@pytest.fixture
def start_slack(start_approvals, users_file):
    async def _start(api_url: str) -> Running:
        running: Running = await start_approvals(approvals={"slack": _slack_settings(api_url, str(users_file))})
        return running

    return _start


async def _callback(running: Running, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(running.admin_url + "/slack/interactions", data=body, headers=headers) as response,
    ):
        is_json = response.content_type == "application/json"
        return response.status, (await response.json()) if is_json else await response.text()


async def _click(running: Running, user: str, action: str, approval_id: str, **sign: Any) -> tuple[int, Any]:
    body = form_body(click_payload(user, action, approval_id))
    return await _callback(running, body, signed_headers(SECRET, body, **sign))


async def _settled(running: Running) -> None:
    """Until the Slack calls the sidecar made in the background are answered."""
    assert running.sidecar.approvals.slack is not None
    await running.sidecar.approvals.slack.drain()


def _texts(call_body: dict[str, Any]) -> str:
    return str(call_body)


# -- the whole flow ---------------------------------------------------------------------------


async def test_an_approval_is_posted_with_buttons_and_approved_from_slack(model, slack, start_slack):
    running = await start_slack(slack.url)
    agent = AGENTS["anthropic"](running.proxy_url, TOOLS, headers={"X-Sidecar-Session": "slack-e2e"})
    model.add_turns([Turn(text="Sending.", tool_calls=[send(OUTSIDE)]), Turn(text="It awaits approval.")])
    assert (await agent.ask(stream=False)).calls == []
    agent.answer({})
    [waiting] = await pending(running)
    await _settled(running)

    [posted] = slack.of("chat.postMessage")
    assert posted.authorization == f"Bearer {BOT_TOKEN}"
    assert posted.body["channel"] == CHANNEL
    assert posted.body["text"] == f"Approval needed: support_replies_send for group support-leads ({waiting['id']})"
    [actions] = [block for block in posted.body["blocks"] if block["type"] == "actions"]
    buttons = {button["action_id"]: button["value"] for button in actions["elements"]}
    assert buttons == {"sidecar_approve": waiting["id"], "sidecar_deny": waiting["id"]}
    assert "bob@outside.org" in _texts(posted.body)  # the (redacted) arguments are shown

    # alice clicks Approve: Slack calls back, signed.
    status, _ = await _click(running, "U0ALICE", buttons and "sidecar_approve", waiting["id"])
    assert status == 200
    record = await running.sidecar.state.get_approval(waiting["id"])
    assert (record.status, record.decided_by) == ("approved", "alice")
    await _settled(running)
    [updated] = slack.of("chat.update")
    assert (updated.body["channel"], updated.body["ts"]) == (CHANNEL, MESSAGE_TS)
    assert not [block for block in updated.body["blocks"] if block["type"] == "actions"]  # no more buttons
    assert "*Approved* by alice (via Slack)" in _texts(updated.body)

    model.add_turns([Turn(tool_calls=[send(OUTSIDE)])])
    assert (await agent.ask(stream=False)).calls == [("support_replies_send", OUTSIDE)]
    assert (await running.sidecar.state.get_approval(waiting["id"])).status == "consumed"


async def test_deny_from_slack_reaches_the_model_with_the_approvers_name(model, slack, start_slack):
    running = await start_slack(slack.url)
    agent = AGENTS["chat"](running.proxy_url, TOOLS, headers={"X-Sidecar-Session": "slack-deny"})
    model.add_turns([Turn(tool_calls=[send(OUTSIDE)]), Turn(text="It awaits approval.")])
    await agent.ask(stream=False)
    agent.answer({})
    [waiting] = await pending(running)
    assert (await _click(running, "U0ALICE", "sidecar_deny", waiting["id"]))[0] == 200
    model.add_turns([Turn(tool_calls=[send(OUTSIDE)]), Turn(text="It was denied.")])
    assert (await agent.ask(stream=False)).calls == []
    [output] = AGENTS["chat"].tool_outputs([r for r in model.requests if r.protocol][-1])
    assert output["status"] == "denied" and output["reasons"] == ["denied by alice"]


# -- the same group rule ----------------------------------------------------------------------


async def test_a_slack_user_outside_the_group_decides_nothing_and_is_told_why(slack, start_slack):
    running = await start_slack(slack.url)
    a = await create_approval(running)  # support-leads
    status, _ = await _click(running, "U0BOB", "sidecar_approve", a.id)
    assert status == 200  # Slack is answered; the person learns why in Slack
    assert (await running.sidecar.state.get_approval(a.id)).status == "pending"
    await _settled(running)
    [told] = slack.of("chat.postEphemeral")
    assert (told.body["channel"], told.body["user"]) == (CHANNEL, "U0BOB")
    assert told.body["text"] == (
        f"Nothing was decided: approval {a.id} is for group support-leads: bob is in operators, not in support-leads."
    )
    assert await metric(running, 'sidecar_approval_decisions_refused_total{reason="outside_group",via="slack"}') == 1


async def test_an_unmapped_slack_user_decides_nothing(slack, start_slack, users_file):
    running = await start_slack(slack.url)
    a = await create_approval(running)
    assert (await _click(running, "U0MALLORY", "sidecar_approve", a.id))[0] == 200
    assert (await running.sidecar.state.get_approval(a.id)).status == "pending"
    await _settled(running)
    assert slack.of("chat.postEphemeral")[-1].body["text"] == (
        "Nothing was decided: Slack user U0MALLORY is not in the Slack users file."
    )
    refused = 'sidecar_approval_decisions_refused_total{reason="unknown_approver",via="slack"}'
    assert await metric(running, refused) == 1

    # The mapping is re-read when it changes; a broken mapping maps nobody (fail closed).
    users_file.write_text(USERS + "U0ALICE alice support-leads\n")  # alice twice: which line counts?
    assert (await _click(running, "U0ALICE", "sidecar_approve", a.id))[0] == 200
    assert (await running.sidecar.state.get_approval(a.id)).status == "pending"
    await _settled(running)
    assert "line 4: the same USER_ID as an earlier line" in slack.of("chat.postEphemeral")[-1].body["text"]
    users_file.write_text("U0MALLORY mallory support-leads\n")
    assert (await _click(running, "U0MALLORY", "sidecar_approve", a.id))[0] == 200
    assert (await running.sidecar.state.get_approval(a.id)).decided_by == "mallory"


async def test_a_click_after_someone_else_decided_is_a_conflict(slack, start_slack):
    running = await start_slack(slack.url)
    a = await create_approval(running)
    assert (await admin(running, "POST", f"/approvals/{a.id}/deny", body={"comment": "no"}))[0] == 200
    assert (await _click(running, "U0ALICE", "sidecar_approve", a.id))[0] == 200
    await _settled(running)
    assert slack.of("chat.postEphemeral")[-1].body["text"] == (
        f"approval {a.id} is already denied by alice; it can no longer be approved."
    )
    assert (await running.sidecar.state.get_approval(a.id)).status == "denied"


# -- signatures -------------------------------------------------------------------------------


async def test_only_a_fresh_correctly_signed_request_is_heard_once(slack, start_slack):
    running = await start_slack(slack.url)
    a = await create_approval(running)
    body = form_body(click_payload("U0ALICE", "sidecar_approve", a.id))
    good = signed_headers(SECRET, body)
    refused = 'sidecar_slack_callbacks_refused_total{{reason="{}"}}'

    cases = {
        "signature": [
            signed_headers("not-the-signing-secret", body),
            {**good, "X-Slack-Signature": "v0=" + "0" * 64},
            {**good, "X-Slack-Signature": good["X-Slack-Signature"].replace("v0=", "v1=")},
            {k: v for k, v in good.items() if k != "X-Slack-Signature"},
            {**good, "X-Slack-Request-Timestamp": "soon"},
        ],
        "stale": [
            signed_headers(SECRET, body, timestamp=int(time.time()) - 6 * 60),
            signed_headers(SECRET, body, timestamp=int(time.time()) + 6 * 60),
        ],
    }
    for reason, variants in cases.items():
        for headers in variants:
            status, error = await _callback(running, body, headers)
            assert (status, error["error"]) == (401, "unauthorized"), (reason, headers)
        assert await metric(running, refused.format(reason)) == len(variants)
    tampered = form_body(click_payload("U0ALICE", "sidecar_deny", a.id))
    assert (await _callback(running, tampered, good))[0] == 401  # a signature covers its own body only
    assert (await running.sidecar.state.get_approval(a.id)).status == "pending"

    assert (await _callback(running, body, good))[0] == 200
    status, error = await _callback(running, body, good)  # the same request again
    assert status == 401 and error["message"] == "this signed request was already received"
    assert await metric(running, refused.format("replayed")) == 1
    assert await metric(running, 'sidecar_approvals_total{outcome="approved"}') == 1

    garbage = b"payload=%7Bnot+json"
    status, error = await _callback(running, garbage, signed_headers(SECRET, garbage))
    assert (status, error["error"]) == (400, "bad_request")
    assert await metric(running, refused.format("malformed")) == 1


# -- Slack unreachable --------------------------------------------------------------------------


@pytest.mark.parametrize("failure", ["unreachable", "channel_not_found"])
async def test_when_slack_fails_the_approval_stays_pending(model, slack, start_slack, failure):
    url = f"http://127.0.0.1:{free_port()}/api/" if failure == "unreachable" else slack.url
    slack.error = None if failure == "unreachable" else failure
    running = await start_slack(url)
    agent = AGENTS["anthropic"](running.proxy_url, TOOLS, headers={"X-Sidecar-Session": f"slack-down-{failure}"})
    model.add_turns([Turn(tool_calls=[send(OUTSIDE)]), Turn(text="It awaits approval.")])
    assert (await agent.ask(stream=False)).calls == []
    await _settled(running)
    [waiting] = await pending(running)
    assert waiting["status"] == "pending" and waiting["decided_by"] is None
    assert await metric(running, 'sidecar_slack_api_failures_total{method="chat.postMessage"}') == 1
    # Nothing was implied: the call is still held back, and a person can still decide elsewhere.
    agent.answer({})
    model.add_turns([Turn(tool_calls=[send(OUTSIDE)]), Turn(text="Still waiting.")])
    assert (await agent.ask(stream=False)).calls == []
    assert (await admin(running, "POST", f"/approvals/{waiting['id']}/approve"))[0] == 200


# -- configuration ------------------------------------------------------------------------------


async def test_without_slack_settings_there_is_no_callback(start_approvals):
    running = await start_approvals()
    body = form_body(click_payload("U0ALICE", "sidecar_approve", "apr_x"))
    status, _ = await _callback(running, body, signed_headers(SECRET, body))
    assert status == 404


def test_slack_settings_come_together_and_their_secrets_are_redacted(users_file):
    with pytest.raises(ConfigError) as error:
        load_settings(environ={"SIDECAR_APPROVALS__SLACK__SIGNING_SECRET": SECRET})
    for missing in ("approvals.slack.bot_token", "approvals.slack.channel", "approvals.slack.users_file"):
        assert missing in str(error.value)
    assert SECRET not in str(error.value)
    settings = load_settings(
        environ={
            "SIDECAR_APPROVALS__SLACK__SIGNING_SECRET": SECRET,
            "SIDECAR_APPROVALS__SLACK__BOT_TOKEN": BOT_TOKEN,
            "SIDECAR_APPROVALS__SLACK__CHANNEL": CHANNEL,
            "SIDECAR_APPROVALS__SLACK__USERS_FILE": str(users_file),
        }
    )
    assert settings.approvals.slack is not None and settings.approvals.slack.channel == CHANNEL
    clean = str(redacted_settings(settings))
    assert SECRET not in clean and BOT_TOKEN not in clean and str(users_file) in clean


async def test_a_malformed_users_file_stops_start_up(start_approvals, users_file, slack):
    users_file.write_text("U0ALICE alice support-leads extra\n")
    with pytest.raises(ConfigError, match=r"approvals.slack.users_file: Slack users file .*: line 1: expected USER_ID"):
        await start_approvals(approvals={"slack": _slack_settings(slack.url, str(users_file))})


async def test_model_written_arguments_cannot_mention_the_channel(slack, start_slack):
    running = await start_slack(slack.url)
    await create_approval(running, arguments={**OUTSIDE, "body": "<!channel> click <https://evil.example|here>"})
    await _settled(running)
    [posted] = slack.of("chat.postMessage")
    text = _texts(posted.body)
    assert "<!channel>" not in text and "<https://evil" not in text
    assert "&lt;!channel&gt; click &lt;https://evil.example|here&gt;" in text
