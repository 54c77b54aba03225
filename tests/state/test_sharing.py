"""State shared by replicas (two sidecar processes on one Redis), Redis down, and restarts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import aiohttp
import orjson
import pytest

from sidecar.config import Settings
from sidecar.policy.traits import ToolTraits
from sidecar.scripted import ToolCallSpec, Turn
from sidecar.state import HeldState
from sidecar.state.continuations import Continuation, Continuations, turn_key
from sidecar.state.sqlite import SQLiteStore
from tests.e2e.agents import AGENTS
from tests.helpers.ledger import TOOLS, TRAITS
from tests.helpers.metrics import scrape
from tests.helpers.ports import free_port
from tests.helpers.process import sidecar_process

SEND = ToolCallSpec("support_replies_send", {"ticket_id": "T-9", "body": "Your refund is on its way"})
SEARCH = ToolCallSpec("support_tickets_search", {"query": "refund"})
REPO = Path(__file__).resolve().parents[2]


async def test_two_sidecar_processes_share_one_redis(model, redis_url, tmp_path):
    env = {
        "SIDECAR_STATE__BACKEND": "redis",
        "SIDECAR_STATE__REDIS_URL": redis_url,
        "SIDECAR_TOOLS": orjson.dumps(TRAITS).decode(),
    }
    async with (
        sidecar_process(model.url, env, tmp_path) as (proxy_a, _),
        sidecar_process(model.url, env, tmp_path) as (proxy_b, admin_b),
    ):
        for kind in ("anthropic", "chat"):
            model.reset()
            agent = AGENTS[kind](proxy_a, TOOLS, {"X-Sidecar-Session": f"replicas-{kind}"})
            model.add_turns([Turn(tool_calls=[SEND])])
            first = await agent.ask(False)  # delivered through replica A
            assert [name for name, _ in first.calls] == ["support_replies_send"]

            agent.base_url = proxy_b  # the next turn lands on replica B
            agent.answer({first.call_ids[0]: '{"status": "sent"}'})
            model.add_turns([Turn(tool_calls=[SEND]), Turn(text="That reply already went out.")])
            second = await agent.ask(False)

            assert second.calls == []
            assert second.text == "That reply already went out."
            [told] = AGENTS[kind].tool_outputs(model.model_requests[2])
            assert told["replayed"] is True
            assert told["original_call_id"] == first.call_ids[0]
            assert told["result"] == '{"status": "sent"}'  # recorded by B, found by B, delivered by A
        m = await scrape(admin_b)
        assert m.value("sidecar_tool_replays_total", tool="support_replies_send", action="answered") == 2
        assert (
            m.value("sidecar_tool_call_duration_seconds_count", tool="support_replies_send", outcome="ok") == 2
        )  # B timed calls A delivered


@pytest.fixture
def closed_redis_url() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there


async def test_redis_unreachable_fails_closed_for_side_effects(start_sidecar, model, closed_redis_url):
    sidecar = await start_sidecar(tools=TRAITS, state={"backend": "redis", "redis_url": closed_redis_url})
    agent = AGENTS["anthropic"](sidecar.proxy_url, TOOLS, {"X-Sidecar-Session": "down"})
    model.add_turns([Turn(tool_calls=[SEND]), Turn(text="I cannot send right now.")])
    refused = await agent.ask(False)

    assert refused.calls == []
    assert refused.text == "I cannot send right now."
    [told] = AGENTS["anthropic"].tool_outputs(model.model_requests[1])
    assert told["status"] == "denied" and told["retryable"] is True
    assert "cannot reach its state backend (redis)" in told["reasons"][0]

    agent.answer({})
    model.add_turns([Turn(tool_calls=[SEARCH])])
    read = await agent.ask(False)
    assert read.calls == [("support_tickets_search", {"query": "refund"})]  # read-only passes

    async with aiohttp.ClientSession() as http, http.get(sidecar.admin_url + "/readyz") as r:
        assert r.status == 200  # it serves, failing closed: reported as degraded, not unready
        report = await r.json()
    assert report["degraded"] == ["state"]
    state = report["components"]["state"]
    assert state["ok"] is False and state["backend"] == "redis"
    assert state["error"] == "state backend redis is unavailable"
    assert state["write_path_ok"] is False and "redis" in state["last_error"]
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_state_errors_total", backend="redis") >= 2


async def test_redis_unreachable_fail_open_lets_calls_through(start_sidecar, model, closed_redis_url):
    sidecar = await start_sidecar(
        tools=TRAITS, state={"backend": "redis", "redis_url": closed_redis_url, "on_unavailable": "fail_open"}
    )
    model.add_turns([Turn(tool_calls=[SEND])])
    received = await AGENTS["chat"](sidecar.proxy_url, TOOLS).ask(False)
    assert [name for name, _ in received.calls] == ["support_replies_send"]


async def test_responses_memo_survives_a_restart(tmp_path):
    """The memo backed by SQLite: a new process (new store) still resolves the chain."""
    path = str(tmp_path / "memo.db")
    first = SQLiteStore(path)
    try:
        memo = Continuations(store=first)
        await memo.put(turn_key("resp_1"), HeldState(root="resp_0", withheld={"call_1": '{"status": "denied"}'}))
        await memo.put(turn_key("resp_shown"), HeldState(root="resp_0", continue_from="resp_1"))
    finally:
        await first.close()
    second = SQLiteStore(path)
    try:
        found = await Continuations(store=second).resolve("resp_shown")
        assert found == Continuation("resp_1", "resp_0", {"call_1": '{"status": "denied"}'}, [], known=True)
    finally:
        await second.close()


async def test_responses_memo_falls_back_to_local_when_the_store_is_down(closed_redis_url):
    from sidecar.state.redis import RedisStore

    errors: list[Exception] = []
    store = RedisStore(closed_redis_url)
    try:
        memo = Continuations(store=store, on_state_error=errors.append)
        await memo.put(turn_key("resp_1"), HeldState(withheld={"call_1": "x"}))
        assert await memo.resolve("resp_1") == Continuation("resp_1", "resp_1", {"call_1": "x"}, [], known=True)
        assert errors
    finally:
        await store.close()


def _traits(tools: dict[str, object] | None = None, policies: str | None = None) -> ToolTraits:
    return ToolTraits.from_settings(Settings.model_validate({"tools": tools or {}, "policies": policies}))


@pytest.mark.parametrize(
    ("tool", "side_effects", "repeatable"),
    [
        ("support_replies_send", True, False),
        ("support_tickets_search", False, False),
        ("support_tickets_tag", True, True),
        ("never_described", True, False),  # the shipped data.json: unlisted tools are writes
    ],
)
def test_traits_from_shipped_policy_data(tool, side_effects, repeatable):
    traits = _traits(policies="example:support")
    assert (traits.side_effects(tool), traits.repeatable(tool)) == (side_effects, repeatable)


def test_config_beats_policy_data_and_no_policies_means_the_packaged_default():
    traits = _traits({"support_tickets_search": {"side_effects": True, "repeatable": True}}, "example:support")
    assert traits.side_effects("support_tickets_search") and traits.repeatable("support_tickets_search")
    bare: Callable[[str], bool] = _traits().side_effects
    assert bare("anything") is True  # builtin: every tool side-effecting, so replays are caught


def _policies_with(directory: Path, tool: str, side_effects: bool) -> None:
    data_file = directory / "data.json"
    data = json.loads(data_file.read_text())
    data["sidecar"]["tools"][tool]["side_effects"] = side_effects
    data_file.write_text(json.dumps(data))


async def test_tool_traits_follow_a_policy_reload(tmp_path):
    """side_effects comes from the policy's data.json: a hot reload changes it in place."""
    from sidecar.app import Sidecar
    from sidecar.policy.sources import init_directory

    policies = tmp_path / "policies"
    init_directory(policies, "support")
    sidecar = Sidecar(Settings.model_validate({"policies": str(policies), "rejection_log": {"path": "-"}}))
    try:
        assert sidecar.tool_traits.side_effects("support_tickets_search") is False
        _policies_with(policies, "support_tickets_search", side_effects=True)
        await sidecar.policy.reload_now()
        assert sidecar.tool_traits.side_effects("support_tickets_search") is True
    finally:
        await sidecar.close()
