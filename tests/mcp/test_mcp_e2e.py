"""The MCP path end to end: the official `mcp` client, through a real sidecar, against a server
built with the official SDK, on the current revision (2026-07-28) and the previous one (the
initialize handshake, 2025-11-25), the server answering as SSE streams and as JSON. Every
refusal is the model path's, under the same policy files (example:support)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import aiohttp
import pytest
from mcp import Client

from sidecar.scripted import ToolCallSpec, Turn
from sidecar.scripted.mcp import LEAKED_SECRET
from tests.e2e.agents import AGENTS
from tests.helpers.metrics import scrape
from tests.mcp.conftest import MODES, approve, payload

pytestmark = pytest.mark.parametrize("mode", MODES)

SEARCH = {"query": "refund", "status": "OPEN", "limit": 5}
SLOPPY_SEARCH = {"query": "refund", "status": "open", "limit": "5"}
REPLY = {"ticket_id": "T-1042", "to": "bob@partner.example.org", "body": "Your refund was approved."}
BLOCKED_REPLY = {"ticket_id": "T-1042", "to": "ana.refund@mailinator.com", "body": "Refund issued."}
REFUND = {"ticket_id": "T-1042", "amount": 40}


def client(sidecar: Any, mode: str, **kwargs: Any) -> Client:
    return Client(f"{sidecar.proxy_url}/mcp/support", mode=mode, **kwargs)


async def test_a_valid_call_passes_and_is_counted_on_the_mcp_path(start_mcp, mcp_server, mode):
    sidecar = await start_mcp(mcp_server)
    async with client(sidecar, mode) as mcp:
        listed = await mcp.list_tools()
        result = await mcp.call_tool("support_tickets_search", SEARCH)
    assert "support_tickets_search" in [t.name for t in listed.tools]
    assert result.is_error is not True
    assert json.loads(result.content[0].text) == {"tickets": [{"id": "T-1042", "subject": "Refund not received"}]}
    assert mcp_server.executed("support_tickets_search") == [SEARCH]
    m = await scrape(sidecar.admin_url)
    tool = {"tool": "support_tickets_search"}
    assert m.value("sidecar_tool_calls_total", **tool, provider="mcp", verdict="allow", path="mcp") == 1
    assert m.value("sidecar_tool_results_total", **tool, outcome="ok", path="mcp") == 1
    assert m.value("sidecar_tool_call_duration_seconds_count", **tool, outcome="ok", path="mcp") == 1
    assert m.value("sidecar_policy_decisions_total", decision="allow", path="mcp") == 1
    calls = {"server": "support", "method": "tools/call", "error_type": "none"}
    assert m.value("sidecar_mcp_operation_duration_seconds_count", **calls) == 1
    async with aiohttp.ClientSession() as http, http.get(f"{sidecar.admin_url}/v1/tools") as r:
        inventory = json.dumps(await r.json())
    assert '"mcp:support"' in inventory and "payments_refund" in inventory  # the server's declarations


async def test_bad_arguments_get_the_model_paths_error_and_never_reach_the_server(start_mcp, mcp_server, mode):
    sidecar = await start_mcp(mcp_server)
    async with client(sidecar, mode) as mcp:
        await mcp.list_tools()
        refused = payload(await mcp.call_tool("support_tickets_search", SLOPPY_SEARCH))
        corrected = await mcp.call_tool("support_tickets_search", SEARCH)
    assert refused["status"] == "invalid_arguments" and refused["retryable"] is True
    assert {e["field"] for e in refused["errors"]} == {"status", "limit"}
    assert corrected.is_error is not True
    assert mcp_server.executed("support_tickets_search") == [SEARCH]  # only the corrected call ran
    m = await scrape(sidecar.admin_url)
    search = {"tool": "support_tickets_search", "path": "mcp"}
    assert m.value("sidecar_tool_calls_total", **search, provider="mcp", verdict="reject") == 1
    assert m.value("sidecar_argument_rejections_total", **search, problem="enum") == 1
    assert m.value("sidecar_argument_rejections_total", **search, problem="type") == 1


async def test_an_undeclared_tool_is_refused_as_unknown(start_mcp, mcp_server, mode):
    sidecar = await start_mcp(mcp_server)
    async with client(sidecar, mode) as mcp:
        await mcp.list_tools()
        refused = payload(await mcp.call_tool("payments_close_account", {"ticket_id": "T-1"}))
    assert refused["status"] == "unknown_tool"
    assert "payments_refund" in refused["errors"][0]["expected"]  # what the server does list
    assert mcp_server.executions == []


async def test_a_policy_denial_is_final_and_says_why(start_mcp, mcp_server, mode):
    sidecar = await start_mcp(mcp_server)
    async with client(sidecar, mode) as mcp:
        await mcp.list_tools()
        refused = payload(await mcp.call_tool("support_replies_send", BLOCKED_REPLY))
    assert refused["status"] == "denied" and refused["retryable"] is False
    assert any("mailinator.com" in reason for reason in refused["reasons"])
    assert mcp_server.executions == []
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_policy_decisions_total", decision="deny", path="mcp") == 1


async def test_an_approval_is_deferred_then_granted_through_the_admin_api_once(start_mcp, mcp_server, mode):
    sidecar = await start_mcp(mcp_server)
    async with client(sidecar, mode) as mcp:
        await mcp.list_tools()
        waiting = payload(await mcp.call_tool("support_replies_send", REPLY))
        assert waiting["status"] == "approval_required" and waiting["retryable"] is True
        assert mcp_server.executions == []  # nothing is sent while it waits
        decided = await approve(sidecar.admin_url, waiting["approval_id"])
        assert decided["status"] == "approved"
        sent = await mcp.call_tool("support_replies_send", REPLY)
        again = payload(await mcp.call_tool("support_replies_send", REPLY))
    assert sent.is_error is not True
    assert mcp_server.executed("support_replies_send") == [REPLY]  # the approval covered one execution
    assert again["status"] == "replayed"  # the identical repeat is answered from the ledger
    m = await scrape(sidecar.admin_url)
    send = {"tool": "support_replies_send", "provider": "mcp", "path": "mcp"}
    assert m.value("sidecar_tool_calls_total", **send, verdict="approval") == 1
    assert m.value("sidecar_tool_calls_total", **send, verdict="allow") == 1
    assert m.value("sidecar_approvals_total", outcome="approved") == 1


async def test_a_replay_is_answered_from_the_ledger_with_the_first_result(start_mcp, mcp_server, mode):
    sidecar = await start_mcp(mcp_server)
    async with client(sidecar, mode) as mcp:
        await mcp.list_tools()
        first = await mcp.call_tool("payments_refund", REFUND)
        replayed = payload(await mcp.call_tool("payments_refund", REFUND))
    assert first.is_error is not True
    assert mcp_server.executed("payments_refund") == [{"ticket_id": "T-1042", "amount": 40.0}]
    assert replayed["status"] == "replayed" and replayed["replayed"] is True
    if mode == "legacy":  # the server's Mcp-Session-Id names one connection: a strong session
        assert replayed["result"] == first.content[0].text  # the result the server gave the first time
        assert replayed["original_call_id"].startswith("mcp_")
    else:  # 2026-07-28 without a session header: derived (per server and credentials), weak
        assert replayed["result_shared"] is False and "result" not in replayed
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_tool_replays_total", tool="payments_refund", action="answered", path="mcp") == 1


async def test_a_hidden_tool_is_not_listed_and_refused_when_called(start_mcp, mcp_server, mode):
    sidecar = await start_mcp(mcp_server)
    async with client(sidecar, mode) as mcp:
        listed = await mcp.list_tools()
        refused = payload(await mcp.call_tool("internal_debug_dump", {}))
    assert "internal_debug_dump" not in [t.name for t in listed.tools]
    assert refused["status"] == "unknown_tool"
    assert mcp_server.executions == []
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_tools_hidden_total", tool="internal_debug_dump", path="mcp") >= 1


async def test_a_call_before_any_listing_is_judged_against_the_servers_own_list(start_mcp, mcp_server, mode):
    """After a restart the sidecar has seen no tools/list: it asks the server before judging."""
    sidecar = await start_mcp(mcp_server)
    async with client(sidecar, mode) as mcp:
        refused = payload(await mcp.call_tool("support_tickets_search", SLOPPY_SEARCH))
        hidden = payload(await mcp.call_tool("internal_debug_dump", {}))
    assert refused["status"] == "invalid_arguments"
    assert hidden["status"] == "unknown_tool"
    assert mcp_server.executions == []


async def test_the_refusal_is_the_same_structured_error_the_model_path_gives(start_mcp, mcp_server, model, mode):
    """One declaration (the server's inputSchema), one bad call, on both paths: one error."""
    sidecar = await start_mcp(mcp_server)
    async with client(sidecar, mode) as mcp:
        schema = next(t.input_schema for t in (await mcp.list_tools()).tools if t.name == "support_tickets_search")
        on_mcp = payload(await mcp.call_tool("support_tickets_search", SLOPPY_SEARCH))
    model.add_turns(
        [Turn(tool_calls=[ToolCallSpec("support_tickets_search", SLOPPY_SEARCH)]), Turn(text="I will fix it.")]
    )
    await AGENTS["anthropic"](sidecar.proxy_url, {"support_tickets_search": schema}).ask(False)
    repair = [r for r in model.requests if r.protocol is not None][1]
    assert AGENTS["anthropic"].tool_outputs(repair) == [on_mcp]


async def test_structured_content_that_breaks_the_output_schema_is_an_anomaly(start_mcp, mcp_server, mode):
    sidecar = await start_mcp(mcp_server)
    mcp_server.break_output_schema = True
    async with client(sidecar, mode) as mcp:
        await mcp.list_tools()
        with contextlib.suppress(Exception):  # the client's SDK may refuse it too: that is its right
            await mcp.call_tool("orders_lookup", {"order_id": "o-1"})
    assert mcp_server.executed("orders_lookup") == [{"order_id": "o-1"}]
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_tool_result_anomalies_total", tool="orders_lookup", kind="output_schema_violation") == 1


async def test_a_secret_in_a_result_is_withheld_from_the_client_as_on_the_model_path(start_mcp, mcp_server, mode):
    """The server ran the call; its result carries a live key: the client (and the model
    after it) gets the withheld notice the model path gives, never the key."""
    sidecar = await start_mcp(mcp_server)
    async with client(sidecar, mode) as mcp:
        await mcp.list_tools()
        result = await mcp.call_tool("support_tickets_get_context", {"ticket_id": "T-1042"})
    assert mcp_server.executed("support_tickets_get_context") == [{"ticket_id": "T-1042"}]
    assert result.is_error is True
    [block] = result.content
    notice = json.loads(block.text)
    assert notice["status"] == "withheld" and notice["tool"] == "support_tickets_get_context"
    assert LEAKED_SECRET not in result.model_dump_json()
    m = await scrape(sidecar.admin_url)
    tool = {"tool": "support_tickets_get_context"}
    assert m.value("sidecar_tool_results_rewritten_total", **tool, action="withheld") == 1
    assert m.value("sidecar_tool_result_anomalies_total", **tool, kind="secret_in_result") == 1


async def test_a_secret_in_structured_content_is_inspected_and_withheld(start_mcp, mcp_server, mode):
    """A tool with an outputSchema: the key sits in structuredContent (and its text copy)."""
    sidecar = await start_mcp(mcp_server)
    async with client(sidecar, mode) as mcp:
        await mcp.list_tools()
        result = await mcp.call_tool("orders_lookup", {"order_id": LEAKED_SECRET})
    assert result.is_error is True and result.structured_content is None
    assert json.loads(result.content[0].text)["status"] == "withheld"
    assert LEAKED_SECRET not in result.model_dump_json()


async def test_a_result_the_sidecar_cannot_judge_is_withheld(start_mcp, mcp_server, mode, monkeypatch):
    """The result policy (critical) raises: the client gets the withheld notice, not the result."""
    sidecar = await start_mcp(mcp_server)

    async def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("result policy bug")

    monkeypatch.setattr(sidecar.sidecar.result_policy, "outcome", broken)
    async with client(sidecar, mode) as mcp:
        await mcp.list_tools()
        result = await mcp.call_tool("support_tickets_get_context", {"ticket_id": "T-1042"})
    assert result.is_error is True
    notice = json.loads(result.content[0].text)
    assert notice["status"] == "withheld"
    assert "the sidecar could not check this result (policy_results failed)" in notice["reasons"]
    assert LEAKED_SECRET not in result.model_dump_json()
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_filter_errors_total", filter="policy_results", hook="on_answered", critical="true") == 1
