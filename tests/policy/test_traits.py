"""One source of truth for tool traits: change `side_effects` in one place (the configuration
or the policy data) and every consumer agrees: the replay filter, the policy's own rules, what
the model is told, and the counters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sidecar.config import ConfigError, load_settings
from sidecar.policy.sources import init_directory
from sidecar.policy.traits import ToolTraits
from sidecar.scripted import ToolCallSpec, Turn
from tests.e2e.agents import AGENTS
from tests.helpers.metrics import scrape

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
LOOKUP = ToolCallSpec("lookup", {"q": "order 7"})


async def _repeat(sidecar, model) -> tuple[list, list]:
    """The same call in two turns of one session: (calls the agent got the second time, what
    the model was told about them)."""
    agent = AGENTS["chat"](sidecar.proxy_url, {"lookup": SCHEMA}, {"X-Sidecar-Session": "traits"})
    model.add_turns([Turn(tool_calls=[LOOKUP])])
    first = await agent.ask(False)
    agent.answer({first.call_ids[0]: '{"order": 7}'})
    model.add_turns([Turn(tool_calls=[LOOKUP]), Turn(text="Done.")])
    second = await agent.ask(False)
    told = AGENTS["chat"].tool_outputs(model.model_requests[-1]) if len(model.model_requests) > 2 else []
    return second.calls, told


def _read_only_data(directory: Path) -> None:
    data = json.loads((directory / "data.json").read_text())
    data["sidecar"].setdefault("tools", {})["lookup"] = {"side_effects": False}
    (directory / "data.json").write_text(json.dumps(data))


@pytest.mark.parametrize("where", ["configuration", "policy data"])
async def test_read_only_in_one_place_is_read_only_everywhere(start_sidecar, model, tmp_path, where) -> None:
    policies = tmp_path / "policies"
    init_directory(policies)  # the packaged default: unlisted tools are side-effecting
    if where == "policy data":
        _read_only_data(policies)
        sidecar = await start_sidecar(policies=str(policies), tools={})
    else:
        sidecar = await start_sidecar(policies=str(policies), tools={"lookup": {"side_effects": False}})
    assert sidecar.sidecar.tool_traits.side_effects("lookup") is False
    # The policy sees the same data: its read-only rule applies (no "replay" refusal).
    data = sidecar.sidecar.policy.data["sidecar"]["tools"]
    assert data["lookup"]["side_effects"] is False
    calls, told = await _repeat(sidecar, model)
    assert calls == [("lookup", {"q": "order 7"})]  # the repeat of a read runs again
    assert told == []  # no repair round: nobody refused it
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_tool_replays_total", tool="lookup", action="allowed") == 1


async def test_side_effecting_when_nobody_says_otherwise(start_sidecar, model, tmp_path) -> None:
    policies = tmp_path / "policies"
    init_directory(policies)
    sidecar = await start_sidecar(policies=str(policies), tools={})
    assert sidecar.sidecar.tool_traits.side_effects("lookup") is True
    calls, [told] = await _repeat(sidecar, model)
    assert calls == []
    # What the model reads is what happened: the sidecar answered from its ledger.
    assert told["status"] == "replayed" and told["result"] == '{"order": 7}'
    assert "the sidecar did not run it again" in told["reasons"][0]
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_tool_replays_total", tool="lookup", action="answered") == 1


def test_traits_without_data_follow_the_shipped_default() -> None:
    traits = ToolTraits(load_settings(environ={}), {})
    assert traits.side_effects("anything") is True and traits.repeatable("anything") is False


def test_configuration_traits_are_refused_with_an_opa_server() -> None:
    with pytest.raises(ConfigError, match=r"tools\.lookup: side_effects/repeatable cannot be set here"):
        load_settings(flags={"policy": {"engine": "opa"}, "tools": {"lookup": {"side_effects": False}}}, environ={})
