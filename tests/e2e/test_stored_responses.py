"""Responses the provider keeps, read back (docs/coverage.md, RETRIEVE and HISTORY rows):
background creates, `GET /v1/responses/{id}`, the stream resume, listings. A retrieved response
is checked like a created one; a call refused for it is never handed out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from aiohttp import web

from sidecar.policy.sources import init_directory
from sidecar.scripted import ToolCallSpec, Turn
from tests.e2e.clients import openai_client
from tests.helpers.policies import first_decision_branch
from tests.helpers.serve import serve

DECLARED = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
UNDECLARED = ToolCallSpec("wire_money", {"to": "x"})
LOOKUP = ToolCallSpec("lookup", {"key": "a"})


@pytest.fixture
async def client(sidecar):
    async with openai_client(sidecar.proxy_url) as c:
        yield c


def _types(response: Any) -> list[str]:
    return [item.type for item in response.output]


async def test_background_response_is_checked_when_retrieved(model, client):
    model.add_turns(Turn(text="Paying.", tool_calls=[UNDECLARED]))
    queued = await client.responses.create(model="gpt-test", input="go", tools=DECLARED, background=True)
    assert queued.status == "queued" and queued.output == []
    stored = await client.responses.retrieve(queued.id)
    assert _types(stored) == ["message", "message"]  # the call removed, explained; no repair round
    assert "wire_money" in stored.output[-1].content[0].text and len(model.model_requests) == 1
    model.add_turns(Turn(text="Looking.", tool_calls=[LOOKUP]))
    queued = await client.responses.create(model="gpt-test", input="go", tools=DECLARED, background=True)
    stored = await client.responses.retrieve(queued.id)
    assert _types(stored) == ["message", "function_call"] and stored.output[1].name == "lookup"
    assert (await client.responses.retrieve(queued.id)).output[1].call_id == stored.output[1].call_id


def _denying(tmp_path: Path) -> str:
    """The packaged library with one more rule: wire_money is denied."""
    directory = tmp_path / "deny-wire"
    init_directory(directory)
    rules = directory / "sidecar.rego"
    rule = 'decision := deny("no_wire", "wire_money is off", true) if {\n\tinput.tool.name == "wire_money"'
    rules.write_text(first_decision_branch(rules.read_text(), rule))
    return str(directory)


async def test_a_call_refused_at_creation_is_never_handed_out_by_a_retrieve(model, start_sidecar, tmp_path):
    """Two replicas share their state: one refused the call (its policy denies it), the other
    (whose policy would allow it) reads the stored response back and still withholds it."""
    state = {"backend": "sqlite", "sqlite_path": str(tmp_path / "state.db")}
    strict = await start_sidecar(policies=_denying(tmp_path), state=state)
    lenient = await start_sidecar(state=state)
    tools = [*DECLARED, {"type": "function", "name": "wire_money", "parameters": {"type": "object"}}]
    model.add_turns(Turn(text="Paying.", tool_calls=[UNDECLARED]), Turn(text="I will not pay."))
    async with (
        openai_client(strict.proxy_url) as c,
        c.responses.stream(model="gpt-test", input="pay", tools=tools) as s,  # type: ignore[arg-type]
    ):
        shown = await s.get_final_response()
    assert "function_call" not in _types(shown) and len(model.model_requests) == 2
    async with openai_client(lenient.proxy_url) as c:
        stored = await c.responses.retrieve(shown.id)  # the stream's id: the provider's first response
    assert "function_call" not in _types(stored)
    assert "refused wire_money" in stored.output[-1].content[0].text


async def test_a_resumed_stream_is_checked_and_resends_nothing_the_agent_has(model, client):
    model.add_turns(Turn(text="Paying now.", tool_calls=[UNDECLARED]))
    async with client.responses.stream(model="gpt-test", input="go", tools=DECLARED, background=True) as s:
        first = await s.get_final_response()
    assert "function_call" not in _types(first)  # background: blocked, never repaired
    events = [e.to_dict() async for e in await client.responses.retrieve(first.id, stream=True, starting_after=2)]
    assert events and all(e["sequence_number"] > 2 for e in events)
    assert "wire_money" not in json.dumps([e for e in events if e.get("item", {}).get("type") == "function_call"])
    assert events[-1]["type"] == "response.completed"
    assert "function_call" not in [i["type"] for i in events[-1]["response"]["output"]]


async def test_coverage_settings_refuse_read_backs_and_background(model, start_sidecar):
    running = await start_sidecar(coverage={"retrieve": "refuse", "background": "refuse"})
    async with openai_client(running.proxy_url) as c:
        with pytest.raises(openai.PermissionDeniedError, match=r"coverage\.retrieve: refuse"):
            await c.responses.retrieve("resp_1")
        with pytest.raises(openai.PermissionDeniedError, match="without background: true"):
            await c.responses.create(model="gpt-test", input="go", background=True)
    assert model.requests == []


class _Stored:
    """A provider stand-in: a create whose call the sidecar refuses, then a listing holding it."""

    def __init__(self) -> None:
        self.creates = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        call = {"type": "function_call", "id": "fc_1", "call_id": "call_wire", "name": "wire_money", "arguments": "{}"}
        if request.method == "POST":
            self.creates += 1
            output = [call] if self.creates == 1 else [_message("ok")]
            body = {"id": f"resp_{self.creates}", "object": "response", "status": "completed", "output": output}
            return web.json_response(body)
        listing = {"object": "list", "data": [_message("pay"), call], "has_more": False}
        return web.json_response(listing)


def _message(text: str) -> dict[str, Any]:
    return {"type": "message", "id": "msg_1", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


async def test_listings_drop_the_calls_the_sidecar_refused(start_sidecar):
    stub = _Stored()
    async with serve(stub.handle) as url:
        running = await start_sidecar(openai_upstream=url)
        async with openai_client(running.proxy_url) as c:
            created = await c.responses.create(model="gpt-test", input="pay", tools=DECLARED)
            assert "function_call" not in _types(created)
            items = await c.responses.input_items.list("resp_2")
            assert [i.type for i in items.data] == ["message"]
        async with (
            aiohttp.ClientSession() as session,
            session.get(running.proxy_url + "/v1/conversations/conv_1/items") as response,
        ):
            listed = orjson.loads(await response.read())
    assert [i["type"] for i in listed["data"]] == ["message"]
