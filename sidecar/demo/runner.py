"""Runs every scene through ONE real sidecar in front of a scripted model, tells each scene from
the wire (sidecar/demo/narrate.py), and ends with what the sidecar counted, read over HTTP from
its own `/v1/status`, checked against the verdicts the scenes showed."""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from sidecar.app import Running, start
from sidecar.cli_output import Align, table
from sidecar.config import load_settings
from sidecar.demo.agent import SupportAgent
from sidecar.demo.mcp_scene import play_mcp_scene
from sidecar.demo.narrate import LABEL, VERDICT_WORDS, Narrator, Say, Verdict, line
from sidecar.demo.scenes import SCENES, Scene
from sidecar.scripted import ScriptedModel

# The policies every scene runs under: the support example of the policy library packaged with
# the sidecar (data.json: which tools have side effects, blocked domains, who approves what).
# The one place the demo chooses it; works from a wheel as from a checkout.
POLICIES = "example:support"
# Not a secret: it only opens this demo's admin port on loopback, for the approvals CLI.
ADMIN_TOKEN = "demo-admin-token-not-a-secret"
# Who that token is on the sidecar (`TOKEN NAME GROUP,GROUP`): the support lead, in the group the
# support example's data.json asks to approve customer replies. The CLI sends only the token;
# the name the sidecar records (and the CLI prints) comes from here.
APPROVER = "lee"
APPROVER_GROUPS = "support-leads"


def _print(line: str) -> None:
    print(line, flush=True)


def _cli_command() -> list[str]:
    """The `sidecar` a user of this installation would type (the console script beside python)."""
    script = Path(sys.executable).with_name("sidecar")
    return [str(script)] if script.exists() else [sys.executable, "-m", "sidecar.cli"]


@dataclass
class DemoContext:
    """What a scene's human step can use: the running sidecar and the real CLI."""

    sidecar: Running
    say: Say
    commands: list[str] = field(default_factory=list)

    async def run(self, *argv: str) -> str:
        """Run `sidecar ARGV --admin-url URL` as a user would, print it (copyable) and its output."""
        args = [*argv, "--admin-url", self.sidecar.admin_url]
        shown = f"SIDECAR_ADMIN_TOKEN={ADMIN_TOKEN} sidecar {shlex.join(args)}"
        self.commands.append(shown)
        self.say(f"  {'lead':<8} $ {shown}")  # whole, never cut: it is there to be copied
        process = await asyncio.create_subprocess_exec(
            *_cli_command(),
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "SIDECAR_ADMIN_TOKEN": ADMIN_TOKEN},
        )
        out, err = await process.communicate()
        text = out.decode()
        for output in text.splitlines():
            self.say(f"{' ' * (LABEL + 2)}{output}")  # the CLI's own output, as the user would see it
        if process.returncode != 0:
            raise RuntimeError(f"`sidecar {shlex.join(args)}` failed ({process.returncode}): {err.decode().strip()}")
        return text


@dataclass
class DemoResult:
    """What the scenes showed (tallied from the wire) and what `/v1/status` reported."""

    shown: dict[str, dict[str, int]]
    repair_rounds_shown: int
    status: dict[str, Any]
    commands: list[str]

    @property
    def counted(self) -> dict[str, dict[str, int]]:
        # Tools the agent declared but the model never called are listed too (their lint, drift).
        tools = self.status.get("tools") or {}
        return {name: dict(stats["calls_by_verdict"]) for name, stats in tools.items() if stats.get("calls_by_verdict")}

    @property
    def repair_rounds_counted(self) -> int:
        return sum((self.status.get("repair_rounds") or {}).values())

    @property
    def agrees(self) -> bool:
        return self.counted == self.shown and self.repair_rounds_counted == self.repair_rounds_shown


async def _scene(number: int, scene: Scene, model: ScriptedModel, demo: DemoContext, narrator: Narrator) -> None:
    demo.say(f"\n== {number}. {scene.title}")
    model.reset()
    model.add_turns(scene.turns)
    agent = SupportAgent(demo.sidecar.proxy_url, session=f"demo-{number}")
    seen = 0
    try:
        for step, user in [(None, scene.user), *scene.then]:
            if step is not None:
                await step(demo)
            await agent.turn(user)
            narrator.narrate(model.model_requests, scene.turns, seen)
            seen = len(model.model_requests)
    finally:
        await agent.close()
    demo.say(line("why", scene.explain))


async def _status(admin_url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http, http.get(f"{admin_url}/v1/status") as response:
        response.raise_for_status()
        status: dict[str, Any] = await response.json()
        return status


def _summary(result: DemoResult, admin_url: str, say: Say) -> None:
    say(f"\n== What the sidecar counted: GET {admin_url}/v1/status (what `sidecar status` prints)")
    tools = sorted(result.counted)
    rows = [[VERDICT_WORDS[v], *(result.counted[t].get(v.value, 0) for t in tools)] for v in Verdict]
    rows.append(["calls", *(sum(result.counted[t].values()) for t in tools)])
    text = table(["", *tools], rows, [Align.LEFT] + [Align.RIGHT] * len(tools))
    for row in text.splitlines():
        say(f"  {row}")
    say(f"  repair rounds held on the agent's behalf: {result.repair_rounds_counted}")
    if result.agrees:
        say("  These are exactly the verdicts and repair rounds the scenes above showed.")
    else:
        say(
            f"  MISMATCH: the scenes showed {result.shown} and {result.repair_rounds_shown} repair rounds; "
            f"/v1/status counted {result.counted} and {result.repair_rounds_counted}"
        )


def _what_next(say: Say, rejection_log: Path | None) -> None:
    say("\n== What next")
    say("  1. Put it in front of your own agent (no code change, only the base URL):")
    say(f"       sidecar run --policies {POLICIES}   # proxy 127.0.0.1:8080, admin 127.0.0.1:9477")
    say("       export ANTHROPIC_BASE_URL=http://127.0.0.1:8080")
    say("       export OPENAI_BASE_URL=http://127.0.0.1:8080/v1")
    say("     Start with SIDECAR_ENFORCEMENT__MODE=observe to only log what it would refuse.")
    say("  2. See what it counts: sidecar status; curl -s http://127.0.0.1:9477/metrics | grep ^sidecar_")
    say("  3. Edit a policy: copy out the one this demo ran with `sidecar policy init DIR --example support`,")
    say("     change DIR/data.json (blocked domains, approval groups, side effects), check it with")
    say("     `sidecar policy test DIR`, run it with `sidecar run --policies DIR` (reloaded on every edit).")
    if rejection_log is not None:
        say(f"  4. What was refused, grouped: sidecar rejections top {rejection_log}")


async def play(
    say: Say = _print, rejection_log: str | None = None, verbose: bool = False, decision_log: str | None = None
) -> DemoResult:
    """Every scene through one sidecar; returns what was shown and what was counted.

    `decision_log`: also record every policy decision with its input there (`sidecar policy replay`)."""
    with tempfile.TemporaryDirectory(prefix="sidecar-demo-") as tmp:
        log = Path(rejection_log) if rejection_log else Path(tmp) / "rejections.jsonl"
        from sidecar.scripted.mcp import ScriptedMcpServer

        async with ScriptedModel([]) as model, ScriptedMcpServer() as mcp_server:
            settings = load_settings(
                flags={
                    "listen": "127.0.0.1:0",
                    "admin_listen": "127.0.0.1:0",
                    "anthropic_upstream": model.url,
                    "openai_upstream": model.url,
                    "rejection_log": {"path": str(log)},
                    "policies": POLICIES,
                    "admin_token": f"{ADMIN_TOKEN} {APPROVER} {APPROVER_GROUPS}",
                    "policy": {"decision_log": {"path": decision_log}},
                    "mcp": {"servers": {"support": mcp_server.url}},
                },
                environ={},
            )
            if verbose:
                from sidecar.telemetry.logs import configure_logging

                configure_logging("info")
            sidecar = await start(settings)
            say("sidecar demo: a support agent (official Anthropic SDK) and a scripted model, through one real sidecar")
            say(f"  scripted model  {model.url}")
            say(f"  MCP server      {mcp_server.url}  (official MCP SDK; at {{proxy}}/mcp/support)")
            say(f"  sidecar proxy   {sidecar.proxy_url}  (the agent's ANTHROPIC_BASE_URL)")
            say(f"  sidecar admin   {sidecar.admin_url}  (/metrics, /v1/status, /approvals)")
            say(f"  policy          {POLICIES}")
            say("Each scene: what the model asks for, the sidecar's verdict, then what the model does next.")
            demo = DemoContext(sidecar, say)
            narrator = Narrator(say)
            try:
                for number, scene in enumerate(SCENES, 1):
                    await _scene(number, scene, model, demo, narrator)
                await play_mcp_scene(len(SCENES) + 1, demo, narrator, mcp_server)
                await sidecar.sidecar.rejections.aflush()
                status = await _status(sidecar.admin_url)
                result = DemoResult(narrator.verdicts(), narrator.repair_rounds, status, demo.commands)
            finally:
                await sidecar.stop()
        _summary(result, sidecar.admin_url, say)
        _what_next(say, Path(rejection_log) if rejection_log else None)
    return result


async def run_demo(verbose: bool = False, rejection_log: str | None = None, decision_log: str | None = None) -> int:
    """`sidecar demo`: exit 1 if the counters disagree with what the scenes showed."""
    try:
        result = await play(rejection_log=rejection_log, verbose=verbose, decision_log=decision_log)
    except RuntimeError as exc:  # a CLI step that failed: say so, no traceback
        print(f"sidecar demo: {exc}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    return 0 if result.agrees else 1
