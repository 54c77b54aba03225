"""The demo's scenes: each shows one capability, with the script the model follows."""

from __future__ import annotations

from dataclasses import dataclass, field

from sidecar.scripted import ToolCallSpec, Turn


@dataclass
class Scene:
    title: str
    user: str
    turns: list[Turn]
    explain: str
    settings: dict[str, object] = field(default_factory=dict)


SEARCH_OK = ToolCallSpec("support_tickets_search", {"query": "refund", "status": "OPEN", "limit": 5})

SCENES: list[Scene] = [
    Scene(
        "A normal turn: nothing to change, the sidecar only watches",
        "Find open refund tickets",
        [Turn(text="Let me search.", tool_calls=[SEARCH_OK]), Turn(text="Ticket T-1042 is waiting for a refund.")],
        "Every call was checked against its declared schema and allowed.",
    ),
    Scene(
        "Argument lockdown: a sloppy call is refused, repaired by the model, then allowed",
        "Any open refund tickets? Show 10.",
        [
            Turn(text="Searching.", tool_calls=[ToolCallSpec(
                "support_tickets_search", {"query": "refund", "status": "open", "limit": "10"})]),
            Turn(text="Corrected.", tool_calls=[ToolCallSpec(
                "support_tickets_search", {"query": "refund", "status": "OPEN", "limit": 10})]),
            Turn(text="One open refund ticket: T-1042."),
        ],
        "The agent never saw the call with \"open\" and \"10\": the model got a structured error and fixed it.",
    ),
]
