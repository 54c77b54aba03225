"""Drift end to end: an agent (the official Anthropic SDK) changes a tool's declaration in live
traffic. The change shows up in /metrics, in one log line carrying the diff, in /v1/tools, in
the policy input (a policy refusing changed tools refuses it), and the CLI reads it back with
`--from ADMIN_URL` (lint, snapshot, diff)."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from sidecar.model import ToolDeclaration, declaration_hash
from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn
from tests.conftest import StartSidecar
from tests.e2e.clients import anthropic_client
from tests.helpers.metrics import scrape

V1 = {
    "name": "weather_get",
    "description": "Current weather for a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City in English, e.g. Paris."}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
V2 = {
    **V1,
    "description": "Current weather or forecast for a city.",
    "input_schema": {
        **V1["input_schema"],
        "properties": {
            **V1["input_schema"]["properties"],
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit."},
        },
        "required": ["city", "unit"],
    },
}
# Refuses a call whose tool's schema changed since this sidecar first saw it.
PIN_POLICY = """package sidecar

import rego.v1

decision := {
	"allow": false,
	"reasons": [sprintf("%s changed (was %s)", [input.tool.name, input.tool.previous_schema_hash])],
	"require_approval": null,
	"retryable": false,
} if {
	input.tool.previous_schema_hash != null
} else := {"allow": true, "reasons": [], "require_approval": null, "retryable": false}
"""


class Events(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.events: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "event", None) is not None:
            self.events.append({"event": record.event, **getattr(record, "fields", {})})  # type: ignore[attr-defined]


@pytest.fixture
def schema_log() -> Iterator[Events]:
    logger, handler = logging.getLogger("sidecar.schemas"), Events()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


async def _cli(*argv: str) -> tuple[int, str, str]:
    """The installed `sidecar` command, as a platform team would run it."""
    sidecar = Path(sys.executable).with_name("sidecar")
    process = await asyncio.create_subprocess_exec(
        str(sidecar), "schemas", *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def _ask(client: Any, tool: dict[str, Any]) -> Any:
    return await client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=256,
        tools=[tool],
        messages=[{"role": "user", "content": "Weather in Paris?"}],
    )


async def test_a_schema_change_in_live_traffic(
    model: ScriptedModel, start_sidecar: StartSidecar, schema_log: Events, tmp_path: Path
) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "sidecar.rego").write_text(PIN_POLICY)
    running = await start_sidecar(policies=str(policies), agent_id="agent-e2e", enforcement={"max_repair_rounds": 0})
    client = anthropic_client(running.proxy_url)
    call = ToolCallSpec("weather_get", {"city": "Paris"})
    model.add_turns([Turn(tool_calls=[call])])
    first = await _ask(client, V1)
    assert [b.name for b in first.content if b.type == "tool_use"] == ["weather_get"]
    before = await scrape(running.admin_url)
    assert before.value("sidecar_tool_schema_changes_total", tool="weather_get", default=0.0) == 0

    # The agent ships a new version of the tool.
    model.add_turns([Turn(tool_calls=[ToolCallSpec("weather_get", {"city": "Paris", "unit": "celsius"})])])
    second = await _ask(client, V2)
    # The pin policy saw input.tool.previous_schema_hash and refused the call (no repair round).
    assert [b for b in second.content if b.type == "tool_use"] == []
    assert "weather_get changed" in " ".join(b.text for b in second.content if b.type == "text")

    after = await scrape(running.admin_url)
    assert after.value("sidecar_tool_schema_changes_total", tool="weather_get") == 1
    [line] = [e for e in schema_log.events if e["event"] == "tool_schema_change"]
    v1 = ToolDeclaration.create("weather_get", V1["input_schema"], V1["description"])
    v2 = ToolDeclaration.create("weather_get", V2["input_schema"], V2["description"])
    assert line["diff"] == [
        '~ weather_get: description "Current weather for a city." -> "Current weather or forecast for a city."',
        '+ weather_get unit: string enum ["celsius","fahrenheit"], required',
    ]
    assert (line["agent"], line["provider"], line["tool"]) == ("agent-e2e", "anthropic", "weather_get")
    assert (line["previous_schema_hash"], line["schema_hash"]) == (v1.schema_hash, v2.schema_hash)

    # The same declaration again: no second count, no second line.
    model.add_turns([Turn(text="Sunny.")])
    await _ask(client, V2)
    assert (await scrape(running.admin_url)).value("sidecar_tool_schema_changes_total", tool="weather_get") == 1
    assert len([e for e in schema_log.events if e["event"] == "tool_schema_change"]) == 1

    async with aiohttp.ClientSession() as session, session.get(f"{running.admin_url}/v1/tools") as response:
        assert response.status == 200
        inventory = orjson.loads(await response.read())
    [entry] = inventory["tools"]
    assert entry["agent"] == "agent-e2e" and entry["provider"] == "anthropic"
    assert (entry["name"], entry["description"], entry["schema"]) == (
        "weather_get",
        V2["description"],
        V2["input_schema"],
    )
    assert entry["schema_hash"] == v2.schema_hash and entry["declaration_hash"] == declaration_hash(v2)
    assert entry["previous_schema_hash"] == v1.schema_hash and entry["changes"] == 1
    assert entry["first_seen"].endswith("Z") and entry["first_seen"] <= entry["last_seen"]

    # What is deployed, read back by the CLI from the admin port.
    code, out, err = await _cli("lint", "--from", running.admin_url, "--json", "--strict")
    assert code == 0, out + err
    [report] = orjson.loads(out)["tools"]
    assert report["tool"] == "weather_get" and report["schema_hash"] == v2.schema_hash
    assert report["file"] == f"{running.admin_url}/v1/tools (agent agent-e2e, anthropic)"

    golden = tmp_path / "golden"
    code, out, err = await _cli("snapshot", "--out", str(golden), "--from", running.admin_url)
    assert code == 0, err
    assert orjson.loads((golden / "weather_get.json").read_bytes())["declaration_hash"] == declaration_hash(v2)
    assert (await _cli("diff", str(golden), "--from", running.admin_url))[0] == 0
    v1_file = tmp_path / "v1.json"
    v1_file.write_bytes(orjson.dumps([V1]))
    code, out, _ = await _cli("diff", str(golden), "--from", str(v1_file))
    assert code == 1 and '- weather_get unit: string enum ["celsius","fahrenheit"]' in out

    code, _, err = await _cli("lint", "--from", running.admin_url, "--agent", "someone-else")
    assert code == 2 and "no tool declarations for agent someone-else" in err
