"""Structured logs: one JSON line per event, correlated with traces, never carrying a secret."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn
from sidecar.telemetry import batched
from sidecar.telemetry.logs import LOGGER_NAME, WRITER, configure_logging
from tests.conftest import StartSidecar
from tests.e2e.agents import AGENTS
from tests.e2e.clients import API_KEY_ANTHROPIC, API_KEY_OPENAI
from tests.helpers.otlp import StartTraced

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{TRACE_ID}-b7ad6b7169203331-01"
SCHEMA = {"type": "object", "properties": {"limit": {"type": "integer"}}, "required": ["limit"]}
TOOLS = {"list_orders": SCHEMA}


class _CurrentStderr(io.TextIOBase):
    """Writes to whatever `sys.stderr` is at write time (pytest swaps it between phases)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


@pytest.fixture
def sidecar_logs(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> Iterator[pytest.LogCaptureFixture]:
    """JSON lines on stderr (as `sidecar run` does), plus caplog on the `sidecar` logger at DEBUG.

    Depends on capfd so the handler writes to the captured stderr."""
    logger = logging.getLogger(LOGGER_NAME)
    handler = configure_logging("debug", stream=_CurrentStderr())
    logger.addHandler(caplog.handler)
    caplog.handler.setLevel(logging.DEBUG)
    yield caplog
    logger.removeHandler(caplog.handler)
    logger.removeHandler(handler)
    logger.propagate = True
    logger.setLevel(logging.NOTSET)


async def test_json_lines_with_trace_ids_and_no_secrets(
    model: ScriptedModel,
    start_traced: StartTraced,
    sidecar_logs: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    traced = await start_traced(capture_content=True)
    url = traced.running.proxy_url
    headers = {"traceparent": TRACEPARENT}
    for kind in ("anthropic", "chat", "responses"):
        model.add_turns(
            [
                Turn(tool_calls=[ToolCallSpec("list_orders", {"limit": "5"})]),
                Turn(tool_calls=[ToolCallSpec("list_orders", {"limit": 5})]),
                Turn(text="Here."),
            ]
        )
        agent = AGENTS[kind](url, TOOLS, headers=headers)
        received = await agent.ask(stream=kind == "chat")
        agent.answer({received.call_ids[0]: '{"orders": []}'})
        await agent.ask(stream=False)
    await traced.running.sidecar.rejections.aflush()
    traced.running.sidecar.settle_ended()  # request lines are written in batches

    assert WRITER.flush()  # every line the log writer holds is written
    out, err = capfd.readouterr()
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert lines, "the sidecar logged nothing on stderr"
    assert all(line.startswith("{") for line in err.splitlines() if line.strip() and "Transient" not in line)
    events = {}
    for line in lines:
        events.setdefault(line["event"], []).append(line)
    assert len(events["request"]) == 6
    assert len(events["verdict"]) == 3
    assert len(events["repair_round"]) == 3
    for event in ("request", "verdict", "repair_round"):
        for line in events[event]:
            assert line["trace_id"] == TRACE_ID, line
            assert len(line["span_id"]) == 16
            assert {"time", "level", "logger"} <= set(line)
    request_spans = {format(s.context.span_id, "016x") for s in traced.named("chat ")}
    assert {line["span_id"] for line in events["request"]} == request_spans

    rejection_log = (tmp_path / "rejections.jsonl").read_text()
    assert len(rejection_log.splitlines()) == 3
    everything = "\n".join(
        [out, err, rejection_log, sidecar_logs.text, *(repr(r.__dict__) for r in sidecar_logs.records)]
    )
    for key in (API_KEY_ANTHROPIC, API_KEY_OPENAI):
        assert key not in everything
        assert key[-12:] not in everything  # not even a tail of it
    # The keys did reach the provider: the sidecar forwards credentials, it just never logs them.
    sent = json.dumps([r.headers for r in model.requests])
    assert API_KEY_ANTHROPIC in sent and API_KEY_OPENAI in sent


async def test_a_stopped_sidecar_has_written_every_request_line(
    model: ScriptedModel,
    start_sidecar: StartSidecar,
    sidecar_logs: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Request lines are written in batches (sidecar/telemetry/batched.py): stopping the
    sidecar writes the ones still waiting before anything else closes."""
    monkeypatch.setattr(batched, "BATCH_S", 600.0)  # no batch timer fires during the test
    running = await start_sidecar()
    running.sidecar.metrics.requests_in_flight += 5  # as if busy: the lines wait for a batch
    model.add_turns([Turn(text="One."), Turn(text="Two.")])
    agent = AGENTS["anthropic"](running.proxy_url, TOOLS)
    await agent.ask(stream=False)
    await agent.ask(stream=True)
    assert not _request_lines(sidecar_logs)  # waiting for their batch
    await running.stop()
    lines = _request_lines(sidecar_logs)
    assert [line["stream"] for line in lines] == [False, True]
    assert {line["outcome"] for line in lines} == {"done"}


def _request_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [r.fields for r in caplog.records if getattr(r, "event", None) == "request"]


async def test_an_idle_sidecar_writes_the_request_line_right_after_the_answer(
    model: ScriptedModel,
    start_sidecar: StartSidecar,
    sidecar_logs: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No other request in flight: the line is not held for a batch (which would run inside
    a later request and delay it)."""
    monkeypatch.setattr(batched, "BATCH_S", 600.0)  # only the idle path can write it
    running = await start_sidecar()
    model.add_turns([Turn(text="One.")])
    await AGENTS["anthropic"](running.proxy_url, TOOLS).ask(stream=False)
    for _ in range(50):  # the next turns of the loop, well short of any timer
        if _request_lines(sidecar_logs):
            break
        await asyncio.sleep(0.001)
    assert [line["outcome"] for line in _request_lines(sidecar_logs)] == ["done"]
    assert running.sidecar.metrics.requests_in_flight == 0  # the server counted it in and out
