"""Runs the scenes against a scripted model through a real sidecar, printing what happens."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from sidecar.app import Running, start
from sidecar.config import Settings, load_settings
from sidecar.demo.agent import SupportAgent
from sidecar.demo.scenes import SCENES, Scene
from sidecar.scripted import ScriptedModel

# The support example of the policy library packaged with the sidecar (works from a wheel).
_POLICIES = "example:support"


def _say(line: str) -> None:
    print(line, flush=True)


def _rejections(path: Path, seen: int) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines[seen:]]


async def _scene(number: int, scene: Scene, model: ScriptedModel, sidecar: Running, log: Path) -> None:
    _say(f"\n== {number}. {scene.title}")
    model.reset()
    model.add_turns(scene.turns)
    before = len(_rejections(log, 0))
    agent = SupportAgent(sidecar.proxy_url, _say, session=f"demo-{number}")
    try:
        await agent.turn(scene.user)
        for step, user in getattr(scene, "then", ()):  # HumanScene: a person acts between turns
            await step(sidecar, _say)
            await agent.turn(user)
    finally:
        await agent.close()
    await sidecar.sidecar.rejections.aflush()
    for record in _rejections(log, before):
        problems = "; ".join(f"{e['field']}: {e['problem']}" for e in record.get("errors", [])) or "; ".join(
            record.get("reasons", [])
        )
        _say(
            f"  sidecar saw: {record['tool']} {json.dumps(record['arguments'])} → {record.get('status')} "
            f"({problems}) → {record['action']}"
        )
    rounds = sum(1 for r in model.requests if r.protocol) - len([m for m in agent.messages if m["role"] == "assistant"])
    if rounds > 0:
        _say(f"  sidecar held {rounds} repair round(s) with the model on the agent's behalf")
    _say(f"  → {scene.explain}")


async def run_demo(verbose: bool = False, rejection_log: str | None = None, decision_log: str | None = None) -> int:
    """`rejection_log`: keep the log there (for `sidecar rejections top/promote`), not in a temp dir.
    `decision_log`: also record every policy decision with its input there (`sidecar policy replay`)."""
    with tempfile.TemporaryDirectory(prefix="sidecar-demo-") as tmp:
        log = Path(rejection_log) if rejection_log else Path(tmp) / "rejections.jsonl"
        async with ScriptedModel([]) as model:
            settings = load_settings(
                flags={
                    "listen": "127.0.0.1:0",
                    "admin_listen": "127.0.0.1:0",
                    "anthropic_upstream": model.url,
                    "openai_upstream": model.url,
                    "rejection_log": {"path": str(log)},
                    "policies": _POLICIES,
                    "policy": {"decision_log": {"path": decision_log}},
                },
                environ={},
            )
            if verbose:
                from sidecar.telemetry.logs import configure_logging

                configure_logging("info")
            sidecar = await start(settings)
            _say(f"scripted model on {model.url}; sidecar proxy on {sidecar.proxy_url}, admin on {sidecar.admin_url}")
            try:
                for number, scene in enumerate(SCENES, 1):
                    if not scene.settings:
                        await _scene(number, scene, model, sidecar, log)
                        continue
                    # A scene with its own settings gets its own sidecar (same model, same log).
                    own = await start(Settings.model_validate({**settings.model_dump(), **scene.settings}))
                    try:
                        await _scene(number, scene, model, own, log)
                    finally:
                        await own.stop()
                summary = sidecar.sidecar.metrics.status_summary()
                _say("\n== What the sidecar counted (GET /v1/status on the admin port)")
                for tool, stats in sorted(summary.get("tools", {}).items()):
                    verdicts = ", ".join(f"{k} {v}" for k, v in sorted(stats["calls_by_verdict"].items()))
                    p50 = stats["latency_seconds"]["p50"]
                    latency = f"{p50 * 1000:.1f} ms" if p50 is not None else "n/a"
                    _say(
                        f"  {tool}: calls {stats['calls']} ({verdicts}); results {stats['results']}; "
                        f"p50 tool latency {latency}; replays {stats['replays']}; repairs {stats['repairs']}"
                    )
            finally:
                await sidecar.stop()
    sys.stdout.flush()
    return 0
