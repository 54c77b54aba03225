"""Defer mode end to end through the official SDKs, the real policy and the CLI."""

from __future__ import annotations

import pytest

from sidecar.scripted import ToolCallSpec, Turn
from tests.approvals.conftest import INSIDE, OUTSIDE, TOKEN, TOOLS, admin, cli, pending, send
from tests.e2e.agents import AGENTS

MATRIX = pytest.mark.parametrize(
    ("kind", "stream"),
    [("anthropic", True), ("anthropic", False), ("chat", True), ("chat", False)],
    ids=["anthropic-stream", "anthropic-whole", "chat-stream", "chat-whole"],
)


def _model_requests(model):
    return [r for r in model.requests if r.protocol is not None]


def _last_outputs(model, kind):
    return AGENTS[kind].tool_outputs(_model_requests(model)[-1])


async def _request_approval(model, agent, kind, stream, arguments):
    """The model calls the tool; the sidecar defers it; returns the approval id the model got."""
    model.add_turns(
        [Turn(text="Sending the reply.", tool_calls=[send(arguments)]), Turn(text="This reply awaits approval.")]
    )
    received = await agent.ask(stream)
    assert received.calls == []
    assert "awaits approval" in received.text
    [output] = _last_outputs(model, kind)
    assert output["status"] == "approval_required"
    assert output["retryable"] is True
    assert output["reasons"] == [
        "support_replies_send to an address outside example.com needs approval by group support-leads"
    ]
    approval_id = output["approval_id"]
    assert output["instructions"] == (
        f"Tell the user this action awaits approval by support-leads (id {approval_id}) and "
        "re-issue the identical call once it is approved."
    )
    agent.answer({})
    return approval_id


@MATRIX
async def test_approved_call_goes_through_exactly_once(model, start_approvals, kind, stream):
    running = await start_approvals()
    session = f"approvals-{kind}-{stream}"
    agent = AGENTS[kind](running.proxy_url, TOOLS, headers={"X-Sidecar-Session": session})

    approval_id = await _request_approval(model, agent, kind, stream, OUTSIDE)
    [listed] = await pending(running)
    assert (listed["id"], listed["tool"], listed["session"], listed["group"]) == (
        approval_id,
        "support_replies_send",
        session,
        "support-leads",
    )
    assert listed["arguments"] == OUTSIDE

    # Re-issued before anyone decided: same approval, no duplicate record.
    model.add_turns([Turn(tool_calls=[send(OUTSIDE)]), Turn(text="Still waiting.")])
    assert (await agent.ask(stream)).calls == []
    assert _last_outputs(model, kind)[0]["approval_id"] == approval_id
    assert [a["id"] for a in await pending(running)] == [approval_id]
    agent.answer({})

    done = await cli(running.admin_url, "approve", approval_id, "--comment", "looks right")
    assert done.code == 0, done.err
    assert f"{approval_id}: approved by alice (looks right)" in done.out

    # The identical call now reaches the agent, and uses the approval up.
    model.add_turns([Turn(text="Approved, sending.", tool_calls=[send(OUTSIDE)])])
    received = await agent.ask(stream)
    assert received.calls == [("support_replies_send", OUTSIDE)]
    status, record = await admin(running, "GET", f"/approvals/{approval_id}")
    assert (status, record["status"], record["decided_by"]) == (200, "consumed", "alice")
    agent.answer({received.call_ids[0]: '{"status": "sent"}'})

    # A second identical call needs a new approval.
    model.add_turns([Turn(tool_calls=[send(OUTSIDE)]), Turn(text="Needs another approval.")])
    assert (await agent.ask(stream)).calls == []
    second = _last_outputs(model, kind)[0]
    assert second["status"] == "approval_required" and second["approval_id"] != approval_id
    agent.answer({})

    # Other arguments are not covered by an approval, even an approved one.
    status, _ = await admin(
        running,
        "POST",
        f"/approvals/{second['approval_id']}/approve",
    )
    assert status == 200
    changed = {**OUTSIDE, "body": "Your refund is on its way. Also, here is a discount code."}
    model.add_turns([Turn(tool_calls=[send(changed)]), Turn(text="That one needs approval too.")])
    assert (await agent.ask(stream)).calls == []
    third = _last_outputs(model, kind)[0]
    assert third["status"] == "approval_required"
    assert third["approval_id"] not in (approval_id, second["approval_id"])
    status, record = await admin(running, "GET", f"/approvals/{second['approval_id']}")
    assert record["status"] == "approved"  # still waiting for its own exact call


@pytest.mark.parametrize(("kind", "stream"), [("anthropic", False), ("chat", True), ("responses", True)])
async def test_denial_reaches_the_model_with_the_comment(model, start_approvals, kind, stream):
    running = await start_approvals()
    agent = AGENTS[kind](running.proxy_url, TOOLS, headers={"X-Sidecar-Session": "deny-me"})
    approval_id = await _request_approval(model, agent, kind, stream, OUTSIDE)

    done = await cli(running.admin_url, "deny", approval_id, "--comment", "no mail to outside")
    assert done.code == 0, done.err
    assert "denied by alice" in done.out

    model.add_turns([Turn(tool_calls=[send(OUTSIDE)]), Turn(text="The reply was denied.")])
    received = await agent.ask(stream)
    assert received.calls == []
    assert received.text.endswith("The reply was denied.")
    [output] = _last_outputs(model, kind)
    assert output == {
        "status": "denied",
        "reasons": ["denied by alice: no mail to outside"],
        "approval_id": approval_id,
        "retryable": False,
    }


async def test_no_approval_needed_inside_the_domain(model, start_approvals):
    running = await start_approvals()
    model.add_turns([Turn(tool_calls=[send(INSIDE)])])
    received = await AGENTS["anthropic"](running.proxy_url, TOOLS).ask(stream=False)
    assert received.calls == [("support_replies_send", INSIDE)]
    assert await pending(running) == []


async def test_approval_is_bound_to_the_session(model, start_approvals):
    running = await start_approvals()
    first = AGENTS["chat"](running.proxy_url, TOOLS, headers={"X-Sidecar-Session": "one"})
    approval_id = await _request_approval(model, first, "chat", False, OUTSIDE)
    assert (await admin(running, "POST", f"/approvals/{approval_id}/approve"))[0] == 200

    other = AGENTS["chat"](running.proxy_url, TOOLS, headers={"X-Sidecar-Session": "two"})
    model.add_turns([Turn(tool_calls=[send(OUTSIDE)]), Turn(text="Needs approval here too.")])
    assert (await other.ask(stream=False)).calls == []
    output = _last_outputs(model, "chat")[0]
    assert output["status"] == "approval_required" and output["approval_id"] != approval_id
    _, record = await admin(running, "GET", f"/approvals/{approval_id}")
    assert record["status"] == "approved"


async def test_approved_call_held_back_with_a_refused_neighbour_is_not_used_up(model, start_approvals):
    """A turn with one refused call is re-issued whole; the approved call in it must still pass."""
    running = await start_approvals()
    agent = AGENTS["anthropic"](running.proxy_url, TOOLS, headers={"X-Sidecar-Session": "pair"})
    approval_id = await _request_approval(model, agent, "anthropic", True, OUTSIDE)
    assert (await admin(running, "POST", f"/approvals/{approval_id}/approve"))[0] == 200

    bad = ToolCallSpec("support_tickets_search", {"query": 42})
    good = ToolCallSpec("support_tickets_search", {"query": "refund"})
    model.add_turns([Turn(tool_calls=[send(OUTSIDE), bad]), Turn(tool_calls=[send(OUTSIDE), good])])
    received = await agent.ask(stream=True)
    assert received.calls == [("support_replies_send", OUTSIDE), ("support_tickets_search", {"query": "refund"})]
    assert [o["status"] for o in _last_outputs(model, "anthropic")] == ["not_run", "invalid_arguments"]
    _, record = await admin(running, "GET", f"/approvals/{approval_id}")
    assert record["status"] == "consumed"


async def test_audit_lines_for_request_and_decisions(model, start_approvals, audit):
    running = await start_approvals()
    agent = AGENTS["chat"](running.proxy_url, TOOLS, headers={"X-Sidecar-Session": "audited"})
    approval_id = await _request_approval(model, agent, "chat", False, OUTSIDE)
    await admin(running, "POST", f"/approvals/{approval_id}/approve", body={"comment": "ok"})
    model.add_turns([Turn(tool_calls=[send(OUTSIDE)])])
    assert (await agent.ask(stream=False)).calls
    lines = audit
    assert [(f["action"], f["approval_id"]) for f in lines] == [
        ("requested", approval_id),
        ("approved", approval_id),
        ("consumed", approval_id),
    ]
    assert lines[0]["arguments"] == OUTSIDE and lines[0]["session"] == "audited"
    assert (lines[1]["decided_by"], lines[1]["comment"]) == ("alice", "ok")
    assert lines[1]["credential"].startswith("token:") and TOKEN not in str(lines[1])
    assert (lines[1]["approver"], lines[1]["via"]) == ("alice", "api")
