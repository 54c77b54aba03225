"""`sidecar run --workers N`: several processes on one proxy port, agreeing through shared state,
one admin port for all of them."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import orjson
import pytest

from sidecar.scripted import ToolCallSpec, Turn
from tests.e2e.agents import AGENTS
from tests.helpers.ledger import TOOLS, TRAITS
from tests.helpers.metrics import Scrape, scrape
from tests.helpers.process import running_sidecar

SEND = ToolCallSpec("support_replies_send", {"ticket_id": "T-9", "body": "Your refund is on its way"})
REPO = Path(__file__).resolve().parents[1]
UPSTREAM_COUNT = "sidecar_upstream_request_duration_seconds_count"


def _per_worker(m: Scrape, sample: str) -> dict[str, float]:
    counts: dict[str, float] = {}
    for family in m.families.values():
        for s in family.samples:
            if s.name == sample:
                counts[s.labels["worker"]] = counts.get(s.labels["worker"], 0.0) + float(s.value)
    return counts


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped."""
    status = Path(f"/proc/{pid}/status")
    try:
        return "State:\tZ" not in status.read_text()
    except FileNotFoundError:
        return False


async def _all_ready(admin: str) -> None:
    """The supervisor answers /healthz at once; its workers take a moment to start."""
    async with aiohttp.ClientSession() as http:
        for _ in range(300):
            async with http.get(admin + "/readyz") as r:
                if r.status == 200 and len((await r.json())["workers"]) == 2:
                    return
            await asyncio.sleep(0.05)
    raise AssertionError("workers did not become ready")


def _moved(before: dict[str, float], after: dict[str, float]) -> set[str]:
    return {worker for worker, value in after.items() if value > before.get(worker, 0.0)}


def test_more_than_one_worker_needs_shared_state() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "run", "--workers", "2", "--listen", "127.0.0.1:0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--workers 2 needs a shared state backend" in result.stderr
    assert "'sqlite' (one pod) or 'redis'" in result.stderr


async def test_workers_share_the_port_and_the_replay_ledger(model, tmp_path: Path) -> None:
    """A side-effecting call delivered through one worker is a replay on the other: the turns
    of each conversation open new connections, which the kernel spreads over both workers."""
    env = {
        "SIDECAR_STATE__BACKEND": "sqlite",
        "SIDECAR_STATE__SQLITE_PATH": str(tmp_path / "state.db"),
        "SIDECAR_TOOLS": orjson.dumps(TRAITS).decode(),
    }
    crossed = 0
    async with running_sidecar(model.url, env, tmp_path, "--workers", "2") as sidecar:
        await _all_ready(sidecar.admin)
        for attempt in range(24):
            model.reset()
            before = _per_worker(await scrape(sidecar.admin), UPSTREAM_COUNT)
            agent = AGENTS["chat"](sidecar.proxy, TOOLS, {"X-Sidecar-Session": f"workers-{attempt}"})
            model.add_turns([Turn(tool_calls=[SEND])])
            first = await agent.ask(False)
            assert [name for name, _ in first.calls] == ["support_replies_send"]
            middle = _per_worker(await scrape(sidecar.admin), UPSTREAM_COUNT)

            agent.answer({first.call_ids[0]: '{"status": "sent"}'})
            model.add_turns([Turn(tool_calls=[SEND]), Turn(text="That reply already went out.")])
            second = await agent.ask(False)
            after = _per_worker(await scrape(sidecar.admin), UPSTREAM_COUNT)

            assert second.calls == [], f"attempt {attempt}: delivered twice"
            [told] = AGENTS["chat"].tool_outputs(model.model_requests[2])
            assert told["replayed"] is True and told["result"] == '{"status": "sent"}'
            [first_worker], [second_worker] = _moved(before, middle), _moved(middle, after)
            crossed += first_worker != second_worker
            if crossed >= 2:
                break
        m = await scrape(sidecar.admin)
    assert crossed >= 2, "the kernel sent every connection to one worker"
    assert set(_per_worker(m, UPSTREAM_COUNT)) == {"0", "1"}
    assert m.value("sidecar_workers") == 2
    assert m.value("sidecar_worker_restarts_total") == 0
    assert m.value("sidecar_worker_scrape_failures_total") == 0


async def test_one_admin_port_readiness_restart_and_drain(model, tmp_path: Path) -> None:
    env = {"SIDECAR_STATE__BACKEND": "sqlite", "SIDECAR_STATE__SQLITE_PATH": str(tmp_path / "state.db")}
    async with (
        running_sidecar(model.url, env, tmp_path, "--workers", "2") as sidecar,
        aiohttp.ClientSession() as http,
    ):
        await _all_ready(sidecar.admin)
        async with http.get(sidecar.admin + "/readyz") as r:
            ready = await r.json()
            assert r.status == 200, ready
        assert set(ready["workers"]) == {"0", "1"}
        assert all(worker["ready"] for worker in ready["workers"].values())
        async with http.get(sidecar.admin + "/v1/status") as r:
            assert r.status == 200 and (await r.json())["ready"] is True  # forwarded to a worker

        started = [orjson.loads(line) for line in sidecar.log.read_text().splitlines() if "worker_started" in line]
        # A worker that does not answer the scrape is left out of it, and counted.
        stuck = next(event["pid"] for event in started if event["worker"] == 1)
        os.kill(stuck, signal.SIGSTOP)
        try:
            m = await scrape(sidecar.admin)
        finally:
            os.kill(stuck, signal.SIGCONT)
        assert m.value("sidecar_worker_scrape_failures_total") == 1
        assert m.label_values("worker") == {"0"}

        # A worker that dies is replaced; the port keeps serving meanwhile.
        victim = next(event["pid"] for event in started if event["worker"] == 0)
        os.kill(victim, signal.SIGKILL)
        for _ in range(200):
            m = await scrape(sidecar.admin)
            if m.value("sidecar_worker_restarts_total") == 1 and m.value("sidecar_workers") == 2:
                break
            await asyncio.sleep(0.1)
        assert m.value("sidecar_worker_restarts_total") == 1
        model.add_turns([Turn(text="still here")])
        assert (await AGENTS["anthropic"](sidecar.proxy, {}).ask(False)).text == "still here"

        # SIGTERM: unready at once, then every process exits.
        sidecar.proc.send_signal(signal.SIGTERM)
        for _ in range(40):  # the workers' drain delay (2 s) keeps the port open meanwhile
            async with http.get(sidecar.admin + "/readyz") as r:
                status, report = r.status, await r.json()
            if status == 503:
                break
            await asyncio.sleep(0.02)
        assert status == 503 and report["draining"] is True
        assert await asyncio.wait_for(sidecar.proc.wait(), 40) == 0
    log = sidecar.log.read_text()
    assert '"event":"worker_exited"' in log and '"event":"workers_stopping"' in log
    pids = [orjson.loads(line)["pid"] for line in log.splitlines() if "worker_started" in line]
    assert len(pids) == 3 and not [pid for pid in pids if _running(pid)]


@pytest.mark.parametrize("workers", ["0", "-1"])
def test_workers_must_be_positive(workers: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "run", "--workers", workers],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "--workers must be 1 or more" in result.stderr
