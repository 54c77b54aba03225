"""Every DESIGN.md metric, checked metric by metric after a scripted SDK workload.

Scraped from /metrics on the admin port and parsed with prometheus_client's parsers; the
`tool` label cap; and a real Prometheus server scraping the sidecar.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn
from tests.conftest import StartSidecar
from tests.e2e.agents import AGENTS, Agent
from tests.helpers.metrics import scrape
from tests.helpers.ports import free_port

SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
    },
    "required": ["query"],
}
TOOLS = {"search_tickets": SCHEMA}
GOOD = ToolCallSpec("search_tickets", {"query": "refund", "limit": 10})
OTHER_GOOD = ToolCallSpec("search_tickets", {"query": "invoice"})
BAD_TYPE = ToolCallSpec("search_tickets", {"query": "refund", "limit": "10"})
BAD_RANGE = ToolCallSpec("search_tickets", {"query": "refund", "limit": 500})

CONTRACT = {
    "sidecar_tool_calls": "counter",
    "sidecar_tool_call_duration_seconds": "histogram",
    "sidecar_tool_results": "counter",
    "sidecar_tool_replays": "counter",
    "sidecar_argument_rejections": "counter",
    "sidecar_policy_decisions": "counter",
    "sidecar_policy_evaluation_seconds": "histogram",
    "sidecar_approvals_pending": "gauge",
    "sidecar_approvals": "counter",
    "sidecar_repair_rounds": "counter",
    "sidecar_upstream_request_duration_seconds": "histogram",
    "sidecar_proxy_overhead_seconds": "histogram",
    "sidecar_tool_schema_changes": "counter",
}


def _answer_error(agent: Agent, content: str) -> None:
    assert agent.last is not None
    agent.history.append(
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": agent.last.call_ids[0], "content": content, "is_error": True}
            ],
        }
    )


async def _workload(model: ScriptedModel, proxy_url: str) -> None:
    """Each step: protocol, streaming, what the model does, what the agent answers."""
    # 1. A correct call, answered ok (Anthropic, whole). Session s1.
    model.add_turns([Turn(tool_calls=[GOOD]), Turn(text="Found it.")])
    one = AGENTS["anthropic"](proxy_url, TOOLS, headers={"X-Sidecar-Session": "s1"})
    received = await one.ask(stream=False)
    one.answer({received.call_ids[0]: '{"tickets": []}'})
    await one.ask(stream=False)

    # 2. Refused (limit "10") then corrected in round one, answered ok (Chat, streaming).
    model.add_turns([Turn(tool_calls=[BAD_TYPE]), Turn(tool_calls=[OTHER_GOOD]), Turn(text="Done.")])
    two = AGENTS["chat"](proxy_url, TOOLS, headers={"X-Sidecar-Session": "s2"})
    received = await two.ask(stream=True)
    assert received.calls == [("search_tickets", {"query": "invoice"})]
    two.answer({received.call_ids[0]: '{"tickets": [1]}'})
    await two.ask(stream=True)

    # 3. Never corrected (limit 500, three times): repair exhausted (Anthropic, streaming).
    model.add_turns([Turn(tool_calls=[BAD_RANGE])] * 3)
    three = AGENTS["anthropic"](proxy_url, TOOLS, headers={"X-Sidecar-Session": "s3"})
    assert (await three.ask(stream=True)).calls == []

    # 4. A tool result with is_error (Anthropic, whole).
    model.add_turns([Turn(tool_calls=[OTHER_GOOD]), Turn(text="Sorry.")])
    four = AGENTS["anthropic"](proxy_url, TOOLS, headers={"X-Sidecar-Session": "s4"})
    await four.ask(stream=False)
    _answer_error(four, "backend unavailable")
    await four.ask(stream=False)

    # 5. Read-only replay: session s1 asks the identical completed call again.
    model.add_turns([Turn(tool_calls=[GOOD])])
    one.answer({})
    assert (await one.ask(stream=False)).calls == [("search_tickets", {"query": "refund", "limit": 10})]

    # 6. The tool's schema changes between requests.
    model.add_turns([Turn(text="ok")])
    changed = {"search_tickets": {**SCHEMA, "required": ["query", "limit"]}}
    await AGENTS["anthropic"](proxy_url, changed, headers={"X-Sidecar-Session": "s6"}).ask(stream=False)


async def test_every_contract_metric_after_a_workload(model: ScriptedModel, start_sidecar: StartSidecar) -> None:
    running = await start_sidecar()
    await _workload(model, running.proxy_url)
    m = await scrape(running.admin_url)

    assert m.content_type.startswith("text/plain")
    for name, kind in CONTRACT.items():
        assert m.families[name].type == kind, name

    tool = "search_tickets"
    # Verdicts: allow = steps 1, 2 (corrected), 4, 5 and the read-only replay is allowed;
    # reject = step 2's first call and step 3's three attempts.
    assert m.value("sidecar_tool_calls_total", tool=tool, provider="anthropic", verdict="allow") == 3
    assert m.value("sidecar_tool_calls_total", tool=tool, provider="openai", verdict="allow") == 1
    assert m.value("sidecar_tool_calls_total", tool=tool, provider="anthropic", verdict="reject") == 3
    assert m.value("sidecar_tool_calls_total", tool=tool, provider="openai", verdict="reject") == 1
    assert m.total("sidecar_tool_calls_total") == 8

    assert m.value("sidecar_argument_rejections_total", tool=tool, problem="type") == 1
    assert m.value("sidecar_argument_rejections_total", tool=tool, problem="range") == 3
    assert m.total("sidecar_argument_rejections_total") == 4

    assert m.value("sidecar_repair_rounds_total", outcome="corrected") == 1
    assert m.value("sidecar_repair_rounds_total", outcome="exhausted") == 1

    assert m.value("sidecar_tool_results_total", tool=tool, outcome="ok") == 2
    assert m.value("sidecar_tool_results_total", tool=tool, outcome="error") == 1
    assert m.value("sidecar_tool_call_duration_seconds_count", tool=tool, outcome="ok") == 2
    assert m.value("sidecar_tool_call_duration_seconds_count", tool=tool, outcome="error") == 1
    assert 0 < m.total("sidecar_tool_call_duration_seconds_sum") < 60  # seconds
    assert m.value("sidecar_tool_call_duration_seconds_bucket", tool=tool, outcome="ok", le="+Inf") == 2

    assert m.value("sidecar_tool_replays_total", tool=tool, action="allowed") == 1
    assert m.value("sidecar_tool_replays_total", tool=tool, action="answered", default=0.0) == 0

    assert m.value("sidecar_tool_schema_changes_total", tool=tool) == 1

    # Upstream: Anthropic 2 (step 1) + 3 (step 3) + 2 (step 4) + 1 (step 5) + 1 (step 6);
    # OpenAI: step 2's request, its repair round and the follow-up.
    assert m.value("sidecar_upstream_request_duration_seconds_count", provider="anthropic", status="200") == 9
    assert m.value("sidecar_upstream_request_duration_seconds_count", provider="openai", status="200") == 3
    # Overhead: one observation per agent request.
    assert m.value("sidecar_proxy_overhead_seconds_count", provider="anthropic", stream="false") == 6
    assert m.value("sidecar_proxy_overhead_seconds_count", provider="anthropic", stream="true") == 1
    assert m.value("sidecar_proxy_overhead_seconds_count", provider="openai", stream="true") == 2

    # Policy (built-in minimal policy: allows): every call the arguments and replay guards
    # passed reaches it, once per check (steps 1, 2 corrected, 4, 5).
    allowed_checks = 4
    assert m.value("sidecar_policy_decisions_total", decision="allow") == allowed_checks
    for decision in ("deny", "approval", "error"):
        assert m.value("sidecar_policy_decisions_total", decision=decision) == 0
    # Evaluations time every phase: those calls, the tool_list phase of each of the 9 agent
    # requests, and the tool_result phase of the 3 results.
    assert m.value("sidecar_policy_evaluation_seconds_count", engine="embedded") == allowed_checks + 9 + 3
    # Approvals: nothing requires one in this workload; the series exist at 0.
    assert m.value("sidecar_approvals_pending") == 0
    for outcome in ("approved", "denied", "expired"):
        assert m.value("sidecar_approvals_total", outcome=outcome) == 0


async def test_openmetrics_when_the_scraper_asks(model: ScriptedModel, start_sidecar: StartSidecar) -> None:
    running = await start_sidecar()
    model.add_turns([Turn(tool_calls=[GOOD])])
    await AGENTS["anthropic"](running.proxy_url, TOOLS).ask(stream=False)
    m = await scrape(running.admin_url, openmetrics=True)
    assert m.content_type.startswith("application/openmetrics-text")
    assert m.text.endswith("# EOF\n")
    assert m.value("sidecar_tool_calls_total", tool="search_tickets", provider="anthropic", verdict="allow") == 1
    assert set(CONTRACT) <= set(m.families)
    # The plain text format drops `_created` series; OpenMetrics keeps them.
    assert "sidecar_tool_calls_created" in m.text
    assert "_created" not in (await scrape(running.admin_url)).text


async def test_tool_label_is_capped(model: ScriptedModel, start_sidecar: StartSidecar) -> None:
    running = await start_sidecar(telemetry={"tool_label_cap": 3})
    tools = {f"tool_{n}": {"type": "object", "properties": {}} for n in range(5)}
    model.add_turns(
        [
            Turn(tool_calls=[ToolCallSpec(f"tool_{n}", {}) for n in range(5)]),
            Turn(tool_calls=[ToolCallSpec("invented_tool", {})]),
            Turn(tool_calls=[ToolCallSpec("tool_0", {})]),
        ]
    )
    agent = AGENTS["chat"](running.proxy_url, tools)
    received = await agent.ask(stream=False)
    assert len(received.calls) == 5
    agent.answer({call_id: "ok" for call_id in received.call_ids})
    assert (await agent.ask(stream=False)).calls == [("tool_0", {})]

    m = await scrape(running.admin_url)
    assert m.label_values("tool") == {"tool_0", "tool_1", "tool_2", "other"}
    # tool_3, tool_4 (declared beyond the cap) and the invented tool all land in `other`.
    assert m.value("sidecar_tool_calls_total", tool="other", provider="openai", verdict="allow") == 2
    assert m.value("sidecar_tool_calls_total", tool="other", provider="openai", verdict="reject") == 1
    assert m.value("sidecar_tool_results_total", tool="other", outcome="ok") == 2


async def test_real_prometheus_scrapes_the_admin_port(
    model: ScriptedModel, start_sidecar: StartSidecar, tmp_path: Path
) -> None:
    binary = shutil.which("prometheus")
    assert binary is not None, (
        "the Debian `prometheus` server is required for this test (apt-get install -y prometheus); "
        "CI installs it in .ci/run"
    )
    running = await start_sidecar()
    model.add_turns([Turn(tool_calls=[GOOD])])
    await AGENTS["anthropic"](running.proxy_url, TOOLS).ask(stream=False)

    target = running.admin_url.removeprefix("http://")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: sidecar\n    scrape_interval: 1s\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    port = free_port()
    log = tmp_path / "prometheus.log"
    with log.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        result = await _wait_for_series(f"http://127.0.0.1:{port}", proc, log)
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
    (series,) = [r for r in result if r["metric"].get("verdict") == "allow"]
    assert series["metric"]["tool"] == "search_tickets"
    assert series["metric"]["provider"] == "anthropic"
    assert series["metric"]["job"] == "sidecar"
    assert float(series["value"][1]) == 1.0


async def _wait_for_series(prometheus_url: str, proc: asyncio.subprocess.Process, log: Path) -> list[dict[str, Any]]:
    """Poll the query API until the sidecar's series is there (Prometheus needs a scrape or two)."""
    query = f"{prometheus_url}/api/v1/query"
    async with aiohttp.ClientSession() as session:
        for _ in range(300):  # up to ~30 s: a generous bound, never a timing assertion
            if proc.returncode is not None:
                output = await asyncio.to_thread(log.read_text)
                pytest.fail(f"prometheus exited with {proc.returncode}: {output[-2000:]}")
            try:
                async with session.get(query, params={"query": "sidecar_tool_calls_total"}) as r:
                    if r.status == 200:
                        body = await r.json()
                        if body["status"] == "success" and body["data"]["result"]:
                            return list(body["data"]["result"])
            except aiohttp.ClientError:
                pass  # not listening yet
            await asyncio.sleep(0.1)
    pytest.fail("prometheus never returned sidecar_tool_calls_total")


async def test_operator_metrics_refusals_passthrough_build_and_process(model, sidecar) -> None:
    """What an operator needs beside the tool metrics: requests refused as a whole (by reason),
    pass-through requests (by path class), the version, and the process's CPU and memory."""
    from sidecar import __version__

    async with aiohttp.ClientSession() as http:
        big = b'{"model": "m", "messages": [], "pad": "' + b"x" * (33 * 1024 * 1024) + b'"}'
        async with http.post(f"{sidecar.proxy_url}/v1/messages", data=big) as r:
            assert r.status == 413
        deep = b"[" * 300 + b"]" * 300
        async with http.post(f"{sidecar.proxy_url}/v1/chat/completions", data=deep) as r:
            assert r.status == 400
        async with http.get(f"{sidecar.proxy_url}/v1/models", headers={"anthropic-version": "2023-06-01"}) as r:
            assert r.status == 200
    m = await scrape(sidecar.admin_url)
    assert m.value("sidecar_requests_refused_total", reason="size") == 1
    assert m.value("sidecar_requests_refused_total", reason="depth") == 1
    assert m.value("sidecar_requests_refused_total", reason="framing") == 0  # zero series exist for alerts
    assert m.value("sidecar_passthrough_requests_total", provider="anthropic", path_class="models") == 1
    assert m.value("sidecar_build_info", version=__version__) == 1
    assert m.value("process_resident_memory_bytes") > 10 * 1024 * 1024
    assert m.value("process_cpu_seconds_total") > 0
    assert m.value("sidecar_policy_stale_seconds") == 0
