"""MCP spans and metrics per the OpenTelemetry MCP conventions, the trace context carried to the
server in `params._meta`, and the execute_tool span of a model-path call ending at its MCP result."""

from __future__ import annotations

import asyncio
from typing import Any

from mcp import Client
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from sidecar.scripted import ToolCallSpec, Turn
from tests.e2e.agents import AGENTS

SEARCH = {"query": "refund", "status": "OPEN", "limit": 5}


async def _traced(start_mcp: Any, server: Any, otlp: Any) -> tuple[Any, InMemorySpanExporter]:
    sidecar = await start_mcp(server, telemetry={"otlp_endpoint": otlp.url, "otlp_metrics": True})
    memory = InMemorySpanExporter()
    sidecar.sidecar.tracing.provider.add_span_processor(SimpleSpanProcessor(memory))
    return sidecar, memory


async def test_tools_call_spans_follow_the_mcp_conventions(otlp, start_mcp, sse_server):
    sidecar, memory = await _traced(start_mcp, sse_server, otlp)
    async with Client(f"{sidecar.proxy_url}/mcp/support", mode="2026-07-28") as mcp:
        await mcp.list_tools()
        await mcp.call_tool("support_tickets_search", SEARCH)
        await mcp.call_tool("support_tickets_search", {"query": ""})  # refused: minLength
        await mcp.call_tool("orders_lookup", {"order_id": "missing"})  # the tool fails: isError
    spans = {s.name: s for s in memory.get_finished_spans()}
    ok, refused = [s for s in memory.get_finished_spans() if s.name == "tools/call support_tickets_search"]
    assert ok.kind is SpanKind.CLIENT
    attrs = dict(ok.attributes or {})
    assert attrs["mcp.method.name"] == "tools/call"
    assert attrs["gen_ai.tool.name"] == "support_tickets_search"
    assert attrs["gen_ai.operation.name"] == "execute_tool"
    assert attrs["mcp.protocol.version"] == "2026-07-28"
    assert attrs["jsonrpc.request.id"]
    assert "error.type" not in attrs
    failed = dict(spans["tools/call orders_lookup"].attributes or {})
    assert failed["error.type"] == "tool_error"
    assert dict(refused.attributes or {})["error.type"] == "schema_violation"
    assert "tools/list" in spans

    # The server received the call with this span's context in params._meta.
    [sent] = [
        b for b in sse_server.received if b.get("method") == "tools/call" and b["params"]["name"] == "orders_lookup"
    ]
    traceparent = sent["params"]["_meta"]["traceparent"]
    context = spans["tools/call orders_lookup"].context
    assert traceparent.startswith(f"00-{context.trace_id:032x}-{context.span_id:016x}-")

    await asyncio.to_thread(sidecar.sidecar.tracing.force_flush)
    points = otlp.metric_points("mcp.client.operation.duration")
    assert {dict((a.key, a.value.string_value) for a in p.attributes).get("mcp.method.name") for _, p in points} == {
        "tools/call",
        "tools/list",
    }


async def test_the_execute_tool_span_covers_both_legs(otlp, start_mcp, sse_server, model):
    """Model-path delivery to MCP result: one execute_tool span, the MCP span inside it."""
    sidecar, memory = await _traced(start_mcp, sse_server, otlp)
    async with Client(f"{sidecar.proxy_url}/mcp/support", mode="2026-07-28") as mcp:
        schema = next(t.input_schema for t in (await mcp.list_tools()).tools if t.name == "support_tickets_search")
        model.add_turns([Turn(tool_calls=[ToolCallSpec("support_tickets_search", SEARCH)])])
        received = await AGENTS["anthropic"](sidecar.proxy_url, {"support_tickets_search": schema}).ask(False)
        [call_id] = received.call_ids
        await mcp.call_tool("support_tickets_search", SEARCH)  # the agent executes the delivered call
    [execute] = [s for s in memory.get_finished_spans() if s.name == "execute_tool support_tickets_search"]
    [leg] = [s for s in memory.get_finished_spans() if s.name == "tools/call support_tickets_search"]
    assert dict(execute.attributes or {})["gen_ai.tool.call.id"] == call_id
    assert dict(execute.attributes or {})["sidecar.tool.outcome"] == "ok"
    assert leg.parent is not None and leg.parent.span_id == execute.context.span_id
    # From the model path's delivery to the MCP result (which arrives before the leg ends).
    assert execute.start_time <= leg.start_time <= execute.end_time <= leg.end_time
