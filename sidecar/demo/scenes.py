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

# Appended by the replay work (issue 6): a side-effecting call the model makes twice.
_SEND_REFUND_NOTE = ToolCallSpec(
    "support_replies_send",
    {"ticket_id": "T-1042", "to": "ana@example.com", "body": "Your refund was issued today."},
)
SCENES.append(
    Scene(
        "Replay: the model sends the same reply twice; the second is answered from the ledger",
        "Tell the customer of T-1042 that the refund was issued.",
        [
            Turn(text="Sending the reply.", tool_calls=[_SEND_REFUND_NOTE]),
            Turn(text="Let me send that to be sure.", tool_calls=[_SEND_REFUND_NOTE]),
            Turn(text="The sidecar tells me this exact reply was already sent earlier, so I did not send it "
                      "again. The customer has been told."),
        ],
        "The agent ran the send once. The repeat never reached it: the model was told \"this was already "
        "done at …\" with the original call's time and result (status replayed).",
        settings={"tools": {"support_replies_send": {"side_effects": True}}},
    )
)

# Appended by the policy work (issue 4): a call the Rego policy denies, explained to the user.
_SEND_TO_BLOCKED_DOMAIN = ToolCallSpec(
    "support_replies_send",
    {"ticket_id": "T-1042", "to": "ana.refund@mailinator.com", "body": "Your refund was issued today."},
)
SCENES.append(
    Scene(
        "Policy: a reply to a blocked domain is denied, and the model tells the user why",
        "Send the refund confirmation for T-1042 to ana.refund@mailinator.com.",
        [
            Turn(text="Sending the confirmation.", tool_calls=[_SEND_TO_BLOCKED_DOMAIN]),
            Turn(text="I could not send it: policy refuses replies to mailinator.com addresses (a blocked "
                      "domain). Shall I send it to the customer's address on file instead?"),
        ],
        "The Rego policy (policies/data.json: blocked_recipients of support_replies_send) denied the call. "
        "The model got {status: denied, reasons: [...]} in a repair round and explained it; the send never ran.",
    )
)
