"""Property: whatever the upstream sends, what the official SDK assembles from the sidecar's
output holds only calls the sidecar checked and delivered (docs/coverage.md, "Framing").

Hypothesis builds replies (text and calls, declared and not) in each protocol's stream
grammar, then breaks the framing the ways an upstream could (events duplicated, dropped,
swapped or renamed, indexes changed, calls moved into `message_start` or the terminal event,
names split across fragments, other statuses and content types). Each reply goes through a
real sidecar to the official SDK's own stream helper; every call the SDK hands over must be
one the sidecar delivered, with the same name and arguments.

Bounded in the suite; `SIDECAR_PROPERTY_EXAMPLES=2000` (README, "Tests") runs a longer search.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import orjson
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.app import Running, start
from sidecar.config import load_settings
from sidecar.exchange.filters import Filter
from sidecar.exchange.state import Exchange
from sidecar.model import ToolCall
from tests.helpers.serve import serve

EXAMPLES = int(os.environ.get("SIDECAR_PROPERTY_EXAMPLES", "40"))
PROPERTY = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
SSE = "text/event-stream"

Call = tuple[str, str, Any]  # (id, name, arguments)


class _Delivered(Filter):
    """Records every call the sidecar delivers (after every check)."""

    name = "probe"

    def __init__(self) -> None:
        self.calls: list[Call] = []

    async def on_deliver(self, ex: Exchange, calls: list[ToolCall]) -> None:
        self.calls += [(c.id, c.name, c.arguments) for c in calls]


class _World:
    """A provider stand-in answering the bytes of the current example, and a sidecar in front,
    on a loop of their own: the SDK's synchronous clients call them from the test thread."""

    def __init__(self, tmp: str) -> None:
        self.reply: tuple[int, str, bytes] = (200, "application/json", b"{}")
        self.probe = _Delivered()
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.running: Running | None = None
        self._url: str | None = None
        self._tmp = tmp
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        status, content_type, body = self.reply
        return web.Response(status=status, body=body, headers={"Content-Type": content_type})

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        async with serve(self._handle) as url:
            flags = {
                "listen": "127.0.0.1:0",
                "admin_listen": "127.0.0.1:0",
                "anthropic_upstream": url,
                "openai_upstream": url,
                "rejection_log": {"path": os.path.join(self._tmp, "rejections.jsonl")},
                "enforcement": {"max_repair_rounds": 0},  # a repair round would get the same bytes
            }
            self.running = await start(load_settings(flags=flags, environ={}))
            self.running.sidecar.add_filter(self.probe)
            self._url = self.running.proxy_url
            self._ready.set()
            await self._stop.wait()
            await self.running.stop()
            # The policy engine must be dropped on the thread that made it (regorus engines are
            # not sendable): nothing of this sidecar may outlive the thread.
            self.running = None
            gc.collect()

    def __enter__(self) -> _World:
        self._thread.start()
        self._ready.wait(30)
        return self

    def __exit__(self, *_: object) -> None:
        assert self._stop is not None
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    @property
    def url(self) -> str:
        assert self._url is not None
        return self._url


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_World]:
    # Garbage of earlier tests (their policy engines) is collected here, on their own thread,
    # not by a collection that happens to run on the world's thread (see _World._main).
    gc.collect()
    gc.disable()
    try:
        with _World(str(tmp_path_factory.mktemp("property"))) as w:
            yield w
    finally:
        gc.enable()


# -- what the model says ------------------------------------------------------------------------

NAMES = st.sampled_from(["lookup", "delete_all"])  # declared, and not
ARGS = st.fixed_dictionaries({}, optional={"key": st.text(max_size=4), "n": st.integers(-3, 3)})
PART = st.one_of(
    st.tuples(st.just("text"), st.text(max_size=6)),
    st.tuples(st.just("call"), NAMES, ARGS),
)
PARTS = st.lists(PART, min_size=1, max_size=3)


def _ids(n: int, prefix: str) -> str:
    return f"{prefix}{n}"


# -- the three grammars --------------------------------------------------------------------------


def anthropic_events(parts: list[Any]) -> list[tuple[str | None, Any]]:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "m", "usage": {}}
    events: list[tuple[str | None, Any]] = [("message_start", {"type": "message_start", "message": message})]
    for n, part in enumerate(parts):
        if part[0] == "text":
            block, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": part[1]}
        else:
            block = {"type": "tool_use", "id": _ids(n, "toolu_"), "name": part[1], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(part[2])}
        events += [
            ("content_block_start", {"type": "content_block_start", "index": n, "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": n, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": n}),
        ]
    stop = "tool_use" if any(p[0] == "call" for p in parts) else "end_turn"
    events += [
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 1}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return events


def responses_events(parts: list[Any]) -> list[tuple[str | None, Any]]:
    def item(n: int, part: Any, final: bool) -> dict[str, Any]:
        if part[0] == "text":
            content = [{"type": "output_text", "text": part[1], "annotations": []}] if final else []
            return {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed", "content": content}
        arguments = json.dumps(part[2]) if final else ""
        return {
            "type": "function_call",
            "id": f"fc_{n}",
            "call_id": _ids(n, "call_"),
            "name": part[1],
            "arguments": arguments,
        }

    def response(status: str, output: list[Any]) -> dict[str, Any]:
        return {"id": "resp_1", "object": "response", "status": status, "output": output, "created_at": 1, "model": "m"}

    events: list[tuple[str | None, Any]] = [
        ("response.created", {"type": "response.created", "response": response("in_progress", [])})
    ]
    for n, part in enumerate(parts):
        events.append(
            (
                "response.output_item.added",
                {"type": "response.output_item.added", "output_index": n, "item": item(n, part, False)},
            )
        )
        if part[0] == "call":
            delta = {
                "type": "response.function_call_arguments.delta",
                "output_index": n,
                "item_id": f"fc_{n}",
                "delta": json.dumps(part[2]),
            }
            events.append((delta["type"], delta))
        events.append(
            (
                "response.output_item.done",
                {"type": "response.output_item.done", "output_index": n, "item": item(n, part, True)},
            )
        )
    final = [item(n, p, True) for n, p in enumerate(parts)]
    events.append(("response.completed", {"type": "response.completed", "response": response("completed", final)}))
    return [(name, {**data, "sequence_number": k}) for k, (name, data) in enumerate(events)]


def chat_events(parts: list[Any]) -> list[tuple[str | None, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, dict[str, Any]]:
        return None, {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    events = [chunk({"role": "assistant", "content": ""})]
    calls = 0
    for part in parts:
        if part[0] == "text":
            events.append(chunk({"content": part[1]}))
            continue
        header = {
            "index": calls,
            "id": _ids(calls, "call_"),
            "type": "function",
            "function": {"name": part[1], "arguments": ""},
        }
        events += [
            chunk({"tool_calls": [header]}),
            chunk({"tool_calls": [{"index": calls, "function": {"arguments": json.dumps(part[2])}}]}),
        ]
        calls += 1
    events += [chunk({}, "tool_calls" if calls else "stop"), (None, "[DONE]")]
    return events


# -- how an upstream breaks them -------------------------------------------------------------------


@st.composite
def broken(draw: st.DrawFn, events: list[tuple[str | None, Any]]) -> list[tuple[str | None, Any]]:
    events = [(name, json.loads(json.dumps(data)) if isinstance(data, dict) else data) for name, data in events]
    for _ in range(draw(st.integers(0, 3))):
        if not events:
            break
        at = draw(st.integers(0, len(events) - 1))
        name, data = events[at]
        how = draw(
            st.sampled_from(["duplicate", "drop", "swap", "rename", "unname", "index", "hoist", "split", "empty_final"])
        )
        if how == "duplicate":
            events.insert(at, (name, data))
        elif how == "drop":
            events.pop(at)
        elif how == "swap" and at + 1 < len(events):
            events[at], events[at + 1] = events[at + 1], events[at]
        elif how == "rename" and name:
            events[at] = (draw(st.sampled_from(["ping", "content_block_start", "message_start", "error"])), data)
        elif how == "unname":
            events[at] = (None, data)
        elif how == "index" and isinstance(data, dict):
            for key in ("index", "output_index"):
                if key in data:
                    data[key] = draw(st.integers(0, 3))
        elif how == "hoist" and isinstance(data, dict):
            # a call's block moved into the opening or closing event, where SDKs also read it
            block = data.get("content_block") or data.get("item")
            target = events[0][1] if draw(st.booleans()) else events[-1][1]
            if isinstance(block, dict) and isinstance(target, dict):
                holder = target.get("message") or target.get("response")
                if isinstance(holder, dict):
                    key = "content" if "content" in holder and "output" not in holder else "output"
                    holder[key] = [*holder.get(key, []), block]
        elif how == "split" and isinstance(data, dict):
            for choice in data.get("choices") or []:
                for fragment in choice.get("delta", {}).get("tool_calls") or []:
                    fragment.setdefault("function", {})["name"] = draw(st.sampled_from(["_all", "lookup", "up"]))
        elif how == "empty_final" and isinstance(data, dict) and isinstance(data.get("response"), dict):
            data["response"].pop("output", None)
    return events


def encode(events: list[tuple[str | None, Any]]) -> bytes:
    out = b""
    for name, data in events:
        payload = data.encode() if isinstance(data, str) else orjson.dumps(data)
        out += (b"event: " + name.encode() + b"\n" if name else b"") + b"data: " + payload + b"\n\n"
    return out


# -- what the SDK hands the agent ------------------------------------------------------------------

SDK_ERRORS = (
    anthropic.APIError,
    openai.APIError,
    RuntimeError,
    ValueError,
    KeyError,
    IndexError,
    TypeError,
    AssertionError,
)


def sdk_anthropic(url: str, session: str) -> list[Call]:
    client = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
    tools = [{"name": "lookup", "input_schema": {"type": "object"}}]
    try:
        with client.messages.stream(
            model="m",
            max_tokens=5,
            messages=[{"role": "user", "content": "hi"}],
            tools=tools,  # type: ignore[list-item]
            extra_headers={"X-Sidecar-Session": session},
        ) as stream:
            message = stream.get_final_message()
    except SDK_ERRORS:
        return []
    finally:
        client.close()
    return [(b.id, b.name, b.input) for b in message.content if b.type == "tool_use"]


def sdk_responses(url: str, session: str) -> list[Call]:
    client = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
    tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
    try:
        with client.responses.stream(
            model="m",
            input="hi",
            tools=tools,
            extra_headers={"X-Sidecar-Session": session},  # type: ignore[arg-type]
        ) as stream:
            response = stream.get_final_response()
    except SDK_ERRORS:
        return []
    finally:
        client.close()
    return [(i.call_id, i.name, _json(i.arguments)) for i in response.output if i.type == "function_call"]


def sdk_chat(url: str, session: str) -> list[Call]:
    client = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    try:
        with client.chat.completions.stream(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            tools=tools,  # type: ignore[arg-type]
            extra_headers={"X-Sidecar-Session": session},
        ) as stream:
            completion = stream.get_final_completion()
    except SDK_ERRORS:
        return []
    finally:
        client.close()
    calls = completion.choices[0].message.tool_calls or [] if completion.choices else []
    return [(c.id, c.function.name, _json(c.function.arguments)) for c in calls]  # type: ignore[union-attr]


def _json(text: str) -> Any:
    """Arguments as an agent reads them: empty means no arguments (as the sidecar reads it)."""
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return text


GRAMMARS: dict[str, tuple[Callable[[list[Any]], list[tuple[str | None, Any]]], Callable[[str, str], list[Call]]]] = {
    "anthropic": (anthropic_events, sdk_anthropic),
    "responses": (responses_events, sdk_responses),
    "chat": (chat_events, sdk_chat),
}


@pytest.mark.parametrize("grammar", list(GRAMMARS))
def test_the_sdk_only_ever_gets_calls_the_sidecar_checked(world: _World, grammar: str) -> None:
    render, read = GRAMMARS[grammar]
    seen: list[int] = []

    @PROPERTY
    @given(data=st.data(), parts=PARTS, content_type=st.sampled_from([SSE, SSE, SSE, "application/json", "text/plain"]))
    def run(data: st.DataObject, parts: list[Any], content_type: str) -> None:
        status = data.draw(st.sampled_from([200, 200, 200, 201]))
        world.reply = (status, content_type, encode(data.draw(broken(render(parts)))))
        world.probe.calls = []
        got = read(world.url, uuid.uuid4().hex)
        delivered = world.probe.calls
        for call in got:
            assert call in delivered, (call, delivered, world.reply)
        seen.append(len(got))

    run()
    assert len(seen) == EXAMPLES
    assert any(seen)  # some examples do deliver calls: the property is not vacuous
