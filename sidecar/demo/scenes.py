"""The demo's scenes: each shows one capability, with the script the model follows."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sidecar.scripted import ToolCallSpec, Turn

if TYPE_CHECKING:
    from sidecar.app import Running


@dataclass
class Scene:
    title: str
    user: str
    turns: list[Turn]
    explain: str
    settings: dict[str, object] = field(default_factory=dict)


@dataclass
class HumanScene(Scene):
    """`then` lists (step, next user message): the runner calls the step with the running
    sidecar and the printer (a person acting between turns), then runs the next user turn."""

    then: list[tuple[Callable[[Running, Callable[[str], None]], Awaitable[None]], str]] = field(default_factory=list)


SEARCH_OK = ToolCallSpec("support_tickets_search", {"query": "refund", "status": "OPEN", "limit": 5})

_REFUND = ToolCallSpec("payments_refund", {"ticket_id": "T-1042", "amount": 40})
_SEND_OUTSIDE = ToolCallSpec(
    "support_replies_send",
    {"ticket_id": "T-1042", "to": "bob@partner.example.org", "body": "Your refund was approved."},
)
_DEMO_ADMIN_TOKEN = "demo-admin-token-not-a-secret"
_SEND_TO_BLOCKED_DOMAIN = ToolCallSpec(
    "support_replies_send",
    {"ticket_id": "T-1042", "to": "ana.refund@mailinator.com", "body": "Your refund was issued today."},
)


async def _support_lead_approves(sidecar: Running, say: Callable[[str], None]) -> None:
    """What a support lead does: list pending approvals, approve the one for this call."""
    import aiohttp

    auth = {"Authorization": f"Bearer {_DEMO_ADMIN_TOKEN}"}
    async with aiohttp.ClientSession(headers=auth) as http:
        async with http.get(f"{sidecar.admin_url}/approvals") as response:
            [waiting] = (await response.json())["approvals"]
        say(
            f"  support lead → sidecar approvals list: {waiting['id']} {waiting['tool']} "
            f"to {waiting['arguments']['to']} ({waiting['group']})"
        )
        body = {"by": "lee", "comment": "partner address, fine"}
        async with http.post(f"{sidecar.admin_url}/approvals/{waiting['id']}/approve", json=body) as response:
            decided = await response.json()
        say(f"  support lead → sidecar approvals approve {decided['id']} --by lee → {decided['status']}")


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
            Turn(
                text="Searching.",
                tool_calls=[
                    ToolCallSpec("support_tickets_search", {"query": "refund", "status": "open", "limit": "10"})
                ],
            ),
            Turn(
                text="Corrected.",
                tool_calls=[ToolCallSpec("support_tickets_search", {"query": "refund", "status": "OPEN", "limit": 10})],
            ),
            Turn(text="One open refund ticket: T-1042."),
        ],
        'The agent never saw the call with "open" and "10": the model got a structured error and fixed it.',
    ),
    Scene(
        "Replay: the model issues the same refund twice; the second is answered from the ledger",
        "Refund the 40 EUR of T-1042.",
        [
            Turn(text="Issuing the refund.", tool_calls=[_REFUND]),
            Turn(text="Let me issue that to be sure.", tool_calls=[_REFUND]),
            Turn(
                text="The sidecar tells me this exact refund was already issued earlier, so I did not issue "
                "it again. The customer has been refunded once."
            ),
        ],
        'The agent ran the refund once. The repeat never reached it: the model was told "this was already '
        "done at …\" with the original call's time and result (status replayed).",
    ),
    HumanScene(
        "Human approval: every customer reply waits for a support lead, then goes through once",
        "Tell bob@partner.example.org that the refund for T-1042 was approved.",
        [
            Turn(text="Sending the reply.", tool_calls=[_SEND_OUTSIDE]),
            Turn(text="Every customer reply awaits approval by support-leads. I will send it once it is approved."),
            Turn(text="It is approved now; sending.", tool_calls=[_SEND_OUTSIDE]),
            Turn(text="Done: Bob has been told."),
        ],
        "The first call never reached the agent: the model was told it awaits approval (with the id). "
        "After the support lead approved that exact call on the admin port, the identical call went "
        "through, once; a model cannot approve anything itself.",
        settings={
            "admin_token": _DEMO_ADMIN_TOKEN,
        },
        then=[(_support_lead_approves, "It is approved, please send it now.")],
    ),
    Scene(
        "Policy: a reply to a blocked domain is denied, and the model tells the user why",
        "Send the refund confirmation for T-1042 to ana.refund@mailinator.com.",
        [
            Turn(text="Sending the confirmation.", tool_calls=[_SEND_TO_BLOCKED_DOMAIN]),
            Turn(
                text="I could not send it: policy refuses replies to mailinator.com addresses (a blocked "
                "domain). Shall I send it to the customer's address on file instead?"
            ),
        ],
        "The Rego policy (example:support, data.json: blocked_recipients of support_replies_send) denied the call. "
        "The model got {status: denied, reasons: [...]} in a repair round and explained it; the send never ran.",
    ),
]
