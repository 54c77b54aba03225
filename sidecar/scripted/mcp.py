"""A scripted MCP server, built with the official `mcp` SDK, for the tests, the benchmark and
`sidecar demo`: the support tools of the policy library's support example, served over
Streamable HTTP on a free loopback port, answering every revision the SDK serves (2026-07-28
stateless, and 2025-06-18 / 2025-11-25 with `initialize` and `Mcp-Session-Id`).

Every execution is recorded (`executions`): a test asserts what reached the server, not only
what the client was told::

    async with ScriptedMcpServer() as server:
        url = server.url  # configure it as mcp.servers.support
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

# Not a real credential: the result a leaky tool returns, for result inspection.
LEAKED_SECRET = "sk_live_51Hdemo0000000000000000000000notreal"


# The tools' argument types (module level: the SDK reads the annotations from here).
Ticket = Annotated[str, Field(pattern=r"^T-[0-9]+$", description="Ticket id")]


@dataclass(frozen=True, slots=True)
class Execution:
    tool: str
    arguments: dict[str, Any]


class Order(BaseModel):
    """A structured result (the tool declares it as its outputSchema)."""

    order_id: str
    status: Literal["paid", "refunded", "shipped"]
    amount: float


@dataclass
class ScriptedMcpServer:
    """`json_response`: answer requests as JSON bodies (else SSE streams, the SDK default)."""

    json_response: bool = False
    path: str = "/mcp"
    executions: list[Execution] = field(default_factory=list)
    # Every JSON-RPC body POSTed to the server, decoded (what crossed the sidecar).
    received: list[Any] = field(default_factory=list)
    url: str = ""
    # The tools the server offers (what a client would see without the sidecar).
    tool_names: list[str] = field(default_factory=list)
    # Set to make orders_lookup break its own outputSchema (for the output check).
    break_output_schema: bool = False
    _server: Any = None
    _task: asyncio.Task[None] | None = None

    def executed(self, tool: str) -> list[dict[str, Any]]:
        return [e.arguments for e in self.executions if e.tool == tool]

    def _record(self, tool: str, **arguments: Any) -> None:
        self.executions.append(Execution(tool, arguments))

    def build(self) -> Any:
        """The MCPServer with the support tools (the SDK derives each inputSchema)."""
        from mcp.server.mcpserver import MCPServer
        from mcp.types import ToolAnnotations

        server = MCPServer("scripted-support", log_level="WARNING")
        read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
        destructive = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False)

        @server.tool(description="Search support tickets", annotations=read_only)
        def support_tickets_search(
            query: Annotated[str, Field(min_length=1)],
            status: Literal["OPEN", "PENDING", "CLOSED"] = "OPEN",
            limit: Annotated[int, Field(ge=1, le=50)] = 5,
        ) -> str:
            self._record("support_tickets_search", query=query, status=status, limit=limit)
            return '{"tickets": [{"id": "T-1042", "subject": "Refund not received"}]}'

        @server.tool(description="Customer and history for one ticket", annotations=read_only)
        def support_tickets_get_context(ticket_id: Ticket) -> str:
            self._record("support_tickets_get_context", ticket_id=ticket_id)
            # A leaky backend: the customer record carries a live payment key.
            return f'{{"customer": "ana@example.com", "orders": 3, "stripe_key": "{LEAKED_SECRET}"}}'

        @server.tool(description="Send a reply to the customer of a ticket", annotations=destructive)
        def support_replies_send(ticket_id: Ticket, to: str, body: Annotated[str, Field(min_length=1)]) -> str:
            self._record("support_replies_send", ticket_id=ticket_id, to=to, body=body)
            return f'{{"status": "sent", "to": "{to}"}}'

        @server.tool(description="Refund an amount to the customer of a ticket", annotations=destructive)
        def payments_refund(ticket_id: Ticket, amount: Annotated[float, Field(gt=0)]) -> str:
            self._record("payments_refund", ticket_id=ticket_id, amount=amount)
            return f'{{"status": "refunded", "amount": {amount}}}'

        @server.tool(description="Look an order up", annotations=read_only)
        def orders_lookup(order_id: str) -> Order:
            self._record("orders_lookup", order_id=order_id)
            if order_id == "missing":
                raise ValueError(f"no order {order_id}")  # the SDK answers isError: true
            if self.break_output_schema:
                return Order.model_construct(order_id=order_id, status="lost", amount=-1.0)  # type: ignore[arg-type]
            return Order(order_id=order_id, status="paid", amount=40.0)

        @server.tool(description="Dump internal state (operators only)", annotations=read_only)
        def internal_debug_dump() -> str:
            self._record("internal_debug_dump")
            return '{"state": "everything"}'

        return server

    async def __aenter__(self) -> ScriptedMcpServer:
        import uvicorn

        server = self.build()
        self.tool_names = [tool.name for tool in await server.list_tools()]
        app = _Recording(
            server.streamable_http_app(streamable_http_path=self.path, json_response=self.json_response),
            self.received,
        )
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it: uvicorn sets no TCP_NODELAY on sockets it is handed, and
        # its separate header and body writes would then wait out the peer's delayed ACK (~40 ms).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
        self._server = uvicorn.Server(config)
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
            await asyncio.sleep(0.01)
        self.url = f"http://127.0.0.1:{port}{self.path}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class _Recording:
    """ASGI middleware: keeps each POST body (decoded JSON) before the SDK reads it."""

    def __init__(self, app: Any, into: list[Any]) -> None:
        self.app = app
        self.into = into

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        with contextlib.suppress(ValueError):
            self.into.append(json.loads(body))
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            message: dict[str, Any] = await receive()  # after the body: the disconnect
            return message

        await self.app(scope, replay, send)


@contextlib.asynccontextmanager
async def scripted_mcp_server(json_response: bool = False) -> AsyncIterator[ScriptedMcpServer]:
    async with ScriptedMcpServer(json_response=json_response) as server:
        yield server
