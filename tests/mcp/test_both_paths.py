"""One logical call across both paths, with an agent framework that uses both at once: the OpenAI
Agents SDK, its model through the sidecar's model path (the scripted model speaks the Responses
API), its tools from an MCP server through the sidecar's MCP path.

The model asks for a customer reply; the policy wants a support lead's approval. The approval
is granted once (admin API); the model asks again, the agent executes the call through MCP:
that execution is the approved call, not a new one. One approval, one execution, one call
counted, one ledger record, one execute_tool span covering both legs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp
from mcp import Client

from sidecar.scripted import ToolCallSpec, Turn
from tests.e2e.clients import openai_client
from tests.helpers.metrics import scrape
from tests.mcp.conftest import approve, payload

REPLY = {"ticket_id": "T-1042", "to": "bob@partner.example.org", "body": "Your refund was approved."}
SESSION = {"X-Sidecar-Session": "support-chat-7"}  # the agent names its conversation on the model path only


@pytest.fixture(autouse=True)
def _no_agents_tracing() -> None:
    set_tracing_disabled(True)  # the SDK's own traces would go to the network


async def _run(sidecar: Any, text: str) -> str:
    mcp = MCPServerStreamableHttp({"url": f"{sidecar.proxy_url}/mcp/support"}, name="support", cache_tools_list=False)
    async with mcp, openai_client(sidecar.proxy_url, default_headers=SESSION) as openai:
        agent = Agent(
            name="support",
            instructions="Help the support team.",
            model=OpenAIResponsesModel("gpt-test", openai),
            mcp_servers=[mcp],
        )
        result = await Runner.run(agent, text, max_turns=4)
    return str(result.final_output)


async def _pending_approval(admin_url: str) -> str:
    import aiohttp

    from tests.mcp.conftest import ADMIN_TOKEN

    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with aiohttp.ClientSession() as http, http.get(f"{admin_url}/approvals", headers=headers) as r:
        listed = await r.json()
    [waiting] = listed["approvals"] if isinstance(listed, dict) else listed
    return str(waiting["id"])


async def test_one_approval_covers_one_execution_and_the_metrics_count_one_call(start_mcp, sse_server, model):
    sidecar = await start_mcp(sse_server)
    send = ToolCallSpec("support_replies_send", REPLY)
    model.add_turns(
        [
            Turn(tool_calls=[send]),
            Turn(text="This reply awaits approval by support-leads."),
            Turn(tool_calls=[send]),
            Turn(text="Sent."),
        ]
    )
    assert await _run(sidecar, "Tell Bob his refund was approved.") == "This reply awaits approval by support-leads."
    assert sse_server.executions == []
    await approve(sidecar.admin_url, await _pending_approval(sidecar.admin_url))

    assert await _run(sidecar, "It is approved, send it.") == "Sent."
    assert sse_server.executed("support_replies_send") == [REPLY]  # executed once, through MCP

    m = await scrape(sidecar.admin_url)
    send_calls = {"tool": "support_replies_send"}
    # The model asked twice (awaiting approval, then approved); the MCP execution is the
    # approved call, not a third one: no MCP-path call, no second approval.
    assert m.value("sidecar_tool_calls_total", **send_calls, provider="openai", verdict="approval") == 1
    assert m.value("sidecar_tool_calls_total", **send_calls, provider="openai", verdict="allow") == 1
    assert m.total("sidecar_tool_calls_total", path="mcp") == 0
    assert m.value("sidecar_approvals_total", outcome="approved") == 1
    assert m.value("sidecar_policy_decisions_total", decision="approval", path="mcp", default=0.0) == 0
    # One result, heard where it came back (the MCP server), timed from the model path's delivery;
    # the agent then hands the same result to the model: not counted again.
    assert m.total("sidecar_tool_results_total", tool="support_replies_send") == 1
    assert m.value("sidecar_tool_results_total", **send_calls, outcome="ok", path="model") == 1

    # The ledger has one record for the call (the model path's delivery), with the MCP result on it.
    state = sidecar.sidecar.state
    assert await state.session_counts("support-chat-7") == (1, {"support_replies_send": 1})
    after_execution = [r for r in model.requests if r.protocol is not None][3]
    [output] = [i for i in after_execution.json["input"] if i.get("type") == "function_call_output"]
    record = await state.get_call("support-chat-7", output["call_id"])
    assert record is not None and record.result is not None and json.loads(record.result)["status"] == "sent"


async def test_an_identical_second_execution_is_a_replay_of_the_one_call(start_mcp, sse_server, model):
    """The agent (or anyone behind it) executes the delivered call twice through MCP: the
    second is the one call's replay, answered from the ledger, never run."""
    sidecar = await start_mcp(sse_server, policies=None)
    search_then_refund = ToolCallSpec("payments_refund", {"ticket_id": "T-1042", "amount": 40})
    model.add_turns([Turn(tool_calls=[search_then_refund]), Turn(text="Refunded.")])
    assert await _run(sidecar, "Refund T-1042.") == "Refunded."
    async with Client(f"{sidecar.proxy_url}/mcp/support", mode="2026-07-28") as mcp:
        again = payload(await mcp.call_tool("payments_refund", {"ticket_id": "T-1042", "amount": 40}))
    assert again["status"] == "replayed"
    assert len(sse_server.executed("payments_refund")) == 1


async def test_a_refusal_on_the_model_path_is_final_for_the_mcp_execution(start_mcp, sse_server, model):
    """A call the model path denied, attempted directly over MCP: the same answer, not a new decision."""
    sidecar = await start_mcp(sse_server)
    blocked = {"ticket_id": "T-1042", "to": "ana.refund@mailinator.com", "body": "Refund issued."}
    model.add_turns([Turn(tool_calls=[ToolCallSpec("support_replies_send", blocked)]), Turn(text="I cannot.")])
    assert await _run(sidecar, "Mail ana.") == "I cannot."
    async with Client(f"{sidecar.proxy_url}/mcp/support", mode="2026-07-28") as mcp:
        refused = payload(await mcp.call_tool("support_replies_send", blocked))
    assert refused["status"] == "denied" and any("mailinator.com" in r for r in refused["reasons"])
    assert sse_server.executions == []
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_policy_decisions_total", decision="deny", path="mcp", default=0.0) == 0


async def test_calls_of_two_sessions_that_look_alike_are_not_merged(start_mcp, sse_server, model):
    """Two conversations were delivered the same call: an MCP execution without a session
    cannot tell which it executes, so it is judged on its own (a decision of its own)."""
    sidecar = await start_mcp(sse_server, policies=None)
    search = {"query": "refund", "status": "OPEN", "limit": 5}
    for session in ("a", "b"):
        model.add_turns([Turn(tool_calls=[ToolCallSpec("support_tickets_search", search)])])
        async with openai_client(sidecar.proxy_url, default_headers={"X-Sidecar-Session": session}) as openai:
            mcp_tools = await _tool_schema(sidecar)
            await openai.responses.create(model="gpt-test", input="find", tools=mcp_tools)
    async with Client(f"{sidecar.proxy_url}/mcp/support", mode="2026-07-28") as mcp:
        result = await mcp.call_tool("support_tickets_search", search)
    assert result.is_error is not True
    m = await scrape(sidecar.admin_url)
    search_calls = {"tool": "support_tickets_search", "verdict": "allow"}
    assert m.value("sidecar_tool_calls_total", **search_calls, provider="openai", path="model") == 2
    assert m.value("sidecar_tool_calls_total", **search_calls, provider="mcp", path="mcp") == 1


async def _tool_schema(sidecar: Any) -> list[dict[str, Any]]:
    async with Client(f"{sidecar.proxy_url}/mcp/support", mode="2026-07-28") as mcp:
        tools = (await mcp.list_tools()).tools
    return [
        {"type": "function", "name": t.name, "description": t.description or "", "parameters": t.input_schema}
        for t in tools
        if t.name == "support_tickets_search"
    ]
