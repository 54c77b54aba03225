"""A scripted workload that makes the sidecar emit every series the dashboards read: through
the official SDKs, against the scripted model, with the shipped policy library.

One round: a valid call with an ok result and its identical repeat (answered from the
ledger), a call with an error result, bad arguments corrected in a repair round, bad
arguments until the rounds are exhausted, a policy denial, an approval requested, approved
and used, a streamed request, a request refused as a whole (too deep), a passthrough request,
and a request to an upstream that does not answer; replies carry usage (cache reads and writes
included), so tokens are attributed to the tools; the tool's declaration changes and changes
back (drift). Run it twice with a scrape in between, so that every counter increases between
two samples Prometheus holds.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import openai

from sidecar.app import Running
from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn
from tests.e2e.agents import AnthropicAgent, ChatAgent

TOKEN = "dashboard-admin-token-0123456789"
# The sidecar's line for TOKEN: an approver in the group the workload's policy names.
TOKEN_LINE = f"{TOKEN} alice support-leads"
SEND = "support_replies_send"
SEND_SCHEMA = {
    "type": "object",
    "properties": {
        "ticket_id": {"type": "string"},
        "to": {"type": "string"},
        "body": {"type": "string"},
    },
    "required": ["ticket_id", "to", "body"],
}
TOOLS = {SEND: SEND_SCHEMA, "support_tickets_search": {"type": "object", "properties": {"query": {"type": "string"}}}}
# The same tool with one more field: declaring it, then the original again, is two changes.
SEND_CHANGED = {**SEND_SCHEMA, "properties": {**SEND_SCHEMA["properties"], "cc": {"type": "string"}}}
# A reply whose prompt was partly read from and written to the provider's cache.
CACHED = {"cache_read_tokens": 120, "cache_write_tokens": 40}
# The tool the per-tool dashboard is checked for: the workload exercises every verdict on it.
FOCUS_TOOL = SEND


def _send(ticket: str, to: str = "ana@example.com") -> ToolCallSpec:
    return ToolCallSpec(SEND, {"ticket_id": ticket, "to": to, "body": "Hello"})


BAD = ToolCallSpec(SEND, {"ticket_id": 7, "to": "ana@example.com", "body": "Hello"})


class Workload:
    def __init__(self, model: ScriptedModel, running: Running) -> None:
        self.model = model
        self.running = running

    def _agent(self, session: str) -> AnthropicAgent:
        return AnthropicAgent(self.running.proxy_url, TOOLS, headers={"X-Sidecar-Session": session})

    async def run_round(self, number: int) -> None:
        prefix = f"dashboards-{number}"
        await self._valid_then_replayed(f"{prefix}-valid", f"T-{number}-1")
        await self._error_result(f"{prefix}-error", f"T-{number}-2")
        await self._repaired(f"{prefix}-repaired", f"T-{number}-3")
        await self._exhausted(f"{prefix}-exhausted")
        await self._denied(f"{prefix}-denied", f"T-{number}-4")
        await self._approved(f"{prefix}-approval", f"T-{number}-5")
        await self._refused_too_deep()
        await self._passthrough()
        await self._upstream_unreachable()
        await self._declaration_changes(f"{prefix}-drift")

    async def _valid_then_replayed(self, session: str, ticket: str) -> None:
        agent = self._agent(session)
        self.model.add_turns([Turn(tool_calls=[_send(ticket)])])
        got = await agent.ask(stream=False)
        assert got.calls == [(SEND, _send(ticket).arguments)]
        agent.answer({got.call_ids[0]: '{"status": "sent"}'})
        # The identical call again: side effects, so the model is answered from the ledger.
        self.model.add_turns([Turn(tool_calls=[_send(ticket)], usage=CACHED), Turn(text="It was already sent.")])
        got = await agent.ask(stream=True)
        assert got.calls == [] and "already sent" in got.text

    async def _error_result(self, session: str, ticket: str) -> None:
        agent = self._agent(session)
        self.model.add_turns([Turn(tool_calls=[_send(ticket)])])
        got = await agent.ask(stream=True)
        assert got.calls
        agent.history.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": got.call_ids[0], "content": "SMTP down", "is_error": True}
                ],
            }
        )
        self.model.add_turns([Turn(text="Sending failed.")])
        await agent.ask(stream=False)

    async def _repaired(self, session: str, ticket: str) -> None:
        agent = self._agent(session)
        self.model.add_turns([Turn(tool_calls=[BAD]), Turn(tool_calls=[_send(ticket)])])
        got = await agent.ask(stream=False)
        assert got.calls == [(SEND, _send(ticket).arguments)]
        agent.answer({got.call_ids[0]: '{"status": "sent"}'})
        self.model.add_turns([Turn(text="Done.")])
        await agent.ask(stream=False)

    async def _exhausted(self, session: str) -> None:
        self.model.add_turns([Turn(tool_calls=[BAD]) for _ in range(3)])
        got = await self._agent(session).ask(stream=True)
        assert got.calls == []

    async def _denied(self, session: str, ticket: str) -> None:
        self.model.add_turns([Turn(tool_calls=[_send(ticket, "x@mailinator.com")]), Turn(text="I cannot send that.")])
        got = await self._agent(session).ask(stream=False)
        assert got.calls == []

    async def _approved(self, session: str, ticket: str) -> None:
        agent = self._agent(session)
        outside = _send(ticket, "bob@outside.org")
        self.model.add_turns([Turn(tool_calls=[outside]), Turn(text="This reply awaits approval.")])
        got = await agent.ask(stream=False)
        assert got.calls == []
        agent.answer({})
        [approval] = [a for a in await self._admin("GET", "/approvals") if a["session"] == session]
        await self._admin("POST", f"/approvals/{approval['id']}/approve")
        self.model.add_turns([Turn(tool_calls=[outside])])
        got = await agent.ask(stream=False)
        assert got.calls == [(SEND, outside.arguments)]
        agent.answer({got.call_ids[0]: '{"status": "sent"}'})
        self.model.add_turns([Turn(text="Sent.")])
        await agent.ask(stream=False)

    async def _declaration_changes(self, session: str) -> None:
        for tools in ({**TOOLS, SEND: SEND_CHANGED}, TOOLS):
            self.model.add_turns([Turn(text="Noted.")])
            agent = AnthropicAgent(self.running.proxy_url, tools, headers={"X-Sidecar-Session": session})
            got = await agent.ask(stream=False)
            assert got.calls == []

    async def _admin(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            aiohttp.ClientSession() as session,
            session.request(method, self.running.admin_url + path, headers=headers, json=body) as response,
        ):
            assert response.status == 200, await response.text()
            data = await response.json()
        return data["approvals"] if method == "GET" else data

    async def _refused_too_deep(self) -> None:
        body = '{"model": "claude-test", "messages": ' + "[" * 400 + "]" * 400 + "}"
        headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.running.proxy_url + "/v1/messages", data=body, headers=headers) as response,
        ):
            assert response.status == 400

    async def _passthrough(self) -> None:
        headers = {"anthropic-version": "2023-06-01", "x-api-key": "sk-ant-test"}
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.running.proxy_url + "/v1/models", headers=headers) as response,
        ):
            await response.read()

    async def _upstream_unreachable(self) -> None:
        """The OpenAI upstream is a closed port: the agent gets the provider-shaped 502."""
        agent = ChatAgent(self.running.proxy_url, TOOLS)
        try:
            await agent.ask(stream=False)
        except openai.APIStatusError as exc:
            assert exc.status_code == 502
        else:
            raise AssertionError("a request to an unreachable upstream succeeded")
