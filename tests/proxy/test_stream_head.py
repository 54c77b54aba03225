"""The agent's side of a stream (`AiohttpAgent`): with `head_waits` the response head goes out in
the same send as the first bytes written; without it, at once. Read from a raw socket: the
first read holds what the first send carried (the writes are 0.3 s apart)."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from sidecar.proxy.handler import AiohttpAgent
from tests.helpers.serve import serve

EVENT = b"event: ping\ndata: {}\n\n"


class _Answer:
    """The upstream answer `open_stream` reads its status line and headers from."""

    status = 200
    reason = "OK"
    headers = CIMultiDict({"Content-Type": "text/event-stream"})

    async def chunk(self) -> bytes:
        return b""

    def ready(self) -> bool:
        return True


async def _first_read(head_waits: bool) -> bytes:
    async def handler(request: web.Request) -> web.StreamResponse:
        agent = AiohttpAgent(request)
        await agent.open_stream(_Answer(), head_waits)
        await asyncio.sleep(0.3)
        await agent.write(EVENT)
        await agent.close_stream()
        assert agent.response is not None
        return agent.response

    async with serve(handler) as base:
        url = URL(base)
        reader, writer = await asyncio.open_connection(url.host, url.port)
        writer.write(b"GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        await writer.drain()
        first = await asyncio.wait_for(reader.read(65536), 5)
        writer.close()
        await writer.wait_closed()
    return first


@pytest.mark.parametrize("head_waits", [True, False])
async def test_the_head_goes_with_the_first_write_only_when_it_waits(head_waits: bool) -> None:
    first = await _first_read(head_waits)
    assert first.startswith(b"HTTP/1.1 200")
    assert (EVENT in first) is head_waits
