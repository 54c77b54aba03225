"""Argument lockdown enforced end to end, for the three protocols, streaming and not."""

from __future__ import annotations

import json

import pytest

from sidecar.scripted import ToolCallSpec, Turn
from tests.e2e.agents import AGENTS

TICKETS_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1, "description": "Free-text search"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Max results"},
        "status": {"type": "string", "enum": ["OPEN", "CLOSED"]},
    },
    "required": ["query"],
}
SEND_SCHEMA = {
    "type": "object",
    "properties": {"ticket_id": {"type": "string"}, "body": {"type": "string"}},
    "required": ["ticket_id", "body"],
}
TOOLS = {"support_tickets_search": TICKETS_SCHEMA, "support_replies_send": SEND_SCHEMA}
BAD = ToolCallSpec("support_tickets_search", {"query": "refund", "limit": "10"})
GOOD = ToolCallSpec("support_tickets_search", {"query": "refund", "limit": 10})
WRONG_CASE = ToolCallSpec("support_tickets_search", {"query": "refund", "status": "open"})
SEND = ToolCallSpec("support_replies_send", {"ticket_id": "T-1", "body": "Hello"})

MATRIX = pytest.mark.parametrize(
    ("kind", "stream"),
    [(k, s) for k in AGENTS for s in (False, True)],
    ids=[f"{k}-{'stream' if s else 'whole'}" for k in AGENTS for s in (False, True)],
)


def _model_requests(model):
    return [r for r in model.requests if r.protocol is not None]


@MATRIX
async def test_model_corrects_itself_in_round_one(model, sidecar, kind, stream, tmp_path):
    model.add_turns([Turn(text="Searching.", tool_calls=[BAD]), Turn(text="Fixed.", tool_calls=[GOOD])])
    agent = AGENTS[kind](sidecar.proxy_url, TOOLS)
    received = await agent.ask(stream)

    assert received.calls == [("support_tickets_search", {"query": "refund", "limit": 10})]
    # One natural turn: the preamble the agent was given, then the corrected call; the text
    # the model wrote in answer to an error the agent never saw ("Fixed.") is not shown.
    assert received.text == "Searching."
    if kind == "anthropic":
        assert received.stop == "tool_use"
    if kind == "chat":
        assert received.stop == "tool_calls"
    if not stream:
        assert received.headers.get("x-sidecar-repair-rounds") == "1"

    requests = _model_requests(model)
    assert len(requests) == 2
    assert AGENTS[kind].tool_outputs(requests[1]) == [
        {
            "status": "invalid_arguments",
            "errors": [
                {
                    "field": "limit",
                    "problem": 'expected integer, got string "10"',
                    "expected": "integer between 1 and 100 — Max results",
                }
            ],
            "retryable": True,
        }
    ]
    assert requests[1].stream is False  # repair rounds are whole responses spliced in
    await sidecar.sidecar.rejections.aflush()  # written by a background thread
    log = [json.loads(line) for line in (tmp_path / "rejections.jsonl").read_text().splitlines()]
    assert [(r["tool"], r["action"], r["errors"][0]["field"]) for r in log] == [
        ("support_tickets_search", "repair", "limit")
    ]

    # The agent's next turn is consistent with what the provider saw (pairing checks pass).
    agent.answer({received.call_ids[0]: '{"tickets": []}'})
    model.add_turns([Turn(text="No tickets found.")])
    follow_up = await agent.ask(stream)
    assert follow_up.text == "No tickets found."


@MATRIX
async def test_model_never_corrects_gets_explanation(model, sidecar, kind, stream):
    model.add_turns([Turn(text="Try.", tool_calls=[WRONG_CASE])] * 3)
    agent = AGENTS[kind](sidecar.proxy_url, TOOLS)
    received = await agent.ask(stream)

    assert received.calls == []
    assert "[sidecar] These tool calls were not run" in received.text
    assert 'did you mean "OPEN"' in received.text
    assert received.stop in {"anthropic": ("end_turn",), "chat": ("stop",), "responses": (None,)}[kind]
    assert len(_model_requests(model)) == 3  # the request and max_repair_rounds (2) rounds

    # Next turn still valid for the provider (Responses: withheld call answered by the sidecar).
    agent.answer({})
    model.add_turns([Turn(text="Understood.")])
    assert (await agent.ask(stream)).text == "Understood."


@MATRIX
async def test_parallel_calls_never_half_delivered(model, sidecar, kind, stream):
    model.add_turns([Turn(tool_calls=[SEND, BAD]), Turn(tool_calls=[SEND, GOOD])])
    agent = AGENTS[kind](sidecar.proxy_url, TOOLS)
    received = await agent.ask(stream)

    assert [name for name, _ in received.calls] == ["support_replies_send", "support_tickets_search"]
    outputs = AGENTS[kind].tool_outputs(_model_requests(model)[1])
    assert [o["status"] for o in outputs] == ["not_run", "invalid_arguments"]


@MATRIX
async def test_block_mode_refuses_without_repair(start_sidecar, model, kind, stream):
    sidecar = await start_sidecar(enforcement={"mode": "block"})
    model.add_turns([Turn(text="Sending.", tool_calls=[SEND, BAD])])
    agent = AGENTS[kind](sidecar.proxy_url, TOOLS)
    received = await agent.ask(stream)

    assert received.calls == []
    assert "support_replies_send" in received.text and "not run because another call" in received.text
    assert len(_model_requests(model)) == 1
    agent.answer({})
    model.add_turns([Turn(text="ok")])
    assert (await agent.ask(stream)).text == "ok"


@MATRIX
async def test_observe_mode_passes_and_logs(start_sidecar, model, kind, stream, tmp_path):
    sidecar = await start_sidecar(enforcement={"mode": "observe"})
    model.add_turns([Turn(tool_calls=[BAD])])
    received = await AGENTS[kind](sidecar.proxy_url, TOOLS).ask(stream)

    assert received.calls == [("support_tickets_search", {"query": "refund", "limit": "10"})]
    assert len(_model_requests(model)) == 1
    await sidecar.sidecar.rejections.aflush()
    log = [json.loads(line) for line in (tmp_path / "rejections.jsonl").read_text().splitlines()]
    assert [(r["action"], r["verdict"]) for r in log] == [("observed", "reject")]


async def test_unknown_tool_and_unparseable_arguments(model, sidecar):
    model.add_turns(
        [
            Turn(
                tool_calls=[
                    ToolCallSpec("delete_everything", {}),
                    ToolCallSpec("support_tickets_search", raw_arguments='{"query": "x",'),
                ]
            ),
            Turn(tool_calls=[GOOD]),
        ]
    )
    received = await AGENTS["chat"](sidecar.proxy_url, TOOLS).ask(stream=False)
    assert received.calls == [("support_tickets_search", {"query": "refund", "limit": 10})]
    outputs = AGENTS["chat"].tool_outputs(_model_requests(model)[1])
    assert outputs[0]["status"] == "unknown_tool"
    assert outputs[1]["status"] == "invalid_arguments"
    assert "line 1 column" in outputs[1]["errors"][0]["problem"]


async def test_usage_is_summed_over_rounds(model, sidecar):
    model.add_turns(
        [
            Turn(tool_calls=[BAD], usage={"input_tokens": 10, "output_tokens": 7}),
            Turn(tool_calls=[GOOD], usage={"input_tokens": 20, "output_tokens": 5}),
        ]
    )
    received = await AGENTS["anthropic"](sidecar.proxy_url, TOOLS).ask(stream=True)
    assert received.raw.usage.output_tokens == 12


async def test_streams_report_repair_rounds_in_a_comment(model, sidecar):
    """A stream's headers left before the repair: the count comes as an SSE comment."""
    import aiohttp

    model.add_turns([Turn(tool_calls=[BAD]), Turn(tool_calls=[GOOD])])
    body = {
        "model": "m",
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "support_tickets_search", "input_schema": TICKETS_SCHEMA}],
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            sidecar.proxy_url + "/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"}
        ) as response,
    ):
        raw = await response.read()
    assert b"\n: x-sidecar-repair-rounds: 1\n\n" in raw
    assert raw.rstrip().endswith(b'{"type":"message_stop"}')


async def test_failed_repair_round_blocks_and_reports_each_call_once(model, sidecar, tmp_path):
    """The repair request fails upstream: the agent gets the explanation, and the refused call
    is counted and logged once (when its round began), not again by the block."""
    import aiohttp

    from sidecar.scripted import UpstreamError

    model.add_turns([Turn(tool_calls=[BAD]), Turn(error=UpstreamError(500))])
    received = await AGENTS["anthropic"](sidecar.proxy_url, TOOLS).ask(stream=False)
    assert received.calls == [] and "[sidecar] These tool calls were not run" in received.text

    await sidecar.sidecar.rejections.aflush()
    log = [json.loads(line) for line in (tmp_path / "rejections.jsonl").read_text().splitlines()]
    assert [(r["tool"], r["action"]) for r in log] == [("support_tickets_search", "repair")]
    async with aiohttp.ClientSession() as session, session.get(sidecar.admin_url + "/metrics") as response:
        metrics = await response.text()
    counted = (
        'sidecar_tool_calls_total{path="model",provider="anthropic",tool="support_tickets_search",verdict="reject"} 1.0'
    )
    assert counted in metrics
