"""A stream whose events arrive in one read (a fast provider, or a sidecar that fell behind):
the events before the first call go out as soon as the call is found, before the rest of the
read (the held call's many fragments) is parsed (`SSEParser.batches`, runner.py's `_relay`).
The agent still reads the whole stream as the upstream sent it, the call checked."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import orjson
import pytest
from aiohttp import web

from sidecar.dialects.sse import SSEEvent, SSEParser, format_event
from sidecar.proxy.handler import AiohttpAgent
from tests.conftest import StartSidecar
from tests.helpers.serve import serve

TEXT = [f"word {i} " for i in range(20)]
ARGUMENTS = orjson.dumps({"query": "refund " * 40}).decode()
PIECES = [ARGUMENTS[i : i + 5] for i in range(0, len(ARGUMENTS), 5)]
TOOL = {
    "name": "search",
    "input_schema": {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
        "additionalProperties": False,
    },
}


def _event(name: str, data: dict[str, Any]) -> bytes:
    return format_event(orjson.dumps({"type": name, **data}), name)


def _stream() -> bytes:
    """A Messages stream: text in many deltas, then one call in many fragments."""
    message: dict[str, Any] = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test"}
    message["content"] = []
    message |= {"stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}
    events = [_event("message_start", {"message": message})]
    events.append(_event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}))
    events += [_event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": t}}) for t in TEXT]
    events.append(_event("content_block_stop", {"index": 0}))
    call = {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}}
    events.append(_event("content_block_start", {"index": 1, "content_block": call}))
    events += [
        _event("content_block_delta", {"index": 1, "delta": {"type": "input_json_delta", "partial_json": piece}})
        for piece in PIECES
    ]
    events.append(_event("content_block_stop", {"index": 1}))
    delta = {"delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 90}}
    events.append(_event("message_delta", delta))
    events.append(_event("message_stop", {}))
    return b"".join(events)


async def _in_one_write(request: web.Request) -> web.StreamResponse:
    await request.read()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write_eof(_stream())  # the whole stream as one chunk: one read on loopback
    return response


async def test_the_events_before_a_call_go_out_before_the_rest_of_the_read_is_parsed(
    start_sidecar: StartSidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken: list[int] = []  # the events of each batch the relay took, in order
    exhausted: list[int] = []  # how many batches had been taken when a read's batches ran out
    at_writes: list[tuple[int, int]] = []  # (batches taken, reads exhausted) at each write
    batches = SSEParser.batches

    def spied(self: SSEParser, chunk: bytes, first: int) -> Iterator[list[SSEEvent]]:
        for batch in batches(self, chunk, first):
            taken.append(len(batch))
            yield batch
        exhausted.append(len(taken))

    write = AiohttpAgent.write

    async def spied_write(self: AiohttpAgent, data: bytes) -> None:
        if data:
            at_writes.append((len(taken), len(exhausted)))
        await write(self, data)

    monkeypatch.setattr(SSEParser, "batches", spied)
    monkeypatch.setattr(AiohttpAgent, "write", spied_write)
    async with serve(_in_one_write) as upstream:
        sidecar = await start_sidecar(anthropic_upstream=upstream)
        client = anthropic.AsyncAnthropic(base_url=sidecar.proxy_url, api_key="sk-ant-test", max_retries=0)
        request: Any = {"model": "claude-test", "max_tokens": 100, "tools": [TOOL]}
        async with client.messages.stream(**request, messages=[{"role": "user", "content": "Find refunds."}]) as events:
            message = await events.get_final_message()
    # The agent read the stream whole: the text, and the call (checked, then released).
    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert message.content[0].text == "".join(TEXT)  # type: ignore[union-attr]
    assert message.content[1].input == orjson.loads(ARGUMENTS)  # type: ignore[union-attr]
    # The stream came in one read, in several batches; the text went out before the read's
    # last batch was taken.
    events_in_stream = _stream().count(b"\n\n")
    assert sum(taken) == events_in_stream and len(taken) > 2
    assert exhausted == [len(taken)]
    first_write = at_writes[0]
    assert first_write[1] == 0 and first_write[0] < len(taken)
