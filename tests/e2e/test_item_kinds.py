"""Every executable item type is checked like a function call (docs/coverage.md, "Item types"),
through the official SDKs, whole and streamed: Responses custom/shell/local_shell/computer/
apply_patch calls, Chat custom tools, Anthropic-defined client tools; server-run calls are
observed and a policy that refuses them withholds them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from sidecar.policy.sources import init_directory
from sidecar.scripted import ToolCallSpec, Turn
from tests.e2e.clients import anthropic_client, openai_client
from tests.helpers.policies import first_decision_branch
from tests.helpers.serve import serve, sse_response

STREAM = pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])


async def _responses(url: str, tools: list[dict[str, Any]], stream: bool) -> list[dict[str, Any]]:
    """The output items the agent's SDK hands it (the final response)."""
    async with openai_client(url) as client:
        if stream:
            async with client.responses.stream(model="gpt-test", input="go", tools=tools) as s:  # type: ignore[arg-type]
                response = await s.get_final_response()
        else:
            response = await client.responses.create(model="gpt-test", input="go", tools=tools)  # type: ignore[arg-type]
    return [item.to_dict() for item in response.output]


_OPEN: list[Any] = []


@pytest.fixture(autouse=True)
async def _close_clients():
    """SDK clients are closed on the test's own loop (not by the garbage collector later)."""
    yield
    while _OPEN:
        await _OPEN.pop().close()


async def _closing(client: Any) -> None:
    _OPEN.append(client)


def _answers(request: Any) -> list[dict[str, Any]]:
    return [i for i in request.json["input"] if isinstance(i, dict) and str(i.get("type")).endswith("_output")]


CASES = [
    # (item, tool name seen by the policy, declaration, arguments / input)
    ("custom_tool_call", "grep", {"type": "custom", "name": "grep", "description": "search"}, None),
    ("shell_call", "shell", {"type": "shell", "environment": {"type": "local"}}, {"commands": ["ls"]}),
    ("local_shell_call", "local_shell", {"type": "local_shell"}, {"type": "exec", "command": ["ls"], "env": {}}),
    ("apply_patch_call", "apply_patch", {"type": "apply_patch"}, {"type": "delete_file", "path": "a.txt"}),
]


def _spec(item: str, name: str, arguments: Any) -> ToolCallSpec:
    if item == "custom_tool_call":
        return ToolCallSpec(name, raw_arguments="needle", item=item)
    return ToolCallSpec(name, arguments, item=item)


@STREAM
@pytest.mark.parametrize(("item", "name", "tool", "arguments"), CASES, ids=[c[0] for c in CASES])
async def test_responses_client_items_are_checked(model, sidecar, stream, item, name, tool, arguments):
    # Undeclared: refused, answered to the model in kind, never handed to the agent.
    model.add_turns(Turn(text="On it.", tool_calls=[_spec(item, name, arguments)]), Turn(text="I cannot."))
    output = await _responses(sidecar.proxy_url, [{"type": "function", "name": "other", "parameters": {}}], stream)
    assert item not in [o["type"] for o in output]
    repair = model.model_requests[1]
    answers = _answers(repair)
    assert [a["type"] for a in answers] == [item.replace("_call", "_call_output")]
    assert "unknown_tool" in json.dumps(answers)
    # Declared: it reaches the agent as the provider wrote it.
    model.add_turns(Turn(text="On it.", tool_calls=[_spec(item, name, arguments)]))
    output = await _responses(sidecar.proxy_url, [tool], stream)
    assert [o["type"] for o in output] == ["message", item]


@STREAM
async def test_a_computer_call_cannot_be_repaired_so_it_is_blocked(model, sidecar, stream):
    """A computer_call is answered with a screenshot only: a refused one is blocked, no round."""
    model.add_turns(
        Turn(text="Clicking.", tool_calls=[ToolCallSpec("computer", {"type": "screenshot"}, item="computer_call")])
    )
    output = await _responses(sidecar.proxy_url, [{"type": "function", "name": "other", "parameters": {}}], stream)
    assert [o["type"] for o in output] == ["message", "message"]
    assert "computer" in output[-1]["content"][0]["text"] and len(model.model_requests) == 1
    model.add_turns(Turn(tool_calls=[ToolCallSpec("computer", {"type": "screenshot"}, item="computer_call")]))
    declared = [{"type": "computer_use_preview", "display_width": 800, "display_height": 600, "environment": "linux"}]
    assert [o["type"] for o in await _responses(sidecar.proxy_url, declared, stream)] == ["computer_call"]


@STREAM
async def test_chat_custom_tool_calls_are_checked(model, sidecar, stream):
    client = openai_client(sidecar.proxy_url)
    await _closing(client)
    call = ToolCallSpec("grep", raw_arguments="needle", item="custom")

    async def ask(tools: list[dict[str, Any]]) -> Any:
        kwargs: dict[str, Any] = {"model": "gpt-test", "messages": [{"role": "user", "content": "go"}], "tools": tools}
        if not stream:
            return (await client.chat.completions.create(**kwargs)).choices[0].message
        text, calls = "", {}
        async for chunk in await client.chat.completions.create(**kwargs, stream=True):
            for choice in chunk.to_dict()["choices"]:
                text += choice["delta"].get("content") or ""
                for fragment in choice["delta"].get("tool_calls") or []:
                    calls.setdefault(fragment["index"], []).append(fragment)
        return text, calls

    model.add_turns(Turn(text="On it.", tool_calls=[call]), Turn(text="I cannot."))
    other = [{"type": "function", "function": {"name": "other", "parameters": {}}}]
    got = await ask(other)
    if stream:
        assert got[1] == {}
    else:
        assert not got.tool_calls
    repair = model.model_requests[1].json["messages"]
    assert repair[-1]["role"] == "tool" and "unknown_tool" in repair[-1]["content"]

    model.add_turns(Turn(tool_calls=[call]))
    got = await ask([{"type": "custom", "custom": {"name": "grep"}}])
    if stream:
        assert got[1][0][0]["custom"]["name"] == "grep"
    else:
        assert got.tool_calls[0].custom.name == "grep" and got.tool_calls[0].custom.input == "needle"


BASH = {"type": "bash_20250124", "name": "bash"}
EDITOR = {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}


@STREAM
async def test_anthropic_defined_client_tools_are_declarations(model, sidecar, stream):
    """bash / text_editor tools are declared by type and name, with no input_schema: their
    calls reach the agent (they were refused as unknown tools before), undeclared ones do not."""
    client = anthropic_client(sidecar.proxy_url)
    await _closing(client)

    async def ask(tools: list[dict[str, Any]]) -> Any:
        kwargs: dict[str, Any] = {
            "model": "claude-test",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "go"}],
            "tools": tools,
        }
        if stream:
            async with client.messages.stream(**kwargs) as s:
                return await s.get_final_message()
        return await client.messages.create(**kwargs)

    model.add_turns(Turn(tool_calls=[ToolCallSpec("bash", {"command": "ls"})]))
    message = await ask([BASH, EDITOR])
    assert [(b.type, b.name, b.input) for b in message.content] == [("tool_use", "bash", {"command": "ls"})]

    model.add_turns(Turn(tool_calls=[ToolCallSpec("bash", {"command": "rm -rf /"})]), Turn(text="ok"))
    message = await ask([EDITOR])
    assert all(b.type != "tool_use" for b in message.content)
    assert "unknown_tool" in json.dumps(model.model_requests[-1].json["messages"][-1]["content"])


def _policy(tmp_path: Path, rego: str) -> str:
    """The packaged library with `rego` as the first branch of its decision chain."""
    directory = tmp_path / "policy"
    init_directory(directory)
    data = json.loads((directory / "data.json").read_text())
    data["sidecar"]["unlisted_tool"]["side_effects"] = False
    (directory / "data.json").write_text(json.dumps(data))
    rules = directory / "sidecar.rego"
    source = rules.read_text()
    rules.write_text(first_decision_branch(source, rego))
    return str(directory)


KIND_RULE = """decision := deny("kind", sprintf("%s is a %s tool", [input.tool.name, input.tool.kind]), true) if {
\tinput.tool.kind in {"provider_defined", "server"}"""


@STREAM
async def test_policy_sees_the_kind_and_withholds_server_calls(model, start_sidecar, tmp_path, stream):
    """input.tool.kind reaches the policy; a refused server call (run already at the provider)
    is withheld with everything the model wrote after it, without a repair round."""
    running = await start_sidecar(policies=_policy(tmp_path, KIND_RULE))
    client = anthropic_client(running.proxy_url)
    await _closing(client)
    search = ToolCallSpec("web_search", {"query": "secrets"}, item="server_tool_use")
    model.add_turns(Turn(text="Searching.", tool_calls=[search]))
    kwargs: dict[str, Any] = {
        "model": "claude-test",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "go"}],
        "tools": [{"type": "web_search_20250305", "name": "web_search"}],
    }
    if stream:
        async with client.messages.stream(**kwargs) as s:
            message = await s.get_final_message()
    else:
        message = await client.messages.create(**kwargs)
    assert [b.type for b in message.content] == ["text", "text"]
    assert "web_search is a server tool" in message.content[-1].text
    assert message.stop_reason == "end_turn" and len(model.model_requests) == 1

    model.add_turns(Turn(tool_calls=[ToolCallSpec("bash", {"command": "ls"})]), Turn(text="fine"))
    kwargs["tools"] = [BASH]
    message = await client.messages.create(**{**kwargs, "stream": False})
    refused = model.model_requests[-1].json["messages"][-1]["content"][0]
    assert "bash is a provider_defined tool" in refused["content"]


async def test_function_call_item_of_a_custom_tool_is_refused(model, sidecar):
    """A call must be of the kind its tool was declared: a function_call to a custom tool is not."""
    model.add_turns(Turn(tool_calls=[ToolCallSpec("grep", {"pattern": "x"})]), Turn(text="ok"))
    await _responses(sidecar.proxy_url, [{"type": "custom", "name": "grep"}], False)
    answer = _answers(model.model_requests[1])[0]
    assert "declared as a custom tool" in orjson.loads(answer["output"])["errors"][0]["problem"]


RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "wire"


@pytest.mark.parametrize(
    ("request_file", "reply_file"),
    [
        ("anthropic-request-text-editor-tool.json", "anthropic-message-text-editor-tool-use.json"),
        ("openai-responses-request-custom-tool.json", "openai-responses-response-custom-tool-call.json"),
    ],
)
async def test_recorded_calls_of_new_kinds_pass_declared_and_are_blocked_undeclared(
    start_sidecar, request_file, reply_file
):
    """The recorded replies (tests/fixtures/wire/SOURCES.md): a text editor tool_use and a
    custom_tool_call reach the agent when the recorded request declares the tool, and are
    blocked when it does not (no repair round: max_repair_rounds 0)."""
    reply = (RECORDED / reply_file).read_bytes()
    body = json.loads((RECORDED / request_file).read_text())

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=reply, content_type="application/json")

    async with serve(answer) as url:
        running = await start_sidecar(anthropic_upstream=url, openai_upstream=url, enforcement={"max_repair_rounds": 0})
        for tools, delivered in ((body["tools"], True), ([], False)):
            sent = {**body, "tools": tools} if tools else {k: v for k, v in body.items() if k != "tools"}
            anthropic_path = request_file.startswith("anthropic")
            path = "/v1/messages" if anthropic_path else "/v1/responses"
            headers = {"anthropic-version": "2023-06-01"} if anthropic_path else {}
            async with (
                aiohttp.ClientSession() as session,
                session.post(running.proxy_url + path, json=sent, headers=headers) as response,
            ):
                got = orjson.loads(await response.read())
            items = got["content"] if anthropic_path else got["output"]
            calls = [i for i in items if i["type"] in ("tool_use", "custom_tool_call")]
            assert bool(calls) is delivered, got


async def test_a_refused_server_call_withholds_its_result_and_what_followed(start_sidecar, tmp_path):
    """The recorded stream: text, a server tool_search call, its result, text written from it, a
    client call. The policy refuses the server call: the agent gets the first text and the
    explanation only (the result, the text after it and the client call are withheld)."""
    stream = (RECORDED / "anthropic-stream-server-tool-and-client-tool.sse").read_bytes()

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        return await sse_response(request, stream)

    async with serve(answer) as url:
        running = await start_sidecar(anthropic_upstream=url, policies=_policy(tmp_path, KIND_RULE))
        async with (
            anthropic_client(running.proxy_url) as client,
            client.messages.stream(
                model="m",
                max_tokens=64,
                messages=[{"role": "user", "content": "USD to EUR?"}],
                tools=[
                    {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"},
                    {"name": "get_exchange_rate", "input_schema": {"type": "object"}},
                ],  # type: ignore[list-item]
            ) as s,
        ):
            message = await s.get_final_message()
    assert [b.type for b in message.content] == ["text", "text"]
    assert message.content[0].text.startswith("Let me search for a tool")
    assert "tool_search_tool_bm25 is a server tool" in message.content[1].text
    assert "I found the right tool" not in message.content[1].text
    assert message.stop_reason == "end_turn"
