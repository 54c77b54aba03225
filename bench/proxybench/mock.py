"""The benchmark's mock provider: `/v1/messages` and `/v1/chat/completions`, whole and streamed.

Every reply is rendered once at start-up by the project's scripted model formats
(`sidecar.scripted`, the same code the tests check against recorded provider traffic), so the
bytes are exactly what the APIs write, and serving one costs only a body read, a JSON parse
(for `stream`) and one socket write. A streamed reply goes out in one burst, framed as one
HTTP chunk per SSE event, the way a provider's stream arrives when the proxy reads it late:
text deltas, then two parallel tool calls whose argument JSON comes in many small fragments.

A request with `x-bench-pace-ms: N` gets its stream paced instead: one event per write, N ms
apart (`bench_paced.py` measures how soon a proxy forwards each one).

`GET /stats` counts the model requests by API: the pre-flight uses it to prove that a proxy
sent exactly one upstream request per client request (no repair round).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson
from aiohttp import web

from proxybench.bodies import TURN, Api, body
from proxybench.serve import Handler, nothing, run_main
from sidecar.scripted.anthropic import AnthropicFormat
from sidecar.scripted.openai_chat import ChatFormat
from sidecar.scripted.wire import Ids, WireFormat, plan_reply, stream_events

STATS_PATH = "/stats"
# The send times (time.monotonic, one clock for every process of the machine) of each event of
# the last paced stream, for a client to compare with when each event reached it.
PACED_PATH = "/stats/paced"


@dataclass(frozen=True, slots=True)
class Prebuilt:
    """One API's two replies, as bytes, with the headers that go with them."""

    whole: bytes
    whole_headers: dict[str, str]
    stream: bytes  # already chunk-framed: one HTTP chunk per SSE event, then the last chunk
    stream_headers: dict[str, str]
    stream_chunks: tuple[bytes, ...] = ()  # the same chunks one by one (paced streams)


LAST_CHUNK = b"0\r\n\r\n"
# A request with this header gets its stream paced: one event, then this many ms, then the next.
PACE_HEADER = "x-bench-pace-ms"


def _framed(event: bytes) -> bytes:
    return f"{len(event):x}\r\n".encode() + event + b"\r\n"


def _chunked(events: list[bytes]) -> bytes:
    return b"".join(_framed(e) for e in events) + LAST_CHUNK


def prebuild(api: Api, seed: int = 1) -> Prebuilt:
    ids = Ids(seed)
    fmt: WireFormat = AnthropicFormat(ids) if api is Api.ANTHROPIC else ChatFormat(ids)
    whole_request, stream_request = body(api, False), body(api, True)
    whole_reply = plan_reply(fmt, TURN, whole_request, len(orjson.dumps(whole_request)))
    option = orjson.OPT_INDENT_2 if fmt.pretty_body else 0
    stream_reply = plan_reply(fmt, TURN, stream_request, len(orjson.dumps(stream_request)))
    events = [fmt.encode(event, seq) for seq, event in enumerate(stream_events(fmt, stream_reply))]
    return Prebuilt(
        whole=orjson.dumps(fmt.body(whole_reply), option=option),
        whole_headers={"Content-Type": "application/json", fmt.request_id_header: whole_reply.request_id},
        stream=_chunked(events),
        stream_chunks=tuple(_framed(e) for e in events),
        stream_headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
            fmt.request_id_header: stream_reply.request_id,
            "Transfer-Encoding": "chunked",
        },
    )


class _FramedResponse(web.StreamResponse):
    """A response whose body is written already chunk-framed, in one write.

    aiohttp's own chunking frames each `write()` as one chunk and sends it at once (a syscall
    per SSE event); turning its length bookkeeping off (as its WebSocket response does) lets the
    mock send a whole multi-chunk stream in one write, keep-alive intact.
    """

    _length_check = False


class MockProvider:
    def __init__(self) -> None:
        self.replies = {api: prebuild(api) for api in Api}
        self.counts: Counter[str] = Counter()
        self.paced_sent: list[float] = []

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.method == "GET" and request.path == PACED_PATH:
            return web.Response(body=orjson.dumps(self.paced_sent), content_type="application/json")
        if request.method == "GET" and request.path == STATS_PATH:
            return web.Response(body=orjson.dumps(dict(self.counts)), content_type="application/json")
        api = next((a for a in Api if request.path.endswith(a.value)), None)
        if api is None or request.method != "POST":
            return web.Response(status=404, text="not found")
        parsed = orjson.loads(await request.read())
        self.counts[api.name] += 1
        reply = self.replies[api]
        if not parsed.get("stream"):
            return web.Response(body=reply.whole, headers=reply.whole_headers)
        response = _FramedResponse(headers=reply.stream_headers)
        await response.prepare(request)
        pace = request.headers.get(PACE_HEADER)
        if pace is None:
            await response.write_eof(reply.stream)
            return response
        self.paced_sent = sent = []
        for chunk in reply.stream_chunks:
            await response.write(chunk)
            sent.append(time.monotonic())
            await asyncio.sleep(float(pace) / 1000)
        await response.write_eof(LAST_CHUNK)
        return response


async def make(_args: argparse.Namespace) -> tuple[Handler, Callable[[], Awaitable[None]]]:
    return MockProvider().handle, nothing


if __name__ == "__main__":
    run_main(__doc__.splitlines()[0] if __doc__ else "mock provider", make)
