"""Tool results matched to their calls: latency, outcome and anomalies, through the SDK agents."""

from __future__ import annotations

import aiohttp
import pytest

from sidecar.exchange.state import ToolResultRecord
from sidecar.filters.results import json_status, outcome_of, result_text
from sidecar.model import ToolResult
from sidecar.scripted import ToolCallSpec, Turn
from tests.e2e.agents import AGENTS
from tests.helpers.ledger import TOOLS, TRAITS, Capture
from tests.helpers.metrics import scrape

SEARCH = ToolCallSpec("support_tickets_search", {"query": "refund"})
SESSION = {"X-Sidecar-Session": "results-e2e"}


async def _one_result(start_sidecar, model, kind: str, content: str, is_error: bool = False):
    sidecar = await start_sidecar(tools=TRAITS)
    capture = Capture()
    sidecar.sidecar.add_filter(capture)
    agent = AGENTS[kind](sidecar.proxy_url, TOOLS, SESSION)
    model.add_turns([Turn(tool_calls=[SEARCH]), Turn(text="Done.")])
    first = await agent.ask(False)
    agent.answer({first.call_ids[0]: content})
    if is_error:
        agent.history[-1]["content"][0]["is_error"] = True  # Anthropic's tool_result flag
    assert (await agent.ask(False)).text == "Done."
    return sidecar, capture, first.call_ids[0]


@pytest.mark.parametrize("kind", list(AGENTS))
async def test_ok_result_gives_latency_and_outcome(start_sidecar, model, kind):
    content = '{"tickets": [{"id": "T-1"}]}'
    sidecar, capture, call_id = await _one_result(start_sidecar, model, kind, content)

    [record] = capture.results
    assert isinstance(record, ToolResultRecord)
    assert (record.call_id, record.tool, record.is_error, record.bytes) == (
        call_id,
        "support_tickets_search",
        False,
        len(content),
    )
    assert record.known and record.anomalies == [] and record.latency_s is not None and record.latency_s >= 0
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_tool_results_total", tool="support_tickets_search", outcome="ok") == 1
    assert m.value("sidecar_tool_call_duration_seconds_count", tool="support_tickets_search", outcome="ok") == 1
    # Remembered for replays.
    remembered = await sidecar.sidecar.state.get_call("results-e2e", call_id)
    assert remembered is not None and remembered.result == content and remembered.result_is_error is False


async def test_is_error_result_counts_as_error(start_sidecar, model):
    sidecar, capture, _ = await _one_result(start_sidecar, model, "anthropic", "database timeout", is_error=True)
    assert capture.results[0].is_error
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_tool_results_total", tool="support_tickets_search", outcome="error") == 1
    assert m.value("sidecar_tool_call_duration_seconds_count", tool="support_tickets_search", outcome="error") == 1


@pytest.mark.parametrize("kind", ["chat", "responses"])
async def test_json_failed_status_counts_as_error(start_sidecar, model, kind):
    sidecar, capture, _ = await _one_result(start_sidecar, model, kind, '{"status": "failed", "reason": "x"}')
    assert capture.results[0].outcome == "error"
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_tool_results_total", tool="support_tickets_search", outcome="error") == 1
    assert m.value("sidecar_tool_results_total", tool="support_tickets_search", outcome="ok", default=0.0) == 0


async def test_anomalies_are_counted_and_kept_for_policy(start_sidecar, model):
    """Raw Chat request: a duplicate result, a result for an unknown id, a wrong tool name."""
    sidecar = await start_sidecar(tools=TRAITS)
    capture = Capture()
    sidecar.sidecar.add_filter(capture)
    model.add_turns([Turn(text="ok")] * 2)
    tools = [{"type": "function", "function": {"name": n, "parameters": s}} for n, s in TOOLS.items()]
    call = {
        "id": "call_a",
        "type": "function",
        "function": {"name": "support_tickets_search", "arguments": '{"query": "x"}'},
    }
    body = {
        "model": "gpt-test",
        "tools": tools,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_a", "content": "[]", "name": "support_replies_send"},
            {"role": "tool", "tool_call_id": "call_a", "content": "[]"},
            {"role": "tool", "tool_call_id": "call_never_made", "content": "{}"},
        ],
    }
    url = sidecar.proxy_url + "/v1/chat/completions"
    async with aiohttp.ClientSession() as http, http.post(url, json=body, headers=SESSION) as r:
        await r.read()  # the provider's answer does not matter here

    kinds = [record.anomalies for record in capture.results]
    assert kinds == [["tool_name_mismatch"], ["duplicate_result"], ["unknown_call"]]
    assert [r.known for r in capture.results] == [False, False, False]  # no delivery in this process
    m = await scrape(sidecar.admin_url)
    for kind in ("tool_name_mismatch", "duplicate_result", "unknown_call"):
        assert m.total("sidecar_tool_result_anomalies_total", kind=kind) == 1  # sum by (kind)
    # By tool: the result's call (or the name it gave); a result answering no call is `other`.
    assert m.value("sidecar_tool_result_anomalies_total", tool="support_tickets_search", kind="duplicate_result") == 1
    assert m.value("sidecar_tool_result_anomalies_total", tool="other", kind="unknown_call") == 1
    # Unknown to the ledger (e.g. after a restart): counted, without a latency.
    assert m.value("sidecar_tool_results_total", tool="support_tickets_search", outcome="ok") == 1
    duration = m.value(
        "sidecar_tool_call_duration_seconds_count", tool="support_tickets_search", outcome="ok", default=0.0
    )
    assert duration == 0


async def test_call_id_reused_with_other_arguments(start_sidecar, model):
    sidecar = await start_sidecar(tools=TRAITS)
    agent = AGENTS["chat"](sidecar.proxy_url, TOOLS, SESSION)
    model.add_turns(
        [
            Turn(tool_calls=[ToolCallSpec("support_tickets_search", {"query": "a"}, id="call_same")]),
            Turn(tool_calls=[ToolCallSpec("support_tickets_search", {"query": "b"}, id="call_same")]),
        ]
    )
    first = await agent.ask(False)
    agent.answer({first.call_ids[0]: "[]"})
    await agent.ask(False)
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_tool_result_anomalies_total", tool="support_tickets_search", kind="call_id_reused") == 1


async def test_resent_result_is_not_counted_twice(start_sidecar, model):
    """An agent retrying the same request sends the same result again: one result, no anomaly."""
    sidecar, capture, call_id = await _one_result(start_sidecar, model, "anthropic", "[]")
    records_before = len(capture.results)
    agent_history_request = model.model_requests[1].json
    headers = {**SESSION, "x-api-key": "k", "anthropic-version": "2023-06-01"}
    url = sidecar.proxy_url + "/v1/messages"
    async with aiohttp.ClientSession() as http, http.post(url, json=agent_history_request, headers=headers) as r:
        await r.read()
    [again] = capture.results[records_before:]
    assert again.resent and again.call_id == call_id and again.anomalies == []
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_tool_results_total", tool="support_tickets_search", outcome="ok") == 1


@pytest.mark.parametrize(
    ("content", "is_error", "outcome"),
    [
        ('{"status": "ok"}', False, "ok"),
        ('{"status": "ERROR"}', False, "error"),
        ('{"status": "invalid_arguments", "errors": []}', False, "error"),
        ('{"status": "partial", "items": [1]}', False, "partial"),
        ("status: failed", False, "ok"),  # not JSON: no status to read
        ("[1, 2]", True, "error"),
        ([{"type": "text", "text": '{"status": "failed"}'}], False, "error"),  # Anthropic blocks
    ],
)
def test_outcome_of(content, is_error, outcome):
    assert outcome_of(ToolResult("c", content, is_error), result_text(content)) == outcome


def test_json_status_ignores_non_objects():
    assert json_status('["status"]') is None
    assert json_status('{"status": 3}') is None
    assert json_status("{not json") is None
