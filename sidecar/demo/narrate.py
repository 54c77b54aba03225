"""Tells a scene as it happened on the wire, in order: what the model asked for, the sidecar's
verdict on each call (before the model's next move), what the agent ran, what the model did next.

Everything is read from the requests the scripted model received: a repair round is a request
the sidecar sent on the agent's behalf, carrying its structured error for each refused call;
an allowed call shows up as the agent's own tool result in its next request. So the story and
the verdict tally come from the traffic, independently of the sidecar's own counters, which
is what lets the demo (and its test) check that `/v1/status` agrees with the scenes.
"""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sidecar.scripted import RecordedRequest, Turn

Say = Callable[[str], None]


class Verdict(StrEnum):
    """The verdict names of `/v1/status` (`calls_by_verdict`)."""

    ALLOW = "allow"
    REJECT = "reject"
    DENY = "deny"
    APPROVAL = "approval"
    REPLAY = "replay"


# The structured error's `status` (DESIGN.md) → the verdict it reports, in plain words.
STATUS_WORDS: dict[str, tuple[Verdict, str]] = {
    "invalid_arguments": (Verdict.REJECT, "refused: arguments"),
    "unknown_tool": (Verdict.REJECT, "refused: undeclared tool"),
    "denied": (Verdict.DENY, "denied by policy"),
    "approval_required": (Verdict.APPROVAL, "waiting for approval"),
    "replayed": (Verdict.REPLAY, "answered from the ledger"),
    "not_run": (Verdict.ALLOW, "not run: another call in the same message was refused"),
}
VERDICT_WORDS: dict[Verdict, str] = {
    Verdict.ALLOW: "allowed",
    Verdict.REJECT: "refused: arguments",
    Verdict.DENY: "denied by policy",
    Verdict.APPROVAL: "waiting for approval",
    Verdict.REPLAY: "answered from the ledger",
}
WIDTH = 110
LABEL = 9  # "  sidecar  …": the speaker column


def line(speaker: str, text: str) -> str:
    """`  speaker  text`, wrapped under the text column so nothing is cut."""
    indent = " " * (LABEL + 2)
    first = f"  {speaker:<{LABEL - 1}} "
    return textwrap.fill(text, WIDTH, initial_indent=first, subsequent_indent=indent, break_on_hyphens=False)


def _args(arguments: Any) -> str:
    return json.dumps(arguments, ensure_ascii=False)


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return str(content)


def _sidecar_error(content: Any) -> dict[str, Any] | None:
    """The sidecar's structured error in a tool result, or None for the agent's own output."""
    try:
        payload = json.loads(_content_text(content))
    except ValueError:
        return None
    if isinstance(payload, dict) and payload.get("status") in STATUS_WORDS:
        return payload
    return None


def _detail(payload: dict[str, Any]) -> str:
    errors = payload.get("errors") or []
    if errors:
        return "; ".join(f"{e.get('field') or '(call)'}: {e.get('problem')}" for e in errors)
    text = "; ".join(str(r) for r in payload.get("reasons") or [])
    if payload.get("approval_id"):
        text += f" (approval {payload['approval_id']})"
    return text


@dataclass
class Narrator:
    """Narrates the requests of one sidecar run scene by scene, and tallies each call's verdict."""

    say: Say
    tally: Counter[tuple[str, Verdict]] = field(default_factory=Counter)
    repair_rounds: int = 0

    def narrate(self, requests: Sequence[RecordedRequest], turns: Sequence[Turn], first: int) -> None:
        """Requests[first:] of this scene; request i was answered by turns[i]."""
        for index in range(first, len(requests)):
            body = requests[index].json if isinstance(requests[index].json, dict) else {}
            messages = body.get("messages") or []
            repair = self._inputs(messages)
            if index < len(turns):
                self._model(turns[index], repair)

    def _inputs(self, messages: list[dict[str, Any]]) -> bool:
        """What this request brings the model; True if the sidecar sent it (a repair round)."""
        if not messages:
            return False
        last = messages[-1]
        content = last.get("content")
        if isinstance(content, str):
            self.say(line("user", f'"{content}"'))
            return False
        calls = {}
        if len(messages) >= 2 and isinstance(messages[-2].get("content"), list):
            calls = {b.get("id"): b for b in messages[-2]["content"] if b.get("type") == "tool_use"}
        repair = False
        for block in content or []:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            call = calls.get(block.get("tool_use_id"), {})
            name = str(call.get("name", "?"))
            payload = _sidecar_error(block.get("content"))
            if payload is None:  # the agent's own result: the call had reached it
                self.tally[(name, Verdict.ALLOW)] += 1
                self.say(line("sidecar", f"{VERDICT_WORDS[Verdict.ALLOW]}: {name} reaches the agent"))
                self.say(line("agent", f"runs {name} → {_content_text(block.get('content'))}"))
                continue
            repair = True
            verdict, words = STATUS_WORDS[str(payload["status"])]
            self.tally[(name, verdict)] += 1
            self.say(line("sidecar", f"{words}: {_detail(payload)}"))
        if repair:
            self.repair_rounds += 1
            self.say(
                line("", "the agent never sees this call: the sidecar sends the model this answer (a repair round)")
            )
        return repair

    def _model(self, turn: Turn, repair: bool) -> None:
        """The model's answer; after a repair round, what it does with the sidecar's answer."""
        prefix = "(repair round) " if repair else ""
        if turn.text:
            self.say(line("model", f'{prefix}"{turn.text}"'))
        for call in turn.tool_calls:
            self.say(line("model", f"{prefix}calls {call.name} {_args(call.arguments)}"))

    def verdicts(self) -> dict[str, dict[str, int]]:
        """{tool: {verdict: count}}, the shape of `/v1/status` `tools.*.calls_by_verdict`."""
        out: dict[str, dict[str, int]] = {}
        for (tool, verdict), count in sorted(self.tally.items()):
            out.setdefault(tool, {})[verdict.value] = count
        return out
