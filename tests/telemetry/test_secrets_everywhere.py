"""Known secrets sent through every path the sidecar writes to, then every output grepped: log
lines, the rejection log, the decision log, admin API bodies, traces and metrics. One
redactor covers them all: keys, key = value text, URLs with a password and no user, bearer
tokens, provider keys, and upstream error bodies."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from pathlib import Path

import aiohttp
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sidecar.scripted import ToolCallSpec, Turn, UpstreamError
from sidecar.telemetry.logs import configure_logging
from tests.e2e.agents import AGENTS
from tests.helpers.ports import free_port

API_KEY = "sk-ant-api03-APIKEYSECRET0123456789abcdef"
REDIS_PASSWORD = "REDISPASS0123456789"
ARG_PASSWORD = "ARGPASS0123456789"
RAW_PASSWORD = "RAWPASS0123456789"
BEARER = "BEARERTOKEN0123456789abcdef"
UPSTREAM_LEAK = "sk-proj-UPSTREAMLEAK0123456789abcdef"
SECRETS = [API_KEY, REDIS_PASSWORD, ARG_PASSWORD, RAW_PASSWORD, BEARER, UPSTREAM_LEAK]

SCHEMA = {
    "type": "object",
    "properties": {"user": {"type": "integer"}, "password": {"type": "string"}, "note": {"type": "string"}},
    "required": ["user"],
}


async def _get(url: str, headers: dict[str, str] | None = None) -> str:
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as response:
        return await response.text()


async def test_no_secret_reaches_any_output(start_sidecar, model, otlp, tmp_path: Path) -> None:
    stderr = io.StringIO()
    handler = configure_logging("debug", stderr)
    rejections, decisions = tmp_path / "rejections.jsonl", tmp_path / "decisions.jsonl"
    try:
        sidecar = await start_sidecar(
            rejection_log={"path": str(rejections)},
            policy={"decision_log": {"path": str(decisions)}},
            # A state backend whose URL carries a password and that is down: its errors are logged,
            # counted and reported on /readyz and /v1/status.
            state={"backend": "redis", "redis_url": f"redis://:{REDIS_PASSWORD}@127.0.0.1:{free_port()}/0"},
            telemetry={"otlp_endpoint": otlp.url, "capture_content": True},
            admin_token="admin-token-0123456789",
        )
        spans = InMemorySpanExporter()
        assert sidecar.sidecar.tracing is not None
        sidecar.sidecar.tracing.provider.add_span_processor(SimpleSpanProcessor(spans))
        # Chat Completions: arguments travel as text, so unparseable JSON reaches the sidecar.
        agent = AGENTS["chat"](
            sidecar.proxy_url, {"login": SCHEMA}, {"X-Sidecar-Session": "secrets", "x-api-key": API_KEY}
        )
        bad = {"user": "bob", "password": ARG_PASSWORD, "note": f"Authorization: Bearer {BEARER}"}
        raw = ToolCallSpec("login", {}, raw_arguments='{"user": 1, "password": "' + RAW_PASSWORD + '"')
        model.add_turns(
            [
                # Refused twice (a password among bad arguments, then unparseable JSON), and the
                # last repair round is answered by an error body quoting a key.
                Turn(text="Logging in.", tool_calls=[ToolCallSpec("login", bad)]),
                Turn(tool_calls=[raw]),
                Turn(error=UpstreamError(500, message=f"internal error near {UPSTREAM_LEAK}")),
            ]
        )
        await agent.ask(False)
        await sidecar.sidecar.rejections.aflush()
        await asyncio.to_thread(sidecar.sidecar.tracing.force_flush)
        handler.flush()  # every line the log writer holds
        outputs = {
            "logs": stderr.getvalue(),
            "rejection log": rejections.read_text(),
            "decision log": decisions.read_text() if decisions.exists() else "",
            "/v1/status": await _get(sidecar.admin_url + "/v1/status"),
            "/readyz": await _get(sidecar.admin_url + "/readyz"),
            "/v1/tools": await _get(sidecar.admin_url + "/v1/tools"),
            "/approvals": await _get(
                sidecar.admin_url + "/approvals", {"Authorization": "Bearer admin-token-0123456789"}
            ),
            "/metrics": await _get(sidecar.admin_url + "/metrics"),
            "traces": json.dumps([dict(s.attributes or {}) for s in spans.get_finished_spans()])
            + json.dumps([s.status.description for s in spans.get_finished_spans()]),
        }
    finally:
        logging.getLogger("sidecar").removeHandler(handler)
    # The paths were really taken: there is something to grep in each.
    assert "[REDACTED]" in outputs["rejection log"] and outputs["rejection log"].count('"tool":"login"') == 2
    assert '"last_error":"redis look_up_call: ' in outputs["/readyz"]  # the replay guard's lookup failed
    assert "repair round" in outputs["logs"] and "[REDACTED]" in outputs["logs"]
    assert "gen_ai.tool.call.arguments" in outputs["traces"]
    leaks = {name: [s for s in SECRETS if s in text] for name, text in outputs.items()}
    assert {name: found for name, found in leaks.items() if found} == {}
