"""A tiny support agent: the kind of code teams run unchanged behind the sidecar (only its
base URL points at the sidecar). It prints nothing: the runner tells the story from the wire."""

from __future__ import annotations

import json
from typing import Any

import anthropic

TOOLS: list[dict[str, Any]] = [
    {
        "name": "support_tickets_search",
        "description": "Search support tickets",
        "input_schema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "description": "Free-text search"},
                "status": {"type": "string", "enum": ["OPEN", "PENDING", "CLOSED"]},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "Max results"},
            },
            "required": ["query"],
        },
    },
    {
        "name": "support_tickets_get_context",
        "description": "Customer and history for one ticket",
        "input_schema": {
            "type": "object",
            "properties": {"ticket_id": {"type": "string", "pattern": "^T-[0-9]+$"}},
            "required": ["ticket_id"],
        },
    },
    {
        "name": "support_replies_send",
        "description": "Send a reply to the customer of a ticket",
        "input_schema": {
            "type": "object",
            "properties": {
                "ticket_id": {"type": "string", "pattern": "^T-[0-9]+$"},
                "to": {"type": "string", "format": "email"},
                "body": {"type": "string", "minLength": 1},
            },
            "required": ["ticket_id", "to", "body"],
        },
    },
    {
        "name": "payments_refund",
        "description": "Refund an amount to the customer of a ticket",
        "input_schema": {
            "type": "object",
            "properties": {
                "ticket_id": {"type": "string", "pattern": "^T-[0-9]+$"},
                "amount": {"type": "number", "exclusiveMinimum": 0},
            },
            "required": ["ticket_id", "amount"],
        },
    },
]


def run_tool(name: str, arguments: dict[str, Any]) -> str:
    """The agent's own tools, faked: the demo is about what happens before they run."""
    if name == "support_tickets_search":
        return json.dumps({"tickets": [{"id": "T-1042", "subject": "Refund not received"}]})
    if name == "support_tickets_get_context":
        return json.dumps({"customer": "ana@example.com", "orders": 3})
    if name == "payments_refund":
        return json.dumps({"status": "refunded", "amount": arguments.get("amount")})
    return json.dumps({"status": "sent", "to": arguments.get("to")})


class SupportAgent:
    def __init__(self, base_url: str, session: str) -> None:
        self.client = anthropic.AsyncAnthropic(
            base_url=base_url,
            api_key="sk-ant-demo-not-a-real-key",
            max_retries=0,
            default_headers={"X-Sidecar-Session": session},
        )
        self.messages: list[dict[str, Any]] = []

    async def turn(self, user: str, max_steps: int = 4) -> None:
        """One user request, with the usual tool loop until the model stops calling tools."""
        self.messages.append({"role": "user", "content": user})
        for _ in range(max_steps):
            async with self.client.messages.stream(
                model="claude-demo",
                max_tokens=512,
                tools=TOOLS,  # type: ignore[arg-type]
                messages=self.messages,  # type: ignore[arg-type]
            ) as stream:
                message = await stream.get_final_message()
            blocks = [b.model_dump(exclude_none=True) for b in message.content]
            self.messages.append({"role": "assistant", "content": blocks})
            results = []
            for block in message.content:
                if block.type == "tool_use":
                    output = run_tool(block.name, dict(block.input))
                    results.append({"type": "tool_result", "tool_use_id": block.id, "content": output})
            if not results:
                return
            self.messages.append({"role": "user", "content": results})

    async def close(self) -> None:
        await self.client.close()
