"""OpenTelemetry spans and the tool duration metric, end to end through the official SDKs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from sidecar.filters.tracing import DURATION_BUCKETS, TOOL_DURATION_METRIC
from sidecar.model import canonical_json, sha256_hex
from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn
from tests.e2e.agents import AGENTS
from tests.helpers.otlp import OtlpReceiver, StartTraced

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_SPAN}-01"

SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
    },
    "required": ["query"],
}
TOOLS = {"search_tickets": SCHEMA}
SECRET_ARG = "refund-4711-zebra"
BAD = ToolCallSpec("search_tickets", {"query": SECRET_ARG, "limit": "10"})
GOOD = ToolCallSpec("search_tickets", {"query": SECRET_ARG, "limit": 10})
RESULT = "ticket-result-payload-0815"

MATRIX = pytest.mark.parametrize(
    ("kind", "stream"),
    [("anthropic", False), ("chat", True), ("responses", False)],
    ids=["anthropic-whole", "chat-stream", "responses-whole"],
)


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def _answer_error(agent: Any, content: str) -> None:
    """The agent's tool result, flagged as an error where the protocol can say so."""
    assert agent.last is not None
    call_id = agent.last.call_ids[0]
    if agent.kind == "anthropic":
        agent.history.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": True}],
            }
        )
    else:
        agent.answer({call_id: content})


def _all_attribute_values(spans: list[Any]) -> str:
    return json.dumps(
        [{k: (list(v) if isinstance(v, tuple) else v) for k, v in (s.attributes or {}).items()} for s in spans]
    )


@MATRIX
async def test_request_repair_and_tool_spans(
    model: ScriptedModel, start_traced: StartTraced, kind: str, stream: bool
) -> None:
    traced = await start_traced()
    model.add_turns([Turn(text="Searching.", tool_calls=[BAD]), Turn(text="Fixed.", tool_calls=[GOOD])])
    agent = AGENTS[kind](traced.running.proxy_url, TOOLS, headers={"traceparent": TRACEPARENT})
    received = await agent.ask(stream)
    assert received.calls == [("search_tickets", {"query": SECRET_ARG, "limit": 10})]

    # Before the result arrives, the delivered call's span is still open.
    assert [s.name for s in traced.named("execute_tool")] == ["execute_tool search_tickets"]  # the refused one
    agent.answer({received.call_ids[0]: RESULT})
    model.add_turns([Turn(text="Found nothing.")])
    await agent.ask(stream)

    first, second = traced.named("chat ")
    for span in (first, second):
        assert span.context.trace_id == int(TRACE_ID, 16)
        assert span.parent is not None and span.parent.span_id == int(PARENT_SPAN, 16)
        assert span.parent.is_remote
        assert span.kind is SpanKind.CLIENT
    provider = "anthropic" if kind == "anthropic" else "openai"
    model_name = "claude-test" if kind == "anthropic" else "gpt-test"
    attrs = dict(first.attributes or {})
    assert first.name == f"chat {model_name}"
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == provider
    assert attrs["gen_ai.request.model"] == model_name
    assert attrs["gen_ai.response.model"]
    assert attrs["gen_ai.usage.input_tokens"] > 0 and attrs["gen_ai.usage.output_tokens"] > 0
    assert len(attrs["gen_ai.response.finish_reasons"]) >= 1
    assert attrs["sidecar.repair.rounds"] == 1 and attrs["sidecar.repair.outcome"] == "corrected"

    # The repair round is a child of the request span.
    (round_span,) = traced.named("repair_round")
    assert round_span.parent is not None and round_span.parent.span_id == first.context.span_id
    assert round_span.attributes is not None and round_span.attributes["sidecar.repair.round"] == 1
    assert round_span.attributes["gen_ai.usage.output_tokens"] > 0

    refused, delivered = sorted(traced.named("execute_tool"), key=lambda s: s.start_time or 0)
    assert refused.attributes is not None and delivered.attributes is not None
    assert refused.attributes["error.type"] == "schema_violation"
    assert refused.status.status_code is StatusCode.ERROR
    assert refused.attributes["sidecar.verdict"] == "reject"
    assert refused.attributes["sidecar.action"] == "repair"
    assert refused.parent is not None and refused.parent.span_id == first.context.span_id
    assert delivered.attributes["gen_ai.tool.name"] == "search_tickets"
    assert delivered.attributes["gen_ai.tool.call.id"] == received.call_ids[0]
    assert delivered.attributes["gen_ai.operation.name"] == "execute_tool"
    assert delivered.attributes["sidecar.verdict"] == "allow"
    assert delivered.attributes["sidecar.tool.outcome"] == "ok"
    assert "error.type" not in delivered.attributes
    # delivered → result: starts before the first request span ends, ends inside the second.
    assert delivered.start_time is not None and delivered.end_time is not None
    assert first.end_time is not None and second.start_time is not None and second.end_time is not None
    assert delivered.start_time <= first.end_time
    assert second.start_time <= delivered.end_time <= second.end_time

    # The upstream requests carry the sidecar's context, in the agent's trace.
    requests = [r for r in model.requests if r.protocol is not None]
    assert len(requests) == 3
    parents = [r.headers["traceparent"].split("-") for r in requests]
    assert all(p[1] == TRACE_ID for p in parents)
    assert parents[0][2] == _hex(first.context.span_id, 16)
    assert parents[1][2] == _hex(round_span.context.span_id, 16)  # the repair round's own request
    assert parents[2][2] == _hex(second.context.span_id, 16)

    # capture_content is off: no argument value, no result in any span.
    dumped = _all_attribute_values(traced.spans())
    assert SECRET_ARG not in dumped and RESULT not in dumped and '"10"' not in dumped
    assert "gen_ai.tool.call.arguments" not in dumped and "gen_ai.tool.call.result" not in dumped


async def test_capture_content_records_arguments_and_results(model: ScriptedModel, start_traced: StartTraced) -> None:
    traced = await start_traced(capture_content=True)
    model.add_turns([Turn(tool_calls=[GOOD]), Turn(text="Done.")])
    agent = AGENTS["anthropic"](traced.running.proxy_url, TOOLS)
    received = await agent.ask(stream=False)
    agent.answer({received.call_ids[0]: RESULT})
    await agent.ask(stream=False)

    (span,) = traced.named("execute_tool")
    assert span.attributes is not None
    assert json.loads(str(span.attributes["gen_ai.tool.call.arguments"])) == {"query": SECRET_ARG, "limit": 10}
    assert RESULT in str(span.attributes["gen_ai.tool.call.result"])
    # Without an agent traceparent the sidecar starts a trace; the upstream request joins it.
    (first, _) = traced.named("chat ")
    assert first.parent is None
    header = model.requests[0].headers["traceparent"].split("-")
    assert header[1] == _hex(first.context.trace_id, 32)


async def test_refusals_and_tool_errors_set_error_type(model: ScriptedModel, start_traced: StartTraced) -> None:
    traced = await start_traced()
    # Never corrected (unknown tool twice, then a schema violation): exhausted, blocked.
    invented = ToolCallSpec("drop_database", {"really": True})
    model.add_turns([Turn(tool_calls=[invented]), Turn(tool_calls=[invented]), Turn(tool_calls=[BAD])])
    agent = AGENTS["anthropic"](traced.running.proxy_url, TOOLS)
    blocked = await agent.ask(stream=False)
    assert blocked.calls == []
    kinds = [
        (s.attributes or {}).get("error.type")
        for s in sorted(traced.named("execute_tool"), key=lambda s: s.start_time or 0)
    ]
    assert kinds == ["unknown_tool", "unknown_tool", "schema_violation"]
    actions = [
        (s.attributes or {}).get("sidecar.action")
        for s in sorted(traced.named("execute_tool"), key=lambda s: s.start_time or 0)
    ]
    assert actions == ["repair", "repair", "blocked"]
    assert [s.name for s in traced.named("repair_round")] == ["repair_round 1", "repair_round 2"]
    (request_span,) = traced.named("chat ")
    assert (request_span.attributes or {})["sidecar.repair.outcome"] == "exhausted"

    # A result with is_error ends the tool span with error.type tool_error.
    agent.answer({})
    model.add_turns([Turn(tool_calls=[GOOD]), Turn(text="Sorry.")])
    received = await agent.ask(stream=False)
    _answer_error(agent, "backend exploded")
    await agent.ask(stream=False)
    (errored,) = [s for s in traced.named("execute_tool") if (s.attributes or {}).get("sidecar.action") == "allowed"]
    assert errored.attributes is not None
    assert errored.attributes["gen_ai.tool.call.id"] == received.call_ids[0]
    assert errored.attributes["error.type"] == "tool_error"
    assert errored.status.status_code is StatusCode.ERROR

    # Replay keys never appear in spans (hashed or raw).
    replay_key = sha256_hex(b"|".join([b"s", b"search_tickets", canonical_json(GOOD.arguments)]))
    assert replay_key not in _all_attribute_values(traced.spans())


async def test_pending_tool_spans_are_bounded(model: ScriptedModel, start_traced: StartTraced) -> None:
    traced = await start_traced()
    tracing = traced.running.sidecar.tracing
    assert tracing is not None
    tracing.max_pending = 2
    model.add_turns([Turn(tool_calls=[GOOD])] * 3)
    ids = []
    for _ in range(3):  # three agents, none of which ever answers
        ids += (await AGENTS["chat"](traced.running.proxy_url, TOOLS).ask(stream=False)).call_ids
    (abandoned,) = traced.named("execute_tool")
    assert abandoned.attributes is not None
    assert abandoned.attributes["gen_ai.tool.call.id"] == ids[0]
    assert abandoned.attributes["sidecar.tool.outcome"] == "abandoned"
    assert abandoned.status.description == "abandoned"
    # Closing the sidecar ends the rest as abandoned too (nothing is lost silently).
    await traced.running.sidecar.tracing.aclose()  # type: ignore[union-attr]
    assert sorted((s.attributes or {})["gen_ai.tool.call.id"] for s in traced.named("execute_tool")) == sorted(ids)


async def test_otlp_http_export_of_spans_and_tool_duration(
    model: ScriptedModel, start_traced: StartTraced, otlp: OtlpReceiver
) -> None:
    traced = await start_traced(otlp_metrics=True)
    model.add_turns([Turn(text="Searching.", tool_calls=[BAD]), Turn(tool_calls=[GOOD]), Turn(text="Done.")])
    agent = AGENTS["anthropic"](traced.running.proxy_url, TOOLS, headers={"traceparent": TRACEPARENT})
    received = await agent.ask(stream=True)
    agent.answer({received.call_ids[0]: RESULT})
    await agent.ask(stream=True)
    await traced.flush()

    assert set(otlp.content_types) == {"application/x-protobuf"}
    spans = otlp.spans()
    by_name: dict[str, list[Any]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    assert len(by_name["chat claude-test"]) == 2
    assert len(by_name["repair_round 1"]) == 1
    assert len(by_name["execute_tool search_tickets"]) == 2
    for span in spans:
        assert span.trace_id.hex() == TRACE_ID
    first = min(by_name["chat claude-test"], key=lambda s: s.start_time_unix_nano)
    assert first.parent_span_id.hex() == PARENT_SPAN
    assert by_name["repair_round 1"][0].parent_span_id == first.span_id

    def attributes(span: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for kv in span.attributes:
            value = kv.value
            kind = value.WhichOneof("value")
            out[kv.key] = (
                [v.string_value for v in value.array_value.values] if kind == "array_value" else getattr(value, kind)
            )
        return out

    chat = attributes(first)
    assert chat["gen_ai.operation.name"] == "chat"
    assert chat["gen_ai.provider.name"] == "anthropic"
    assert chat["gen_ai.request.model"] == "claude-test"
    assert chat["gen_ai.response.finish_reasons"] == ["tool_use"]
    assert chat["gen_ai.usage.output_tokens"] > 0
    tools = sorted(
        (attributes(s) for s in by_name["execute_tool search_tickets"]), key=lambda a: a.get("error.type", "")
    )
    assert tools[0]["gen_ai.tool.call.id"] == received.call_ids[0] and "error.type" not in tools[0]
    assert tools[1]["error.type"] == "schema_violation"
    assert SECRET_ARG not in str([attributes(s) for s in spans])

    ((metric, point),) = otlp.metric_points(TOOL_DURATION_METRIC)
    assert metric.unit == "s"
    assert list(point.explicit_bounds) == list(DURATION_BUCKETS)
    assert point.count == 1
    assert 0 < point.sum < 60  # seconds, not milliseconds
    labels = {kv.key: kv.value.string_value for kv in point.attributes}
    assert labels == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "search_tickets",
        "gen_ai.provider.name": "anthropic",
    }


async def test_tracing_off_installs_nothing(model: ScriptedModel, sidecar: Any) -> None:
    assert sidecar.sidecar.tracing is None
    assert "tracing" not in sidecar.sidecar.chain.names()
    model.add_turns([Turn(text="hi")])
    agent = AGENTS["anthropic"](sidecar.proxy_url, TOOLS, headers={"traceparent": TRACEPARENT})
    await agent.ask(stream=False)
    # The agent's own trace context passes through untouched.
    assert model.requests[0].headers["traceparent"] == TRACEPARENT
