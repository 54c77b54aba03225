"""The MCP path's transport: `/mcp/{server}` on the proxy port, Streamable HTTP to the configured
server (`mcp.servers`), and nowhere else.

POST (JSON-RPC requests, notifications, responses) goes through the MCP runner
(`sidecar/mcp/runner.py`); GET (the session's SSE stream, 2025-06-18 / 2025-11-25) is relayed
with the answers it resumes read on the way; DELETE (ending a session) and anything else is
forwarded as sent. Headers pass through as on the model path (hop-by-hop ones dropped, the
sidecar's session header kept back); credentials are never logged. The whole `/mcp` prefix
belongs to this handler: a name that is not configured gets a 404, never a model provider.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from urllib.parse import unquote

from aiohttp import web
from yarl import URL

from sidecar.config import Settings
from sidecar.exchange.runner import UpstreamAnswer, UpstreamError
from sidecar.mcp import wire
from sidecar.mcp.runner import McpRunner, RefusalSink, Target
from sidecar.mcp.wire import ErrorCode
from sidecar.model import RefusalReason
from sidecar.proxy.handler import AiohttpAgent, BodyTooLarge, read_body
from sidecar.proxy.headers import downstream_response_headers, upstream_request_headers
from sidecar.proxy.routing import canonical_path
from sidecar.proxy.upstream import Upstreams

log = logging.getLogger("sidecar.mcp")

PREFIX = "/mcp"


class UpstreamMcp:
    """The runner's way to the MCP servers: the one upstream client, configured URLs only."""

    def __init__(self, upstreams: Upstreams) -> None:
        self.upstreams = upstreams

    def open(
        self, method: str, url: URL, headers: Mapping[str, str], body: bytes
    ) -> AbstractAsyncContextManager[UpstreamAnswer]:
        return self.upstreams.opened(method, url, headers, body)


def _server_of(raw_path: str) -> str | None:
    """`/mcp/{name}` → name (decoded, one segment); None for anything else under /mcp."""
    path = unquote(canonical_path(raw_path)).rstrip("/")
    parts = path.split("/")
    if len(parts) != 3 or parts[1] != "mcp" or not parts[2]:
        return None
    return parts[2]


class McpHandler:
    def __init__(self, settings: Settings, runner: McpRunner, upstreams: Upstreams, refused: RefusalSink) -> None:
        self.settings = settings
        self.runner = runner
        self.upstreams = upstreams
        self._refused = refused
        self.targets = {name: Target(name, URL(url)) for name, url in settings.mcp.servers.items()}

    def claims(self, raw_path: str) -> bool:
        path = unquote(canonical_path(raw_path))
        return path == PREFIX or path.startswith(PREFIX + "/")

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        name = _server_of(request.rel_url.raw_path)
        target = self.targets.get(name) if name is not None else None
        if target is None:
            message = f"no MCP server is configured at {request.rel_url.path} (mcp.servers: {sorted(self.targets)})"
            return self._refuse(404, ErrorCode.METHOD_NOT_FOUND, RefusalReason.UNSUPPORTED_PATH, message, request)
        try:
            body = await read_body(request, self.settings.max_body_bytes)
        except BodyTooLarge:
            message = f"request body exceeds the sidecar limit of {self.settings.max_body_bytes} bytes"
            return self._refuse(413, ErrorCode.INVALID_REQUEST, RefusalReason.SIZE, message, request)
        query = request.rel_url.raw_query_string
        if query and not target.url.raw_query_string:  # the query as received, unless the URL has its own
            target = Target(target.name, target.url.with_query(query))
        headers = upstream_request_headers(request.headers, drop=[self.settings.session_header])
        agent = AiohttpAgent(request)
        if request.method == "POST":
            await self.runner.post(target, headers, request.headers, body, agent)
        elif request.method == "GET":
            await self.runner.listen(target, headers, request.headers, agent)
        else:
            return await self._forward(request, target, headers, body)
        if agent.response is None:  # cannot happen: the runner always answers
            return self._refuse(502, ErrorCode.INTERNAL_ERROR, RefusalReason.FRAMING, "no response", request)
        return agent.response

    def _refuse(
        self, status: int, code: int, reason: RefusalReason, message: str, request: web.BaseRequest
    ) -> web.Response:
        self._refused(reason, request.rel_url.path, message)
        body = wire.dumps(wire.error(None, code, message))
        return web.Response(body=body, status=status, content_type="application/json")

    async def _forward(
        self, request: web.BaseRequest, target: Target, headers: Mapping[str, str], body: bytes
    ) -> web.StreamResponse:
        """DELETE (a session ends) and methods MCP does not define: as sent, answered as it came."""
        try:
            upstream = await self.upstreams.open(request.method, target.url, headers, body)
        except UpstreamError as exc:
            body_out = wire.dumps(wire.error(None, ErrorCode.INTERNAL_ERROR, exc.message))
            return web.Response(body=body_out, status=exc.status, content_type="application/json")
        async with upstream:
            try:
                raw = await upstream.read()
            except UpstreamError as exc:
                return self._refuse(502, ErrorCode.INTERNAL_ERROR, RefusalReason.FRAMING, exc.message, request)
            headers_out = downstream_response_headers(upstream.headers)
            return web.Response(body=raw, status=upstream.status, reason=upstream.reason, headers=headers_out)
