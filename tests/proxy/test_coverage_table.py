"""docs/coverage.md's table, walked row by row through a real sidecar: every row does what the
table says. Model rows go through the official SDKs, whole and streamed, where the SDK has the
path; the rest through raw HTTP. A row added to the table without a way to check it fails."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest

from sidecar.proxy.coverage import Handling, rule_for
from sidecar.proxy.mcp import PREFIX as MCP_PREFIX
from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn
from tests.e2e.clients import anthropic_client, openai_client

DOC = Path(__file__).resolve().parents[2] / "docs" / "coverage.md"
CELL = re.compile(r"^\| (GET|POST|DELETE|GET \(Upgrade: websocket\)) \| (\S+) \| (\w+) \| ([a-z ]+) \|")


@dataclass(frozen=True)
class Row:
    method: str
    path: str
    path_class: str
    sidecar: str

    @property
    def id(self) -> str:
        return f"{self.method} {self.path}"


def rows() -> list[Row]:
    found = [Row(*m.groups()) for line in DOC.read_text().splitlines() if (m := CELL.match(line))]
    assert len(found) >= 40, "the coverage table was not found in docs/coverage.md"
    return found


ROWS = rows()
HANDLING = {
    "enforce": Handling.ENFORCE,
    "read back": Handling.RETRIEVE,
    "listing": Handling.HISTORY,
    "refuse": Handling.UNPARSED,
    "forward": Handling.FORWARD,
}
UNDECLARED = ToolCallSpec("delete_everything", {"path": "/"})
SAFE = [{"name": "lookup", "input_schema": {"type": "object"}}]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_the_code_has_the_row_the_doc_has(row: Row) -> None:
    """sidecar/proxy/coverage.py and the table agree on class and handling."""
    if row.path_class == "websocket":
        return  # any path: the upgrade header decides (see test_websocket.py)
    if row.path_class == "mcp":
        assert _concrete(row.path).startswith(MCP_PREFIX + "/")  # the MCP handler claims it, ahead of the table
        return
    rule = rule_for(row.method, _concrete(row.path).removeprefix("/anthropic").removeprefix("/openai"))
    assert (rule.path_class.value, rule.handling) == (row.path_class, HANDLING[row.sidecar])


def _concrete(path: str) -> str:
    return path.replace("{id}", "resp_abc123")


# -- checks, by what the row says ----------------------------------------------------------------

Check = Callable[[str, ScriptedModel, bool], Awaitable[None]]


async def _anthropic(url: str, model: ScriptedModel, stream: bool, base: str = "") -> None:
    model.add_turns(Turn(text="Sure.", tool_calls=[UNDECLARED]), Turn(text="I will not."))
    async with anthropic_client(url + base) as client:
        kwargs: dict[str, Any] = {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "go"}]}
        if stream:
            async with client.messages.stream(**kwargs, tools=SAFE) as s:  # type: ignore[arg-type]
                message = await s.get_final_message()
        else:
            message = await client.messages.create(**kwargs, tools=SAFE)  # type: ignore[arg-type]
    assert all(b.type != "tool_use" for b in message.content)
    _repaired(model)


def _repaired(model: ScriptedModel) -> None:
    """The undeclared call was answered to the model (a repair round), never delivered."""
    assert len(model.model_requests) == 2
    assert "unknown_tool" in model.model_requests[1].body.decode()


async def _chat(url: str, model: ScriptedModel, stream: bool, base: str = "/v1") -> None:
    model.add_turns(Turn(text="Sure.", tool_calls=[UNDECLARED]), Turn(text="I will not."))
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    client = openai.AsyncOpenAI(base_url=url + base, api_key="sk-test", max_retries=0)
    async with client:
        kwargs: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": tools}
        if stream:
            async with client.chat.completions.stream(**kwargs) as s:
                message = (await s.get_final_completion()).choices[0].message
        else:
            message = (await client.chat.completions.create(**kwargs)).choices[0].message
    assert not message.tool_calls
    _repaired(model)


async def _responses(url: str, model: ScriptedModel, stream: bool) -> None:
    model.add_turns(Turn(text="Sure.", tool_calls=[UNDECLARED]), Turn(text="I will not."))
    tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
    async with openai_client(url) as client:
        if stream:
            async with client.responses.stream(model="m", input="go", tools=tools) as s:  # type: ignore[arg-type]
                response = await s.get_final_response()
        else:
            response = await client.responses.create(model="m", input="go", tools=tools)  # type: ignore[arg-type]
    assert "function_call" not in [i.type for i in response.output]
    _repaired(model)


async def _raw_messages(url: str, model: ScriptedModel, stream: bool) -> None:
    """POST /messages: what the Vercel AI SDK sends when ANTHROPIC_BASE_URL has no /v1."""
    model.add_turns(Turn(text="Sure.", tool_calls=[UNDECLARED]), Turn(text="I will not."))
    body = {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "go"}], "tools": SAFE}
    status, raw = await _raw(url, "POST", "/messages", {**body, "stream": stream}, {"anthropic-version": "2023-06-01"})
    assert status == 200 and b"delete_everything" not in raw.split(b"unknown_tool")[0].replace(b"[sidecar]", b"")
    _repaired(model)


async def _background_then(
    url: str, model: ScriptedModel, read: Callable[[openai.AsyncOpenAI, str], Awaitable[Any]]
) -> Any:
    model.add_turns(Turn(text="Sure.", tool_calls=[UNDECLARED]))
    tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
    async with openai_client(url) as client:
        queued = await client.responses.create(model="m", input="go", tools=tools, background=True)  # type: ignore[arg-type]
        return await read(client, queued.id)


async def _retrieve(url: str, model: ScriptedModel, stream: bool) -> None:
    async def read(client: openai.AsyncOpenAI, response_id: str) -> Any:
        if stream:
            return [e.to_dict() async for e in await client.responses.retrieve(response_id, stream=True)]
        return (await client.responses.retrieve(response_id)).to_dict()

    got = await _background_then(url, model, read)
    assert "delete_everything" not in orjson.dumps(_without_explanations(got)).decode()


async def _cancel(url: str, model: ScriptedModel, stream: bool) -> None:
    got = await _background_then(url, model, lambda client, rid: client.responses.cancel(rid))
    assert got.status == "cancelled" and "function_call" not in [i.type for i in got.output]


def _without_explanations(value: Any) -> Any:
    """Drop the sidecar's own text (which names the refused call) before looking for the call."""
    text = orjson.dumps(value).decode()
    return re.sub(r"\[sidecar\][^\"]*", "", text)


async def _input_items(url: str, model: ScriptedModel, stream: bool) -> None:
    model.add_turns(Turn(text="hello"))
    async with openai_client(url) as client:
        created = await client.responses.create(model="m", input="go")
        items = await client.responses.input_items.list(created.id)
    assert [i.type for i in items.data] == ["message"] or items.data == []


async def _raw(
    url: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url + path, json=body, headers=headers or {}) as response,
    ):
        return response.status, await response.read()


def _forwarded(row: Row) -> Check:
    async def check(url: str, model: ScriptedModel, stream: bool) -> None:
        path = _concrete(row.path)
        status, _ = await _raw(url, row.method, path, {} if row.method == "POST" else None)
        assert status != 403
        assert [r.path for r in model.requests] == [path.removeprefix("/anthropic").removeprefix("/openai")]

    return check


def _listing(row: Row) -> Check:
    async def check(url: str, model: ScriptedModel, stream: bool) -> None:
        path = _concrete(row.path)
        status, _ = await _raw(url, row.method, path, {} if row.method == "POST" else None)
        assert status != 403 and [r.path for r in model.requests] == [path]

    return check


SDK_REFUSALS: dict[str, Callable[[str], Awaitable[Any]]] = {
    "POST /v1/messages/batches": lambda url: _anth(url, lambda c: c.messages.batches.create(requests=[])),
    "GET /v1/messages/batches/{id}/results": lambda url: _anth(url, lambda c: c.messages.batches.results("msgbatch_1")),
    "POST /v1/batches": lambda url: _oai(
        url, lambda c: c.batches.create(input_file_id="f", endpoint="/v1/responses", completion_window="24h")
    ),
    "POST /v1/assistants": lambda url: _oai(url, lambda c: c.beta.assistants.create(model="m")),
    "POST /v1/threads/{id}/runs": lambda url: _oai(
        url, lambda c: c.beta.threads.runs.create("thread_1", assistant_id="a")
    ),
    "POST /v1/threads/{id}/messages": lambda url: _oai(
        url, lambda c: c.beta.threads.messages.create("thread_1", role="user", content="hi")
    ),
    "POST /v1/realtime/client_secrets": lambda url: _oai(url, lambda c: c.realtime.client_secrets.create()),
    "GET /v1/chat/completions/{id}": lambda url: _oai(url, lambda c: c.chat.completions.retrieve("chatcmpl_1")),
    "GET /v1/chat/completions": lambda url: _oai(url, lambda c: c.chat.completions.list()),
}


async def _anth(url: str, call: Callable[[anthropic.AsyncAnthropic], Awaitable[Any]]) -> str:
    async with anthropic_client(url) as client:
        with pytest.raises(anthropic.PermissionDeniedError) as raised:
            await call(client)
    return str(raised.value)


async def _oai(url: str, call: Callable[[openai.AsyncOpenAI], Awaitable[Any]]) -> str:
    async with openai_client(url) as client:
        with pytest.raises(openai.PermissionDeniedError) as raised:
            await call(client)
    return str(raised.value)


def _refused(row: Row) -> Check:
    async def check(url: str, model: ScriptedModel, stream: bool) -> None:
        if row.path_class == "websocket":
            async with aiohttp.ClientSession() as session:
                with pytest.raises(aiohttp.WSServerHandshakeError) as raised:
                    await session.ws_connect(url + row.path)
            assert raised.value.status == 400
        else:
            if row.id in SDK_REFUSALS:
                message = await SDK_REFUSALS[row.id](url)
            else:
                status, raw = await _raw(url, row.method, _concrete(row.path), {} if row.method == "POST" else None)
                assert status == 403
                message = orjson.loads(raw)["error"]["message"]
            assert f"coverage.unparsed.{row.path_class}: forward" in message
        assert model.requests == []

    return check


async def _mcp(url: str, model: ScriptedModel, stream: bool) -> None:
    """The MCP path answers it (docs/mcp.md): here no server is configured, so a JSON-RPC 404."""
    status, raw = await _raw(url, "POST", "/mcp/resp_abc123", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert status == 404 and b"no MCP server is configured" in raw
    assert model.requests == []


ENFORCED: dict[str, Check] = {
    "POST /v1/messages": _anthropic,
    "POST /messages": _raw_messages,
    "POST /anthropic/v1/messages": lambda url, model, stream: _anthropic(url, model, stream, "/anthropic"),
    "POST /v1/chat/completions": _chat,
    "POST /anthropic/v1/chat/completions": lambda url, model, stream: _chat(url, model, stream, "/anthropic/v1"),
    "POST /openai/deployments/gpt/chat/completions": lambda url, model, stream: _chat(
        url, model, stream, "/openai/deployments/gpt"
    ),
    "POST /v1/responses": _responses,
    "GET /v1/responses/{id}": _retrieve,
    "POST /v1/responses/{id}/cancel": _cancel,
    "GET /v1/responses/{id}/input_items": _input_items,
}


def check_for(row: Row) -> Check:
    if row.path_class == "mcp":
        return _mcp
    if row.id in ENFORCED:
        return ENFORCED[row.id]
    if row.sidecar == "forward":
        return _forwarded(row)
    if row.sidecar == "listing":
        return _listing(row)
    if row.sidecar == "refuse":
        return _refused(row)
    raise AssertionError(f"no check for the row {row.id} ({row.sidecar}): add one")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the SDK marks the Assistants API deprecated
@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
async def test_every_row_does_what_the_table_says(row: Row, model: ScriptedModel, sidecar) -> None:
    await check_for(row)(sidecar.proxy_url, model, False)


STREAMED = [r for r in ROWS if r.id in ENFORCED]


@pytest.mark.parametrize("row", STREAMED, ids=[r.id for r in STREAMED])
async def test_every_model_row_streamed(row: Row, model: ScriptedModel, sidecar) -> None:
    await check_for(row)(sidecar.proxy_url, model, True)


async def test_refused_classes_forward_when_the_operator_says_so(model: ScriptedModel, start_sidecar) -> None:
    classes = {"assistants", "batches", "realtime", "hosted_agents", "stored_completions", "unknown"}
    running = await start_sidecar(coverage={"unparsed": dict.fromkeys(classes, "forward")})
    for row in ROWS:
        if row.sidecar == "refuse" and row.path_class != "websocket":
            model.requests.clear()
            await _forwarded(row)(running.proxy_url, model, False)
