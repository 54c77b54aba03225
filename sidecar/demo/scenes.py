"""The demo's scenes: each shows one capability, with the script the model follows."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sidecar.scripted import ToolCallSpec, Turn

if TYPE_CHECKING:
    from sidecar.demo.runner import DemoContext


# A person acting between two user turns (the support lead approving), given the demo's
# context: `run(*argv)` runs a real `sidecar …` command and prints it with its output.
Step = Callable[["DemoContext"], Awaitable[None]]


@dataclass
class Scene:
    title: str
    user: str
    turns: list[Turn]
    explain: str
    # (step, next user message): the runner runs the step, then the next user turn.
    then: list[tuple[Step, str]] = field(default_factory=list)


SEARCH_OK = ToolCallSpec("support_tickets_search", {"query": "refund", "status": "OPEN", "limit": 5})

_REFUND = ToolCallSpec("payments_refund", {"ticket_id": "T-1042", "amount": 40})
_SEND_OUTSIDE = ToolCallSpec(
    "support_replies_send",
    {"ticket_id": "T-1042", "to": "bob@partner.example.org", "body": "Your refund was approved."},
)
_SEND_TO_BLOCKED_DOMAIN = ToolCallSpec(
    "support_replies_send",
    {"ticket_id": "T-1042", "to": "ana.refund@mailinator.com", "body": "Your refund was issued today."},
)


async def _support_lead_approves(demo: DemoContext) -> None:
    """What a support lead does, with the real CLI: list what waits, approve this one call."""
    listing = await demo.run("approvals", "list")
    waiting = [line.split()[0] for line in listing.splitlines()[1:] if line.startswith("apr_")]
    if len(waiting) != 1:
        raise RuntimeError(f"expected one pending approval, the list shows {len(waiting)}")
    await demo.run("approvals", "approve", waiting[0], "--comment", "partner address, fine")


SCENES: list[Scene] = [
    Scene(
        "A normal turn: nothing to change, the sidecar only watches",
        "Find open refund tickets",
        [Turn(text="Let me search.", tool_calls=[SEARCH_OK]), Turn(text="Ticket T-1042 is waiting for a refund.")],
        "The call matched the JSON Schema the agent declared for the tool, so it passed untouched.",
    ),
    Scene(
        "Argument lockdown: a sloppy call is refused, the model corrects it",
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
        'The agent only saw the corrected call: the model was told which fields were wrong ("open" is not '
        '"OPEN", "10" is a string) and what was expected, and fixed both.',
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
        "payments_refund has side effects (example:support data.json), so an identical repeat in the same "
        "session never reaches the agent: the model gets the first call's time and result instead. One refund "
        "was issued.",
    ),
    Scene(
        "Human approval: every customer reply waits for a support lead, then goes through once",
        "Tell bob@partner.example.org that the refund for T-1042 was approved.",
        [
            Turn(text="Sending the reply.", tool_calls=[_SEND_OUTSIDE]),
            Turn(text="Every customer reply awaits approval by support-leads. I will send it once it is approved."),
            Turn(text="It is approved now; sending.", tool_calls=[_SEND_OUTSIDE]),
            Turn(text="Done: Bob has been told."),
        ],
        "The support example asks a support lead to approve every customer reply (data.json: approval of "
        "support_replies_send). Only an admin token in that group can approve, with the real CLI above, and the "
        "approver recorded is the token's identity (lee), not anything the CLI says; the approval covers exactly "
        "this call (session, tool, arguments) and lets it through once.",
        then=[(_support_lead_approves, "It is approved, please send it now.")],
    ),
    Scene(
        "Policy: an email to a blocked domain is denied, and the model tells the user why",
        "Send the refund confirmation for T-1042 to ana.refund@mailinator.com.",
        [
            Turn(text="Sending the confirmation.", tool_calls=[_SEND_TO_BLOCKED_DOMAIN]),
            Turn(
                text="I could not send it: policy refuses replies to mailinator.com addresses (a blocked "
                "domain). Shall I send it to the customer's address on file instead?"
            ),
        ],
        "The support example (example:support, data.json: blocked_recipients) refuses replies to blocked "
        "domains. The model got the reason and told the user; nothing was sent.",
    ),
]
