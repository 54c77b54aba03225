"""When the agent gets its answer, against what the filters do around it (runner.py,
`_settle_and_deliver`): what the agent's next request relies on (`on_delivered`) is stored
before the reply's last bytes go out, and what only observes (`on_done`) runs after them.

Both are checked with the official SDK reading the reply through the sidecar, whole and
streamed, against a filter that holds its hook until the test lets it go."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import orjson
import pytest
from aiohttp import web

from sidecar.dialects import StreamAssembler
from sidecar.dialects.sse import SSEEvent, parse_sse
from sidecar.exchange.filters import Filter
from sidecar.exchange.state import End, Exchange
from sidecar.model import Reply, ToolCall
from sidecar.proxy.handler import AiohttpAgent
from sidecar.scripted import ToolCallSpec, Turn
from tests.helpers.ledger import TOOLS
from tests.helpers.serve import serve

SEARCH = ToolCallSpec("support_tickets_search", {"query": "refund"})
HOLD_S = 5.0  # how long a held hook waits for the test before it gives up (then the test fails)


class _Holds(Filter):
    """Holds `on_delivered` or `on_done` until `release` is set, and says what it saw."""

    name = "holds"

    def __init__(self, hook: str) -> None:
        self.hook = hook
        self.release = asyncio.Event()
        self.released_in_time: bool | None = None
        self.finished = asyncio.Event()

    async def _hold(self) -> None:
        try:
            await asyncio.wait_for(self.release.wait(), HOLD_S)
            self.released_in_time = True
        except TimeoutError:
            self.released_in_time = False
        self.finished.set()

    async def on_delivered(self, ex: Exchange, reply: Reply, calls: list[ToolCall]) -> None:
        if self.hook == "on_delivered":
            await self._hold()

    async def on_done(self, ex: Exchange, end: End) -> None:
        if self.hook == "on_done":
            await self._hold()


def _client(sidecar: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=sidecar.proxy_url, api_key="sk-ant-test", max_retries=0)


def _request() -> dict[str, Any]:
    tools = [{"name": name, "input_schema": schema} for name, schema in TOOLS.items()]
    return {
        "model": "claude-test",
        "max_tokens": 100,
        "tools": tools,
        "messages": [{"role": "user", "content": "Find refund tickets."}],
        "extra_headers": {"X-Sidecar-Session": "delivery-order"},
    }


async def _read_calls(client: anthropic.AsyncAnthropic, stream: bool) -> list[str]:
    """The reply's tool calls as the SDK reads them: the whole body, or the stream to its end."""
    if stream:
        async with client.messages.stream(**_request()) as events:
            message = await events.get_final_message()
    else:
        message = await client.messages.create(**_request())
    return [block.name for block in message.content if block.type == "tool_use"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_agent_has_its_answer_before_on_done(start_sidecar, model, stream: bool) -> None:
    """A slow observer never delays the agent: the reply is read in full while `on_done` is held."""
    sidecar = await start_sidecar()
    holds = _Holds("on_done")
    sidecar.sidecar.add_filter(holds)
    model.add_turns([Turn(text="Searching.", tool_calls=[SEARCH])])
    calls = await asyncio.wait_for(_read_calls(_client(sidecar), stream), HOLD_S * 2)
    assert calls == ["support_tickets_search"]
    assert not holds.finished.is_set()  # on_done was still held while the agent read the reply
    holds.release.set()
    await asyncio.wait_for(holds.finished.wait(), HOLD_S)
    assert holds.released_in_time is True


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_reply_ends_only_after_on_delivered(start_sidecar, model, stream: bool) -> None:
    """What the agent's next request relies on is stored first: while `on_delivered` is held,
    the SDK cannot finish reading the reply (a stream's held tail has not gone out)."""
    sidecar = await start_sidecar()
    holds = _Holds("on_delivered")
    sidecar.sidecar.add_filter(holds)
    model.add_turns([Turn(text="Searching.", tool_calls=[SEARCH])])
    reading = asyncio.ensure_future(_read_calls(_client(sidecar), stream))
    await asyncio.sleep(0.5)
    assert not reading.done()  # the reply's end waits for on_delivered
    holds.release.set()
    assert await asyncio.wait_for(reading, HOLD_S) == ["support_tickets_search"]
    assert holds.released_in_time is True


# One read holding the whole stream: text the agent may have at once, then a call to hold.
_ONE_READ = b"".join(
    b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **fields}) + b"\n\n"
    for name, fields in [
        (
            "message_start",
            {
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "m",
                    "usage": {"input_tokens": 3, "output_tokens": 0},
                }
            },
        ),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "Searching."}}),
        ("content_block_stop", {"index": 0}),
        (
            "content_block_start",
            {"index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": SEARCH.name, "input": {}}},
        ),
        (
            "content_block_delta",
            {"index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"query": "refund"}'}},
        ),
        ("content_block_stop", {"index": 1}),
        ("message_delta", {"delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
        ("message_stop", {}),
    ]
)


async def test_text_goes_out_before_the_held_rest_of_its_read_is_read(start_sidecar, monkeypatch) -> None:
    """A read that starts a call: what may go out at once is written when holding starts, not
    after the held events behind it in the same read are read (the first byte waits less)."""
    seen: list[str] = []
    feed, write = StreamAssembler.feed, AiohttpAgent.write

    def logged_feed(self: StreamAssembler, event: SSEEvent) -> bool:
        seen.append(f"read {event.event}")
        return feed(self, event)

    async def logged_write(self: AiohttpAgent, data: bytes) -> None:
        seen.append(f"write {len(parse_sse(data))} events")
        await write(self, data)

    monkeypatch.setattr(StreamAssembler, "feed", logged_feed)
    monkeypatch.setattr(AiohttpAgent, "write", logged_write)

    async def upstream(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=_ONE_READ, headers={"Content-Type": "text/event-stream"})

    async with serve(upstream) as url:
        sidecar = await start_sidecar(anthropic_upstream=url)
        calls = await _read_calls(_client(sidecar), stream=True)
    assert calls == ["support_tickets_search"]
    # The four text events are written right after the call's start is read (held), before
    # anything behind it.
    held_from = seen.index("read content_block_start", seen.index("read content_block_stop"))
    assert seen[held_from + 1] == "write 4 events"
    assert seen[held_from + 2 :] == [
        "read content_block_delta",
        "read content_block_stop",
        "read message_delta",
        "read message_stop",
    ]
