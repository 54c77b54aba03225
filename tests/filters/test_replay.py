"""Replays end to end through the SDK agents: answered from the ledger, or allowed and counted."""

from __future__ import annotations

import re

import pytest

from sidecar.scripted import ToolCallSpec, Turn
from tests.e2e.agents import AGENTS
from tests.helpers.ledger import TOOLS, TRAITS, Capture
from tests.helpers.metrics import scrape

SEND = ToolCallSpec("support_replies_send", {"ticket_id": "T-1", "body": "Hello"})
# Same arguments written differently: canonical JSON makes it the same call.
SEND_AGAIN = ToolCallSpec("support_replies_send", {"body": "Hello", "ticket_id": "T-1"})
SEND_OTHER = ToolCallSpec("support_replies_send", {"ticket_id": "T-1", "body": "Hello again"})
SEARCH = ToolCallSpec("support_tickets_search", {"query": "refund", "limit": 5})
SENT = '{"status": "sent", "message_id": "m-1"}'
# Explicit session (DESIGN.md: the header comes first); derived sessions are tested below.
SESSION = {"X-Sidecar-Session": "replay-e2e"}
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")

CASES = [(k, b, False) for k in AGENTS for b in ("memory", "sqlite")] + [(k, "memory", True) for k in AGENTS]


@pytest.mark.parametrize(
    ("kind", "backend", "stream"), CASES, ids=[f"{k}-{b}-{'stream' if s else 'whole'}" for k, b, s in CASES]
)
async def test_side_effecting_replay_is_answered_from_the_ledger(start_sidecar, model, tmp_path, kind, backend, stream):
    sidecar = await start_sidecar(tools=TRAITS, state={"backend": backend, "sqlite_path": str(tmp_path / "state.db")})
    agent = AGENTS[kind](sidecar.proxy_url, TOOLS, SESSION)
    model.add_turns([Turn(text="Sending.", tool_calls=[SEND])])
    first = await agent.ask(stream)
    assert first.calls == [("support_replies_send", {"ticket_id": "T-1", "body": "Hello"})]

    # Next turn, after the agent ran it: the model sends the very same reply again.
    agent.answer({first.call_ids[0]: SENT})
    model.add_turns([Turn(text="Sending it now.", tool_calls=[SEND_AGAIN]), Turn(text="It was already sent.")])
    second = await agent.ask(stream)

    assert second.calls == []  # nothing new reached the agent
    assert "It was already sent." in second.text
    requests = model.model_requests
    assert len(requests) == 3  # the agent's two requests and one repair round
    [told] = AGENTS[kind].tool_outputs(requests[2])
    assert told["status"] == "replayed"
    assert told["replayed"] is True
    assert told["original_call_id"] == first.call_ids[0]
    assert told["result"] == SENT
    assert told["result_is_error"] is False
    assert RFC3339.match(told["original_call_at"])
    assert f"already run with exactly these arguments at {told['original_call_at']}" in told["reasons"][0]
    assert told["retryable"] is False

    # Different arguments: a different action, delivered.
    agent.answer({})
    model.add_turns([Turn(tool_calls=[SEND_OTHER])])
    third = await agent.ask(stream)
    assert third.calls == [("support_replies_send", {"ticket_id": "T-1", "body": "Hello again"})]

    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_tool_replays_total", tool="support_replies_send", action="answered") == 1
    assert (
        m.value(
            "sidecar_tool_calls_total",
            tool="support_replies_send",
            provider="anthropic" if kind == "anthropic" else "openai",
            verdict="replay",
        )
        == 1
    )


@pytest.mark.parametrize("kind", list(AGENTS))
async def test_read_only_repeat_is_allowed_and_counted(start_sidecar, model, kind):
    # The traits here come from the configuration only; the packaged default policy data
    # (every tool side-effecting) would disagree and deny the repeat itself (issue 14 point 7,
    # one source of truth for tool traits). This test is about the replay guard: policy off.
    sidecar = await start_sidecar(tools=TRAITS, policy={"mode": "off"})
    capture = Capture()
    sidecar.sidecar.add_filter(capture)
    agent = AGENTS[kind](sidecar.proxy_url, TOOLS, SESSION)
    model.add_turns([Turn(tool_calls=[SEARCH]), Turn(tool_calls=[SEARCH])])
    first = await agent.ask(False)
    agent.answer({first.call_ids[0]: '{"tickets": []}'})
    second = await agent.ask(False)

    assert second.calls == [("support_tickets_search", {"query": "refund", "limit": 5})]
    assert len(model.model_requests) == 2  # no repair round
    replays = [c.replay.to_input() for c in capture.checks]
    assert replays[0] == {"count": 0, "first_seen": None}
    assert replays[1]["count"] == 1 and RFC3339.match(replays[1]["first_seen"])  # what policy sees
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_tool_replays_total", tool="support_tickets_search", action="allowed") == 1
    assert m.value("sidecar_tool_replays_total", tool="support_tickets_search", action="answered", default=0.0) == 0


async def test_repeatable_side_effecting_tool_is_let_through(start_sidecar, model):
    sidecar = await start_sidecar(
        tools={"support_replies_send": {"side_effects": True, "repeatable": True}}, policy={"mode": "off"}
    )  # as above: config traits only
    agent = AGENTS["anthropic"](sidecar.proxy_url, TOOLS, SESSION)
    model.add_turns([Turn(tool_calls=[SEND]), Turn(tool_calls=[SEND])])
    first = await agent.ask(False)
    agent.answer({first.call_ids[0]: SENT})
    second = await agent.ask(False)

    assert second.calls == [("support_replies_send", {"ticket_id": "T-1", "body": "Hello"})]
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_tool_replays_total", tool="support_replies_send", action="allowed") == 1


async def test_replay_before_the_result_arrived_says_so(start_sidecar, model):
    """The agent has not answered yet (it re-asks without results): the result is null."""
    sidecar = await start_sidecar(tools=TRAITS)
    agent = AGENTS["chat"](sidecar.proxy_url, TOOLS, SESSION)
    model.add_turns([Turn(tool_calls=[SEND])])
    await agent.ask(False)
    agent.history = agent.history[:1]  # the agent lost its turn and asks again from scratch
    model.add_turns([Turn(tool_calls=[SEND]), Turn(text="Already sent.")])
    received = await agent.ask(False)

    assert received.calls == []
    [told] = AGENTS["chat"].tool_outputs(model.model_requests[2])
    assert told["replayed"] is True and told["result"] is None
    assert "its result has not arrived yet" in told["reasons"][0]


async def test_block_mode_replay_never_reaches_the_agent(start_sidecar, model):
    sidecar = await start_sidecar(tools=TRAITS, enforcement={"mode": "block"})
    agent = AGENTS["anthropic"](sidecar.proxy_url, TOOLS, SESSION)
    model.add_turns([Turn(tool_calls=[SEND]), Turn(tool_calls=[SEND])])
    first = await agent.ask(False)
    agent.answer({first.call_ids[0]: SENT})
    second = await agent.ask(False)

    assert second.calls == []
    assert "replayed" in second.text and "already run" in second.text
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_tool_replays_total", tool="support_replies_send", action="answered") == 1


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_responses_chain_keeps_its_derived_session(start_sidecar, model, stream):
    """No session header: later turns of a `previous_response_id` chain carry no first user
    message to hash, so the sidecar remembers the session by response id."""
    sidecar = await start_sidecar(tools=TRAITS)
    agent = AGENTS["responses"](sidecar.proxy_url, TOOLS)
    model.add_turns([Turn(text="Sending.", tool_calls=[SEND])])
    first = await agent.ask(stream)
    agent.answer({first.call_ids[0]: SENT})
    model.add_turns([Turn(tool_calls=[SEND_AGAIN]), Turn(text="It was already sent.")])
    second = await agent.ask(stream)

    assert second.calls == []
    [told] = AGENTS["responses"].tool_outputs(model.model_requests[2])
    assert told["status"] == "replayed" and told["result"] == SENT
