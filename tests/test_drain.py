"""SIGTERM drains: /readyz turns 503 at once, a call held for approval is answered as deferred
(the model is told it is still pending), in-flight responses complete, and the process exits 0
within its grace."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import aiohttp

from sidecar.policy.sources import init_directory
from sidecar.scripted import ToolCallSpec, Turn
from tests.e2e.agents import AGENTS
from tests.helpers.process import running_sidecar

SCHEMA = {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}


async def test_sigterm_during_a_held_approval(model, tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    init_directory(policies)
    approval = {"always": True, "group": "finance-approvers"}
    (policies / "data.json").write_text(json.dumps({"sidecar": {"tools": {"refund": {"approval": approval}}}}))
    env = {
        "SIDECAR_APPROVALS__MODE": "hold",
        "SIDECAR_APPROVALS__HOLD_TIMEOUT_S": "300",
        "SIDECAR_SHUTDOWN_GRACE_S": "8",
        "SIDECAR_DRAIN_DELAY_S": "0.5",
    }
    model.add_turns([Turn(tool_calls=[ToolCallSpec("refund", {"amount": 500})]), Turn(text="It awaits approval.")])
    async with running_sidecar(model.url, env, tmp_path, "--policies", str(policies)) as sidecar:
        agent = AGENTS["anthropic"](sidecar.proxy, {"refund": SCHEMA}, {"X-Sidecar-Session": "drain"})
        asked = asyncio.ensure_future(agent.ask(False))
        async with aiohttp.ClientSession() as http:
            for _ in range(200):  # until the call is held
                async with http.get(sidecar.admin + "/metrics") as r:
                    if "sidecar_approvals_pending 1.0" in await r.text():
                        break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the call was never held")
            signalled = time.monotonic()
            sidecar.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.2)
            async with http.get(sidecar.admin + "/readyz") as r:
                assert r.status == 503 and (await r.json())["components"]["draining"]["ok"] is False
        got = await asyncio.wait_for(asked, 10)
        assert got.calls == []  # held, never delivered
        [told] = AGENTS["anthropic"].tool_outputs(model.model_requests[-1])
        assert (
            told["status"] == "approval_required"
            and "re-issue the identical call once it is approved" in (told["instructions"])
        )
        assert await asyncio.wait_for(sidecar.proc.wait(), 10) == 0
        elapsed = time.monotonic() - signalled
        print(f"drained in {elapsed:.2f} s")
        assert elapsed < 8  # within shutdown_grace_s
        events = [json.loads(line)["event"] for line in sidecar.log.read_text().splitlines() if line.startswith("{")]
        assert "drain" in events and "stopped" in events
