"""`sidecar status`, and `sidecar rejections top/promote` on a log the demo produced."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.cli import main
from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn
from sidecar.telemetry.status_cli import render
from tests.conftest import StartSidecar
from tests.e2e.agents import AGENTS

ROOT = Path(__file__).resolve().parents[2]
SIDECAR = str(ROOT / ".venv" / "bin" / "sidecar")
SCHEMA = {"type": "object", "properties": {"limit": {"type": "integer"}}, "required": ["limit"]}


async def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Runs `sidecar …` in a thread: it is a blocking HTTP client of the sidecar on this loop."""
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def test_status_table_and_json(
    model: ScriptedModel, start_sidecar: StartSidecar, capsys: pytest.CaptureFixture[str]
) -> None:
    running = await start_sidecar()
    model.add_turns(
        [
            Turn(tool_calls=[ToolCallSpec("list_orders", {"limit": "5"})]),
            Turn(tool_calls=[ToolCallSpec("list_orders", {"limit": 5})]),
            Turn(text="Here."),
        ]
    )
    agent = AGENTS["anthropic"](running.proxy_url, {"list_orders": SCHEMA})
    received = await agent.ask(stream=False)
    agent.answer({received.call_ids[0]: '{"orders": []}'})
    await agent.ask(stream=False)

    code, out, _ = await _cli(capsys, "status", "--admin-url", running.admin_url, "--json")
    assert code == 0
    status = json.loads(out)
    stats = status["tools"]["list_orders"]  # flat: no tools.tools
    assert stats["calls_by_verdict"] == {"reject": 1, "allow": 1}
    assert stats["results"] == {"ok": 1, "error": 0}
    assert status["ready"] is True
    assert {"rejection_log", "policy", "state"} <= set(status["components"])
    # One flat document, the same as GET /v1/status; its times are ISO-8601 UTC.
    assert set(status) == {
        "ready",
        "started_at",
        "uptime_seconds",
        "tools",
        "tool_labels",
        "repair_rounds",
        "approvals_pending",
        "degraded",
        "components",
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", status["started_at"])

    code, table, _ = await _cli(capsys, "status", "--admin-url", running.admin_url)
    assert code == 0
    lines = table.splitlines()
    assert re.fullmatch(r"sidecar: ready, up \d+s \(since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)", lines[0]), lines[0]
    header = lines[2].split()
    assert header == [
        "tool",
        "calls",
        "allow",
        "reject",
        "deny",
        "approval",
        "replay",
        "p50",
        "p95",
        "errors",
        "repairs",
    ]
    row = next(line.split() for line in lines if line.startswith("list_orders"))
    assert row[:7] == ["list_orders", "2", "1", "1", "0", "0", "0"]
    assert row[7].endswith("ms") and row[8].endswith("ms")
    assert row[9] == "0.0%"
    assert row[10] == "1"  # one repair
    assert "repair rounds: 1 corrected, 0 exhausted" in table
    assert any(line.split()[:2] == ["policy", "ok"] for line in lines)


async def test_status_admin_url_from_environment_and_unreachable(
    start_sidecar: StartSidecar,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    running = await start_sidecar()
    monkeypatch.setenv("SIDECAR_ADMIN_URL", running.admin_url)
    code, out, _ = await _cli(capsys, "status")
    assert code == 0 and "no tool calls seen yet" in out
    code, _, err = await _cli(capsys, "status", "--admin-url", "http://127.0.0.1:9")
    assert code == 1 and "cannot reach http://127.0.0.1:9/v1/status" in err


def test_render_not_ready_component() -> None:
    out = io.StringIO()
    render({"ready": False, "tools": {}, "components": {"state": {"ok": False, "error": "down"}}}, out)
    text = out.getvalue()
    assert text.startswith("sidecar: NOT READY")
    assert "state            FAILING  (error=down)" in text


def test_demo_log_feeds_rejections_top_and_promote(tmp_path: Path) -> None:
    log = tmp_path / "demo-rejections.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    demo = subprocess.run(
        [SIDECAR, "demo", "--rejection-log", str(log)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert demo.returncode == 0, demo.stderr
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert records and all(r["tool"] and r["action"] for r in records)

    top = subprocess.run([SIDECAR, "rejections", "top", str(log)], capture_output=True, text=True, env=env, timeout=60)
    assert top.returncode == 0, top.stderr
    for record in records:
        assert record["tool"] in top.stdout

    out = tmp_path / "promoted"
    promote = subprocess.run(
        [SIDECAR, "rejections", "promote", str(log), "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert promote.returncode == 0, promote.stderr
    modules = sorted(out.rglob("test_*.py"))
    assert modules, f"promote wrote no pytest module: {promote.stdout}"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert " passed" in run.stdout


def test_render_tokens_and_declarations() -> None:
    declared = {
        "agent": "a",
        "provider": "openai",
        "schema_hash": "ab" * 32,
        "previous_schema_hash": None,
        "changes": 0,
        "last_seen": "2026-01-01T00:00:00Z",
    }
    status = {
        "ready": True,
        "tools": {
            "orders_list": {
                "calls": 1,
                "tokens": {"output": 12, "input": 300, "input_cached": 0, "input_cache_write": 4},
                "declarations": [
                    {
                        **declared,
                        "lint": {"error": 2, "warning": 1, "info": 3, "rules": ["money-as-number"], "ok": True},
                    },
                    {**declared, "provider": "anthropic", "lint": None},
                ],
            },
            "quiet_tool": {"calls": 0, "tokens": {"output": 0}, "declarations": [{**declared, "lint": {"ok": False}}]},
        },
    }
    out = io.StringIO()
    render(status, out)
    lines = out.getvalue().splitlines()
    start = lines.index(next(line for line in lines if line.startswith("tokens per tool (estimated")))
    assert [line.split() for line in lines[start + 3 : start + 5]] == [["orders_list", "12", "300", "0", "4"], []]
    start = lines.index(next(line for line in lines if line.startswith("declarations (latest seen")))
    rows = [line.split() for line in lines[start + 3 : start + 6]]
    assert rows[0] == ["orders_list", "openai", "abababababab", "0", "-", "2", "1", "money-as-number"]
    assert rows[1] == ["orders_list", "anthropic", "abababababab", "0", "-", "(not", "linted", "yet)"]
    assert rows[2] == ["quiet_tool", "openai", "abababababab", "0", "-", "(lint", "failed)"]
