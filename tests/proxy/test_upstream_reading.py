"""The upstream client (sidecar/proxy/http_client.py) reads a chunked reply whole, however it
is paced and however many chunks it comes in: a slow reader pauses the socket, and reading
resumes after every pause."""

from __future__ import annotations

import asyncio
import gzip
import zlib

import pytest
from aiohttp import web
from yarl import URL

from sidecar.model import Provider
from sidecar.proxy.upstream import Upstreams
from tests.helpers.serve import serve

# 700 KB in 9,000 chunks, beyond the client's HIGH_WATER (256 KiB): a slow reader pauses the socket.
CHUNKS = [b'data: {"n": %d, "pad": "%s"}\n\n' % (i, b"x" * (i % 97)) for i in range(9000)]
WHOLE = b"".join(CHUNKS)


async def _chunked(request: web.Request) -> web.StreamResponse:
    """One HTTP chunk per event; `?gzip` compresses the stream (one chunk per compressed piece)."""
    compressed = "gzip" in request.query
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    if compressed:
        response.headers["Content-Encoding"] = "gzip"
    response.enable_chunked_encoding()
    await response.prepare(request)
    encoder = zlib.compressobj(9, zlib.DEFLATED, 31) if compressed else None
    for chunk in CHUNKS:
        await response.write(encoder.compress(chunk) + encoder.flush(zlib.Z_SYNC_FLUSH) if encoder else chunk)
    if encoder is not None:
        await response.write(encoder.flush())
    await response.write_eof()
    return response


async def _read(upstreams: Upstreams, url: str, slow: bool) -> bytes:
    response = await upstreams.open("GET", URL(url), {}, b"")
    try:
        parts = []
        while part := await response.chunk():
            parts.append(part)
            if slow and len(parts) <= 20:
                await asyncio.sleep(0.05)  # the buffer fills meanwhile: the reader pauses the socket
        return b"".join(parts)
    finally:
        response.release()


@pytest.mark.parametrize("slow", [False, True], ids=["fast-reader", "slow-reader"])
@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
async def test_a_long_chunked_reply_arrives_whole(slow: bool, compressed: bool) -> None:
    upstreams = Upstreams({Provider.ANTHROPIC: "http://unused"}, read_timeout_s=10, connect_timeout_s=5)
    await upstreams.start()
    try:
        async with serve(_chunked) as base:
            body = await asyncio.wait_for(_read(upstreams, base + ("/?gzip" if compressed else "/"), slow), 30)
    finally:
        await upstreams.close()
    assert body == WHOLE
    assert not compressed or gzip.compress(WHOLE)  # the gzip case really went through zlib
