"""The exchange fails closed, by fault injection into the real components (no mocks of the code
under test): a ledger that cannot be written on each backend, a filter that raises, and the
duplicates the ledger must catch (the same call id twice, two identical calls in one turn)."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import aiohttp
import pytest
import redis

from sidecar.exchange.filters import Filter
from sidecar.exchange.state import CallCheck, Exchange
from sidecar.model import Verdict
from sidecar.scripted import ToolCallSpec, Turn
from sidecar.state import CallRecord, StateUnavailable
from sidecar.state.memory import MemoryStore
from tests.e2e.agents import AGENTS
from tests.helpers.ledger import TOOLS, TRAITS, Capture
from tests.helpers.metrics import scrape

SEND = ToolCallSpec("support_replies_send", {"ticket_id": "T-1", "body": "Hello"})
SEARCH = ToolCallSpec("support_tickets_search", {"query": "refund"})
SESSION = {"X-Sidecar-Session": "fail-closed"}


async def _readyz(admin_url: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.get(admin_url + "/readyz") as response:
        return response.status, await response.json()


async def _assert_withdrawn(sidecar: Any, model: Any, backend: str) -> None:
    """A side-effecting call the ledger cannot record never reaches the agent, three times in a
    row (the observed failure delivered it each time); counted; /readyz says the write path fails."""
    agent = AGENTS["anthropic"](sidecar.proxy_url, TOOLS, SESSION)
    for _ in range(3):
        model.add_turns([Turn(text="Sending.", tool_calls=[SEND])])
        got = await agent.ask(False)
        assert got.calls == []
        assert "could not record" in got.text
        agent.answer({})
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_state_errors_total", backend=backend) >= 3
    status, body = await _readyz(sidecar.admin_url)
    assert status == 200 and body["degraded"] == ["state"]  # serving, failing closed
    assert body["components"]["state"]["write_path_ok"] is False
    # A read-only call still passes (a missed replay of a read is harmless).
    model.add_turns([Turn(tool_calls=[SEARCH])])
    got = await agent.ask(False)
    assert got.calls == [("support_tickets_search", {"query": "refund"})]


async def test_memory_ledger_that_raises_on_write(start_sidecar, model, monkeypatch) -> None:
    sidecar = await start_sidecar(tools=TRAITS)

    def fails(self: MemoryStore, rec: Any) -> None:
        raise MemoryError("injected: cannot allocate")

    monkeypatch.setattr(MemoryStore, "_record_call", fails)
    await _assert_withdrawn(sidecar, model, "memory")
    monkeypatch.undo()
    # Once writes succeed again the write path recovers and calls are delivered.
    agent = AGENTS["anthropic"](sidecar.proxy_url, TOOLS, SESSION)
    model.add_turns([Turn(tool_calls=[SEND])])
    assert (await agent.ask(False)).calls
    status, body = await _readyz(sidecar.admin_url)
    assert status == 200 and body["degraded"] == []


@pytest.mark.parametrize("fault", ["full", "read-only"])
async def test_sqlite_ledger_on_a_full_or_read_only_database(start_sidecar, model, tmp_path, fault) -> None:
    """SQLite's own errors: a database that cannot grow (SQLITE_FULL, what a full disk gives: the
    ledger itself fills it) or that refuses writes (SQLITE_READONLY)."""
    state = {"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")}
    state |= {"max_entries_per_session": 100_000, "max_entries_total": 100_000}  # nothing evicted
    sidecar = await start_sidecar(tools=TRAITS, state=state)
    store = sidecar.sidecar.state.backend
    await store.get_call("warm", "up")  # opens the connection

    def jam(connection: sqlite3.Connection) -> None:
        if fault == "full":
            pages = connection.execute("PRAGMA page_count").fetchone()[0]
            connection.execute(f"PRAGMA max_page_count = {pages + 4}")
        else:
            connection.execute("PRAGMA query_only = ON")

    await store._run(jam, write=False)
    if fault == "full":
        with pytest.raises(StateUnavailable, match="full"):
            for i in range(100_000):
                await store.record_call(CallRecord("ballast", f"c{i}", "t", "h" * 64, f"k{i}" * 16, time.time()))
    await _assert_withdrawn(sidecar, model, "sqlite")


async def test_redis_ledger_answering_errors(start_sidecar, model, redis_url) -> None:
    """A real Redis refusing writes: `OOM command not allowed` (maxmemory reached, noeviction)."""
    with redis.Redis.from_url(redis_url) as admin:
        admin.flushdb()
        sidecar = await start_sidecar(tools=TRAITS, state={"backend": "redis", "redis_url": redis_url})
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", "1")
        try:
            await _assert_withdrawn(sidecar, model, "redis")
        finally:
            admin.config_set("maxmemory", "0")


class Raises(Filter):
    """A filter that raises while judging a call."""

    name = "raises"

    def __init__(self, critical: bool) -> None:
        self.critical_flag = critical
        self.calls = 0

    async def on_call(self, check: CallCheck) -> Verdict | None:
        self.calls += 1
        raise RuntimeError("injected")


class CriticalRaises(Raises):
    name = "critical_raises"
    critical = True


async def test_a_critical_filter_that_raises_refuses_the_call(start_sidecar, model) -> None:
    sidecar = await start_sidecar(tools=TRAITS, enforcement={"max_repair_rounds": 1})
    sidecar.sidecar.add_filter(CriticalRaises(True))
    agent = AGENTS["chat"](sidecar.proxy_url, TOOLS, SESSION)
    model.add_turns([Turn(tool_calls=[SEARCH]), Turn(text="I could not search.")])
    got = await agent.ask(False)
    assert got.calls == []
    [told] = AGENTS["chat"].tool_outputs(model.model_requests[1])
    assert told["status"] == "denied" and "could not check this call (critical_raises failed" in told["reasons"][0]
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_filter_errors_total", filter="critical_raises", hook="on_call", critical="true") == 1
    status, body = await _readyz(sidecar.admin_url)
    assert status == 200 and body["degraded"] == ["filters"]
    assert "critical_raises" in body["components"]["filters"]["failing"]


async def test_a_best_effort_filter_that_raises_changes_nothing(start_sidecar, model) -> None:
    sidecar = await start_sidecar(tools=TRAITS)
    sidecar.sidecar.add_filter(Raises(False))
    agent = AGENTS["chat"](sidecar.proxy_url, TOOLS, SESSION)
    model.add_turns([Turn(tool_calls=[SEARCH])])
    got = await agent.ask(False)
    assert got.calls == [("support_tickets_search", {"query": "refund"})]
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_filter_errors_total", filter="raises", hook="on_call", critical="false") == 1
    status, _ = await _readyz(sidecar.admin_url)
    assert status == 200


class Ends(Filter):
    name = "ends"

    def __init__(self) -> None:
        self.ends: list[Any] = []

    async def on_done(self, ex: Exchange, end: Any) -> None:
        self.ends.append(end)


async def test_done_fires_exactly_once_when_a_guard_raises_on_a_whole_reply(start_sidecar, model, monkeypatch):
    """The observed failure: a guard raising on a non-streamed request gave a 502 but no `done`
    (no overhead sample, no request log line)."""
    sidecar = await start_sidecar(tools=TRAITS)
    ends = Ends()
    sidecar.sidecar.add_filter(ends)
    monkeypatch.setattr(sidecar.sidecar.runner.enforcer, "settle", _raise)
    agent = AGENTS["chat"](sidecar.proxy_url, TOOLS, SESSION)
    model.add_turns([Turn(tool_calls=[SEARCH])])
    with pytest.raises(Exception, match=r"502|failed to process"):
        await agent.ask(False)
    assert [(e.outcome.value, e.status) for e in ends.ends] == [("failed", 502)]
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_proxy_overhead_seconds_count", provider="openai", stream="false") == 1


async def _raise(*_: Any) -> Any:
    raise RuntimeError("injected")


@pytest.mark.parametrize("kind", list(AGENTS))
async def test_the_same_call_id_delivered_again_is_answered_from_the_ledger(start_sidecar, model, kind) -> None:
    """A model reply retried at the transport level carries the same call id: the side effect runs once."""
    sidecar = await start_sidecar(tools={**TRAITS, "support_replies_send": {"side_effects": True, "repeatable": True}})
    agent = AGENTS[kind](sidecar.proxy_url, TOOLS, SESSION)
    same = ToolCallSpec(SEND.name, SEND.arguments, id="call_transport_retry")
    model.add_turns([Turn(tool_calls=[same])])
    first = await agent.ask(False)
    assert first.calls and first.call_ids == ["call_transport_retry"]
    agent.answer({first.call_ids[0]: '{"status": "sent"}'})
    model.add_turns([Turn(tool_calls=[same]), Turn(text="That was already sent.")])
    again = await agent.ask(False)
    assert again.calls == []  # even though the tool is repeatable: it is the same call, not a new one
    [told] = AGENTS[kind].tool_outputs(model.model_requests[-1])
    assert told["status"] == "replayed" and told["original_call_id"] == "call_transport_retry"
    assert "already delivered under this call id" in told["reasons"][0]


@pytest.mark.parametrize("kind", list(AGENTS))
async def test_identical_side_effecting_calls_in_one_turn_run_once(start_sidecar, model, kind) -> None:
    sidecar = await start_sidecar(tools=TRAITS)
    capture = Capture()
    sidecar.sidecar.add_filter(capture)
    agent = AGENTS[kind](sidecar.proxy_url, TOOLS, SESSION)
    model.add_turns([Turn(tool_calls=[SEND, SEND]), Turn(tool_calls=[SEND])])
    got = await agent.ask(False)
    assert got.calls == [("support_replies_send", {"ticket_id": "T-1", "body": "Hello"})]  # once
    first_round = capture.checks[:2]
    assert [c.verdict.kind.value for c in first_round] == ["allow", "replay"]
    outputs = AGENTS[kind].tool_outputs(model.model_requests[1])
    assert [o["status"] for o in outputs] == ["not_run", "replayed"]
    assert "called twice with exactly these arguments in this turn" in outputs[1]["reasons"][0]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_block_mode_runs_the_first_and_removes_its_in_turn_repeat(start_sidecar, model, stream) -> None:
    sidecar = await start_sidecar(tools=TRAITS, enforcement={"mode": "block"})
    agent = AGENTS["anthropic"](sidecar.proxy_url, TOOLS, SESSION)
    model.add_turns([Turn(text="Sending.", tool_calls=[SEND, SEND])])
    got = await agent.ask(stream)
    assert got.calls == [("support_replies_send", {"ticket_id": "T-1", "body": "Hello"})]
    assert "called twice with exactly these arguments in this turn" in got.text
    assert got.text.startswith("Sending.\n\n[sidecar]")  # the sidecar's note is set apart from the model's
