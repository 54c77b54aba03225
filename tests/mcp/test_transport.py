"""The Streamable HTTP transport on the wire, against a stand-in server that records what reached
it: batches where the revision allows them, mirrored headers, SSE events rewritten with their
ids kept, a session's resumed GET stream, paths and failures."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.helpers.metrics import scrape
from tests.helpers.ports import free_port
from tests.helpers.serve import serve

SEARCH_SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string", "minLength": 1}},
    "required": ["query"],
}
TOOLS = [
    {"name": "support_tickets_search", "inputSchema": SEARCH_SCHEMA, "annotations": {"readOnlyHint": True}},
    {"name": "internal_debug_dump", "inputSchema": {"type": "object"}},
]
LEGACY = {
    "MCP-Protocol-Version": "2025-06-18",
    "Mcp-Session-Id": "s-1",
    "Accept": "application/json, text/event-stream",
}


def call(request_id: Any, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def listing(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/list", "params": {}}


@dataclass
class Stub:
    """A minimal Streamable HTTP server: JSON, SSE (with event ids) or a cut stream + GET resume."""

    reply: str = "json"  # json | sse | cut
    received: list[Any] = field(default_factory=list)
    methods: list[str] = field(default_factory=list)
    resumable: list[dict[str, Any]] = field(default_factory=list)

    def answer(self, message: dict[str, Any]) -> dict[str, Any] | None:
        if "id" not in message or "method" not in message:
            return None
        if message["method"] == "tools/list":
            return {"jsonrpc": "2.0", "id": message["id"], "result": {"tools": TOOLS}}
        text = json.dumps({"ran": message["params"]["name"], "with": message["params"].get("arguments")})
        return {"jsonrpc": "2.0", "id": message["id"], "result": {"content": [{"type": "text", "text": text}]}}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.methods.append(request.method)
        if request.method == "GET":
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for n, message in enumerate(self.resumable):
                await response.write(f"id: resumed-{n}\nevent: message\ndata: {json.dumps(message)}\n\n".encode())
            await response.write_eof()
            return response
        if request.method == "DELETE":
            return web.Response(status=204)
        body = await request.json()
        self.received.append(body)
        messages = body if isinstance(body, list) else [body]
        answers = [a for a in (self.answer(m) for m in messages) if a is not None]
        if not answers:
            return web.Response(status=202)
        if self.reply == "json":
            return web.json_response(answers if isinstance(body, list) else answers[0])
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Mcp-Session-Id": "s-1"})
        await response.prepare(request)
        await response.write(
            b': hello\n\nevent: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n'
        )
        if self.reply == "cut":  # 2025-11-25 polling: the answers come on the resumed GET stream
            self.resumable = answers
            await response.write(b"id: e-0\nretry: 10\ndata: \n\n")
        else:
            for n, answer in enumerate(answers):
                await response.write(f"id: e-{n}\nevent: message\ndata: {json.dumps(answer)}\n\n".encode())
        await response.write_eof()
        return response


@pytest.fixture
async def stub() -> AsyncIterator[Stub]:
    yield Stub()


@pytest.fixture
async def proxied(start_sidecar: Any, stub: Stub) -> AsyncIterator[Any]:
    app = web.Application()
    app.router.add_route("*", "/mcp", stub.handle)
    async with serve(app) as url:
        yield await start_sidecar(policies="example:support", mcp={"servers": {"support": f"{url}/mcp"}})


async def post(sidecar: Any, body: Any, headers: dict[str, str] | None = None, path: str = "/mcp/support") -> Any:
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{sidecar.proxy_url}{path}", data=json.dumps(body).encode(), headers=headers or LEGACY) as r,
    ):
        return r.status, r.headers.get("Content-Type", ""), await r.read()


async def test_a_batch_is_split_where_2025_03_26_allows_batches(proxied, stub):
    await post(proxied, listing(1), {})
    batch = [
        call(2, "support_tickets_search", {"query": "refund"}),
        call(3, "support_tickets_search", {"query": ""}),  # refused: minLength
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]
    status, _, raw = await post(proxied, batch, {"Accept": "application/json, text/event-stream"})
    assert status == 200
    answers = {a["id"]: a for a in json.loads(raw)}
    assert set(answers) == {2, 3}
    assert answers[2]["result"]["content"][0]["text"].startswith('{"ran": "support_tickets_search"')
    refused = json.loads(answers[3]["result"]["content"][0]["text"])
    assert answers[3]["result"]["isError"] is True and refused["status"] == "invalid_arguments"
    forwarded = stub.received[-1]
    assert [m.get("id") for m in forwarded] == [2, None]  # the refused call never reached the server


async def test_a_batch_is_refused_where_the_revision_has_none(proxied, stub):
    status, _, raw = await post(proxied, [call(1, "support_tickets_search", {"query": "x"})], LEGACY)
    assert status == 400 and json.loads(raw)["error"]["code"] == -32600
    assert stub.received == []


async def test_mirrored_headers_must_match_the_body(proxied, stub):
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    body = call(1, "support_tickets_search", {"query": "x"})
    body["params"]["_meta"] = meta
    headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "payments_refund"}
    status, _, raw = await post(proxied, body, headers)
    assert status == 400 and json.loads(raw)["error"]["code"] == -32020  # HeaderMismatch
    assert stub.received == []


async def test_unreadable_bodies_are_refused_not_forwarded(proxied, stub):
    async with aiohttp.ClientSession() as http, http.post(f"{proxied.proxy_url}/mcp/support", data=b"{not json") as r:
        assert r.status == 400 and (await r.json())["error"]["code"] == -32700
    assert stub.received == []
    m = await scrape(proxied.admin_url)
    assert m.value("sidecar_requests_refused_total", reason="framing") == 1


async def test_a_hidden_tool_leaves_an_sse_event_that_keeps_its_id(proxied, stub):
    stub.reply = "sse"
    status, kind, raw = await post(proxied, listing(7))
    assert status == 200 and kind.startswith("text/event-stream")
    text = raw.decode()
    assert ": hello" in text and "notifications/progress" in text  # the rest passes as it came
    [event] = [e for e in text.split("\n\n") if '"id": 7' in e or '"id":7' in e]
    assert event.splitlines()[0] == "id: e-0" and "event: message" in event
    tools = json.loads(event.split("data: ", 1)[1])["result"]["tools"]
    assert [t["name"] for t in tools] == ["support_tickets_search"]


async def test_answers_on_a_resumed_get_stream_are_read_too(proxied, stub):
    """2025-11-25 SSE polling: the server ends the POST's stream early and answers on GET."""
    stub.reply = "cut"
    await post(proxied, listing(1))
    status, _, _ = await post(proxied, call(2, "internal_debug_dump", {}))  # refused: hidden
    assert status == 200
    await post(proxied, listing(3))
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{proxied.proxy_url}/mcp/support", headers={**LEGACY, "Last-Event-ID": "e-0"}) as r,
    ):
        text = (await r.read()).decode()
    assert "id: resumed-0" in text
    tools = json.loads(text.split("data: ", 1)[1].split("\n")[0])["result"]["tools"]
    assert [t["name"] for t in tools] == ["support_tickets_search"]  # read and filtered on GET as on POST


async def test_every_mcp_path_belongs_to_the_mcp_handler(proxied, stub, model):
    for path in ("/mcp/nope", "/mcp/support/extra", "/mcp", "/%6dcp/nope"):
        status, _, raw = await post(proxied, listing(1), path=path)
        assert status == 404, path
        assert "no MCP server is configured" in json.loads(raw)["error"]["message"]
    assert model.requests == []  # never forwarded to a model provider
    async with aiohttp.ClientSession() as http, http.delete(f"{proxied.proxy_url}/mcp/support", headers=LEGACY) as r:
        assert r.status == 204
    assert stub.methods[-1] == "DELETE"


async def test_an_unreachable_server_is_a_json_rpc_error(start_sidecar):
    sidecar = await start_sidecar(mcp={"servers": {"gone": f"http://127.0.0.1:{free_port()}/mcp"}})
    status, _, raw = await post(sidecar, listing(5), path="/mcp/gone")
    assert status == 502
    answer = json.loads(raw)
    assert answer["id"] == 5 and answer["error"]["code"] == -32603
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_upstream_errors_total", provider="mcp", cause="connect") == 1
