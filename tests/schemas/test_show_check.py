"""`sidecar schemas show` and `check`: the enforced schema, and verdicts equal to the proxy's."""

from __future__ import annotations

import orjson
import pytest

from sidecar.config import LockdownSettings, Settings
from sidecar.lockdown.validator import Lockdown
from sidecar.model import ToolCall, ToolDeclaration
from sidecar.schemas import load_file
from sidecar.scripted import ToolCallSpec, Turn
from tests.e2e.agents import AGENTS
from tests.schemas.conftest import as_json, fixture

BAD_ORDERS = {
    "query": "x",
    "status": "open",
    "since": "next week",
    "filters": {},
    "phone": "1",
    "limit": "10",
    "colour": "red",
}
GOOD_ORDERS = {"query": "x", "status": "OPEN", "since": "2024-05-17", "filters": {}, "phone": "1"}


def test_show_prints_the_rewritten_schema_and_its_hash(run):
    code, out, _ = run("show", fixture("anthropic_request.json"), "--json")
    assert code == 0
    [shown] = as_json(out)["tools"]
    tool = load_file(fixture("anthropic_request.json")).tools[0]
    schema = tool.declaration.schema
    assert shown["schema_hash"] == ToolDeclaration.create("orders_search", schema).schema_hash
    assert shown["effective_schema"] == Lockdown().compiled(tool.declaration, LockdownSettings()).root
    assert shown["effective_schema"]["additionalProperties"] is False
    assert "additionalProperties" not in schema  # the declaration itself is untouched
    assert shown["injected"] == [{"pointer": "/additionalProperties", "value": False}]


def test_show_keeps_explicit_additional_properties_and_locks_refs(run):
    code, out, _ = run("show", fixture("openai_chat_request.json"))
    assert code == 0
    assert "# added by the lockdown:\n#   /$defs/Customer/additionalProperties: false\n" in out
    assert "# schema_hash e45a4a72304905ce9c7c24da42037f8f4a6b22fe5160f315fc170e824745305e" in out
    body = out.split("\n{", 1)[1]
    effective = orjson.loads("{" + body)
    assert effective["additionalProperties"] is True


def test_show_compositions_get_unevaluated_properties(run, tmp_path):
    schema = {
        "type": "object",
        "allOf": [{"properties": {"a": {"type": "string"}}}, {"properties": {"b": {"type": "integer"}}}],
    }
    path = tmp_path / "tool.json"
    path.write_bytes(orjson.dumps({"type": "function", "name": "t", "parameters": schema}))
    [shown] = as_json(run("show", str(path), "--json")[1])["tools"]
    assert shown["injected"] == [{"pointer": "/unevaluatedProperties", "value": False}]
    assert shown["effective_schema"]["allOf"] == schema["allOf"]  # branches are never locked


def test_show_selects_a_tool(run):
    code, out, _ = run("show", fixture("tools_array.json"), "--tool", "ping", "--json")
    assert [t["tool"] for t in as_json(out)["tools"]] == ["ping"]
    code, _, err = run("show", fixture("tools_array.json"), "--tool", "nope")
    assert code == 2 and "declared: list_tickets, ping" in err


def test_show_reports_compile_errors(run):
    code, out, _ = run("show", fixture("bad_schemas.json"), "--tool", "dangling_ref")
    assert code == 0
    assert "# does not compile: Pointer '/$defs/Missing' does not exist (every call is refused)" in out


def test_check_valid_and_refused(run):
    orders = fixture("anthropic_request.json")
    code, out, _ = run("check", orders, "--tool", "orders_search", "--args", orjson.dumps(GOOD_ORDERS).decode())
    assert code == 0 and out.startswith("valid:")
    code, out, _ = run("check", orders, "--tool", "orders_search", "--args", orjson.dumps(BAD_ORDERS).decode())
    assert code == 1
    assert '  limit: expected integer, got string "10"\n    expected: integer between 1 and 100' in out
    call = ToolCall("c", "orders_search", BAD_ORDERS, "")
    verdict = Lockdown().check(call, load_file(orders).tools[0].declaration, LockdownSettings())
    assert out.splitlines()[-1] == orjson.dumps(verdict.model_payload()).decode()


def test_check_unknown_tool_and_unreadable_arguments(run, tmp_path):
    orders = fixture("anthropic_request.json")
    code, out, _ = run("check", orders, "--tool", "nope", "--args", "{}", "--json")
    assert code == 1
    assert as_json(out)["payload"]["status"] == "unknown_tool"
    code, out, _ = run("check", orders, "--tool", "orders_search", "--args", '["a"]', "--json")
    assert code == 1
    [error] = as_json(out)["payload"]["errors"]
    assert error["problem"] == "the arguments could not be read: arguments must be a JSON object, got an array"
    args_file = tmp_path / "args.json"
    args_file.write_bytes(orjson.dumps(GOOD_ORDERS))
    assert run("check", orders, "--tool", "orders_search", "--args", f"@{args_file}")[0] == 0


def test_check_follows_per_tool_settings(run, tmp_path):
    config = tmp_path / "sidecar.yaml"
    config.write_text(
        "tools:\n  orders_search:\n    mode: observe\n    lockdown:\n      reject_unknown_properties: false\n"
    )
    args = orjson.dumps({**GOOD_ORDERS, "colour": "red"}).decode()
    orders = fixture("anthropic_request.json")
    assert run("check", orders, "--tool", "orders_search", "--args", args)[0] == 1
    assert run("check", orders, "--tool", "orders_search", "--args", args, "--config", str(config))[0] == 0
    bad = orjson.dumps({**GOOD_ORDERS, "limit": 0}).decode()
    code, out, _ = run("check", orders, "--tool", "orders_search", "--args", bad, "--config", str(config))
    assert code == 1 and "mode observe: the call would still reach the agent" in out


# (fixture, tool, bad arguments, good arguments), one per protocol
THROUGH_PROXY = {
    "anthropic": ("anthropic_request.json", "orders_search", BAD_ORDERS, GOOD_ORDERS),
    "chat": (
        "openai_chat_request.json",
        "refund",
        {"order_id": "nope", "amount": 0, "customer": {"email": "x", "vip": True}},
        {"order_id": "123e4567-e89b-12d3-a456-426614174000", "amount": 5, "customer": {"email": "a@b.co"}},
    ),
    "responses": (
        "openai_responses_request.json",
        "get_weather",
        {"city": 5, "unit": "Celsius"},
        {"city": "Paris", "unit": None},
    ),
}


@pytest.mark.parametrize("kind", THROUGH_PROXY)
async def test_check_output_is_what_the_model_receives_through_the_proxy(run, model, sidecar, kind):
    name, tool, bad, good = THROUGH_PROXY[kind]
    declaration = next(t.declaration for t in load_file(fixture(name)).tools if t.declaration.name == tool)
    model.add_turns([Turn(tool_calls=[ToolCallSpec(tool, bad)]), Turn(tool_calls=[ToolCallSpec(tool, good)])])
    received = await AGENTS[kind](sidecar.proxy_url, {tool: declaration.schema}).ask(False)
    assert received.calls == [(tool, good)]
    [told] = AGENTS[kind].tool_outputs(model.model_requests[1])

    code, out, _ = run("check", fixture(name), "--tool", tool, "--args", orjson.dumps(bad).decode(), "--json")
    assert code == 1
    assert as_json(out)["payload"] == told
    call = ToolCall("c", tool, bad, "")
    assert told == Lockdown().check(call, declaration, Settings().lockdown_for(tool)).model_payload()
