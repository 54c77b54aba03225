"""`sidecar schemas lint`: shapes read, findings with severities and pointers, exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from sidecar.config import LockdownSettings
from sidecar.dialects import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES
from sidecar.lockdown.validator import Lockdown
from sidecar.model import ToolCall
from sidecar.schemas import load_file
from tests.schemas.conftest import FIXTURES, Run, as_json, fixture


def findings(run: Run, name: str, *flags: str) -> tuple[int, dict[str, list[dict[str, str]]]]:
    code, out, _ = run("lint", fixture(name), "--json", *flags)
    data = as_json(out)
    return code, {tool["tool"]: tool["findings"] for tool in data["tools"]}


def keyed(items: list[dict[str, str]]) -> set[tuple[str, str, str]]:
    return {(f["severity"], f["code"], f["pointer"]) for f in items}


@pytest.mark.parametrize(
    ("name", "shape", "tools", "locations"),
    [
        ("anthropic_request.json", "anthropic request", ["orders_search"], ["/tools/0/input_schema"]),
        ("openai_chat_request.json", "openai_chat request", ["refund"], ["/tools/0/function/parameters"]),
        ("openai_responses_request.json", "openai_responses request", ["get_weather"], ["/tools/0/parameters"]),
        (
            "tools_array.json",
            "tools array (openai_chat)",
            ["list_tickets", "ping"],
            ["/0/function/parameters", "/1/function/parameters"],
        ),
        ("single_tool.json", "single tool (anthropic)", ["send_email"], ["/input_schema"]),
    ],
)
def test_every_shape_is_read_like_the_proxy_reads_it(name, shape, tools, locations):
    loaded = load_file(fixture(name))
    assert loaded.shape == shape
    assert [t.declaration.name for t in loaded.tools] == tools
    assert [t.location for t in loaded.tools] == locations
    body = orjson.loads((FIXTURES / name).read_bytes())
    if isinstance(body, dict) and ("messages" in body or "input" in body):
        dialect = {"anthropic": ANTHROPIC, "openai_chat": OPENAI_CHAT, "openai_responses": OPENAI_RESPONSES}[
            loaded.tools[0].dialect
        ]
        assert {t.declaration.name: t.declaration for t in loaded.tools} == dialect.declarations(body)


def test_server_tools_are_listed_as_skipped(run):
    loaded = load_file(fixture("anthropic_request.json"))
    assert [w for w, _ in loaded.skipped] == ["/tools/1"]
    _, out, _ = run("lint", fixture("openai_responses_request.json"))
    assert "skipped /tools/1: not a client tool" in out


def test_lenient_schema_warnings_with_pointers(run):
    code, found = findings(run, "anthropic_request.json")
    assert code == 0  # warnings only
    got = keyed(found["orders_search"])
    assert {
        ("warning", "optional-not-nullable", "/properties/limit"),
        ("warning", "optional-not-nullable", "/properties/page_size"),
        ("warning", "no-description", "/properties/status"),
        ("warning", "enum-case-variants", "/properties/status/enum"),
        ("warning", "free-form-object", "/properties/filters"),
        ("warning", "format-not-asserted", "/properties/phone/format"),
        ("warning", "type-missing", "/properties/payload"),
        ("warning", "openapi-nullable", "/properties/note/nullable"),
        ("info", "unbounded-count", "/properties/page_size"),
    } <= got
    # Not flagged: bounded limit, asserted date format, required or untyped (null passes) properties.
    assert ("info", "unbounded-count", "/properties/limit") not in got
    assert not any(p == "/properties/since/format" for _, _, p in got)
    assert ("warning", "optional-not-nullable", "/properties/payload") not in got
    assert [f["severity"] for f in found["orders_search"]] == sorted(
        (f["severity"] for f in found["orders_search"]), key=["error", "warning", "info"].index
    )


def test_no_description_names_the_bare_hint(run):
    _, found = findings(run, "anthropic_request.json")
    [item] = [f for f in found["orders_search"] if f["code"] == "no-description"]
    assert '"one of "OPEN", "CLOSED", "open""' in item["message"]


def test_additional_properties_true_says_what_the_lockdown_does(run):
    _, found = findings(run, "openai_chat_request.json")
    [item] = [f for f in found["refund"] if f["code"] == "additional-properties-true"]
    assert item["pointer"] == "/additionalProperties"
    assert "undeclared" in item["message"] and "pass" in item["message"]
    # …and it is true: an invented property is accepted at the root, refused in the $ref'd object.
    tool = load_file(fixture("openai_chat_request.json")).tools[0]
    args = {"order_id": "123e4567-e89b-12d3-a456-426614174000", "amount": 1, "customer": {"email": "a@b.co"}}
    lockdown = Lockdown()
    assert lockdown.check(ToolCall("1", "refund", {**args, "x": 1}, ""), tool.declaration, LockdownSettings()).allowed
    nested = {**args, "customer": {"email": "a@b.co", "x": 1}}
    assert not lockdown.check(ToolCall("2", "refund", nested, ""), tool.declaration, LockdownSettings()).allowed


def test_info_is_the_lockdowns_own_expected_text(run):
    _, found = findings(run, "anthropic_request.json")
    info = {f["field"]: f for f in found["orders_search"] if f["code"] == "expected"}
    assert info["limit"]["message"] == "optional; expected: integer between 1 and 100 — Max results per page"
    tool = load_file(fixture("anthropic_request.json")).tools[0]
    bad = {"query": "q", "status": "OPEN", "since": "2024-01-01", "filters": {}, "phone": "1", "limit": "10"}
    verdict = Lockdown().check(ToolCall("1", tool.declaration.name, bad, ""), tool.declaration, LockdownSettings())
    [error] = verdict.errors
    assert info["limit"]["message"].endswith("expected: " + error.expected)


def test_info_follows_refs_and_array_items(run):
    _, chat = findings(run, "openai_chat_request.json")
    email = next(f for f in chat["refund"] if f.get("field") == "customer.email")
    assert email["pointer"] == "/$defs/Customer/properties/email"
    assert email["message"] == "required; expected: an email address, e.g. name@example.com — Contact address"
    _, array = findings(run, "tools_array.json")
    item_id = next(f for f in array["list_tickets"] if f.get("field") == "items[*].id")
    assert item_id["pointer"] == "/properties/items/items/properties/id"
    assert array["ping"] == []


def test_clean_schemas_have_no_warnings(run):
    for name in ("openai_responses_request.json", "single_tool.json", "tools_array.json"):
        code, found = findings(run, name, "--strict")
        assert code == 0, name
        assert all(f["severity"] == "info" for items in found.values() for f in items), name


def test_bad_schemas_are_errors(run):
    code, found = findings(run, "bad_schemas.json")
    assert code == 1
    assert ("error", "root-not-object", "/type") in keyed(found["not_an_object"])
    assert {("error", "does-not-compile", ""), ("error", "unresolved-ref", "/properties/x/$ref")} <= keyed(
        found["dangling_ref"]
    )
    remote = {f["code"]: f["message"] for f in found["remote_ref"]}
    assert "never fetches it" in remote["unresolved-ref"]
    assert "retryable: false" in remote["does-not-compile"]
    assert ("error", "does-not-compile", "") in keyed(found["broken"])
    assert ("warning", "free-form-object", "") in keyed(found["free_form"])
    assert {("warning", "no-schema", ""), ("warning", "free-form-object", "")} <= keyed(found["no_schema"])


def test_exit_codes(run, tmp_path):
    assert run("lint", fixture("anthropic_request.json"))[0] == 0
    assert run("lint", fixture("anthropic_request.json"), "--strict")[0] == 1
    assert run("lint", fixture("single_tool.json"), fixture("bad_schemas.json"))[0] == 1
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    code, _, err = run("lint", str(broken))
    assert code == 2 and "not JSON" in err
    empty = tmp_path / "empty.json"
    empty.write_text('{"tools": [{"type": "web_search_preview"}]}')
    code, _, err = run("lint", str(empty))
    assert code == 2 and "no client tool declarations" in err
    assert run("lint", str(tmp_path / "missing.json"))[0] == 2


def test_table_output(run):
    code, out, _ = run("lint", fixture("anthropic_request.json"), fixture("bad_schemas.json"))
    assert code == 1
    assert "orders_search  (anthropic, /tools/0/input_schema, schema " in out
    assert "SEVERITY  POINTER" in out
    assert "warning   /properties/filters" in out
    assert "info      /properties/limit" in out
    assert out.rstrip().endswith("7 tool(s): 6 error(s), 12 warning(s), 10 info")
    quiet = run("lint", "-q", fixture("anthropic_request.json"))[1]
    assert "info      /properties" not in quiet and "warning" in quiet


def test_per_tool_settings_from_the_config(run, tmp_path):
    config = tmp_path / "sidecar.yaml"
    config.write_text(
        "tools:\n  orders_search:\n    lockdown:\n      reject_unknown_properties: false\n      assert_formats: false\n"
    )
    _, found = findings(run, "anthropic_request.json", "--config", str(config))
    got = keyed(found["orders_search"])
    assert ("warning", "unknown-properties-allowed", "") in got
    since = next(f for f in found["orders_search"] if f["pointer"] == "/properties/since/format")
    assert "assert_formats is off" in since["message"]


def test_duplicates_and_bare_function_objects(run, tmp_path):
    path = tmp_path / "functions.json"
    fn = {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}
    path.write_bytes(orjson.dumps([fn, {**fn, "description": "again"}]))
    loaded = load_file(str(path))
    assert loaded.shape == "tools array (openai_chat)"
    [tool] = loaded.tools
    assert tool.location == "/1/parameters" and tool.duplicate
    _, found = findings(run, str(path))
    assert ("warning", "duplicate-tool", "") in keyed(found["f"])


def test_generic_format_hint_is_info(run, tmp_path):
    path = tmp_path / "iri.json"
    schema = {
        "type": "object",
        "properties": {"link": {"type": "string", "format": "iri", "description": "L"}},
        "required": ["link"],
    }
    path.write_bytes(orjson.dumps({"name": "t", "input_schema": schema}))
    _, found = findings(run, str(path))
    assert ("info", "format-generic-hint", "/properties/link/format") in keyed(found["t"])


def test_the_installed_command(tmp_path):
    sidecar = Path(sys.executable).with_name("sidecar")
    result = subprocess.run(
        [str(sidecar), "schemas", "lint", "--json", fixture("bad_schemas.json")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert orjson.loads(result.stdout)["summary"]["error"] == 6
