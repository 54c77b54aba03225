"""The demo's MCP scene: the same tools, reached over MCP, under the same policy.

An MCP client (the official `mcp` SDK) talks to a scripted MCP server (also the official SDK)
through the same sidecar as the model scenes. No model takes part: what the client sends is
what an agent framework sends when it executes tools through MCP. Told, like the other scenes,
from what crossed the wire (the client's results and the server's executions), and tallied into
the same summary that `/v1/status` must agree with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sidecar.demo.narrate import STATUS_WORDS, VERDICT_WORDS, Narrator, Verdict, line

if TYPE_CHECKING:
    from sidecar.demo.runner import DemoContext
    from sidecar.scripted.mcp import ScriptedMcpServer

TITLE = "MCP: the agent's tools over MCP, checked by the same policy before they reach the server"
EXPLAIN = (
    "The MCP client got the model path's answers from the same policy files: the hidden tool was not "
    "listed, the refund ran once and its repeat was answered from the ledger, the blocked domain was "
    "denied. Refused calls never reached the MCP server; the client got a CallToolResult with isError "
    "carrying the same structured error a model gets."
)


@dataclass(frozen=True, slots=True)
class McpStep:
    tool: str
    arguments: dict[str, Any]


STEPS = [
    McpStep("payments_refund", {"ticket_id": "T-2001", "amount": 25}),
    McpStep("payments_refund", {"ticket_id": "T-2001", "amount": 25}),
    McpStep("support_replies_send", {"ticket_id": "T-2001", "to": "eve@guerrillamail.com", "body": "Refunded."}),
]


def _text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def play_mcp_scene(number: int, demo: DemoContext, narrator: Narrator, server: ScriptedMcpServer) -> None:
    from mcp import Client

    say = demo.say
    say(f"\n== {number}. {TITLE}")
    url = f"{demo.sidecar.proxy_url}/mcp/support"
    say(line("client", f"connects to {url} (the sidecar), which forwards to {server.url}"))
    async with Client(url, mode="2026-07-28") as client:
        listed = [tool.name for tool in (await client.list_tools()).tools]
        hidden = sorted(set(server.tool_names) - set(listed))  # what the server offers, the client never saw
        say(line("client", f"tools/list → {', '.join(listed)}"))
        if hidden:
            say(line("sidecar", f"hidden by the policy: {', '.join(hidden)} (not listed, refused if called)"))
        for step in STEPS:
            say(line("client", f"tools/call {step.tool} {json.dumps(step.arguments)}"))
            ran_before = len(server.executions)
            result = await client.call_tool(step.tool, step.arguments)
            _tell(narrator, step.tool, result, len(server.executions) > ran_before)
    say(line("why", EXPLAIN))


def _tell(narrator: Narrator, tool: str, result: Any, ran: bool) -> None:
    text = _text(result)
    payload: dict[str, Any] | None = None
    if result.is_error:
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        payload = parsed if isinstance(parsed, dict) and parsed.get("status") in STATUS_WORDS else None
    if payload is None:
        narrator.tally[(tool, Verdict.ALLOW)] += 1
        narrator.say(line("sidecar", f"{VERDICT_WORDS[Verdict.ALLOW]}: {tool} reaches the MCP server"))
        narrator.say(line("server", f"runs {tool} → {text}" if ran else f"{tool} → {text}"))
        return
    verdict, words = STATUS_WORDS[str(payload["status"])]
    narrator.tally[(tool, verdict)] += 1
    reasons = "; ".join(str(r) for r in payload.get("reasons") or [])
    narrator.say(line("sidecar", f"{words}: {reasons}"))
    narrator.say(line("", "the MCP server never sees this call: the client gets the structured error (isError)"))
