"""What the agent reads after repair rounds is one natural assistant turn (docs/architecture.md):
the preamble it was given, then the last round's calls; text written in answer to errors it
never saw is dropped, the model's answer when it stops calling is kept after a blank line, and
sidecar text is set apart from model text. Streamed and whole replies agree."""

from __future__ import annotations

import pytest

from sidecar.scripted import ToolCallSpec, Turn
from tests.e2e.agents import AGENTS

SCHEMA = {"type": "object", "properties": {"limit": {"type": "integer"}}, "required": ["limit"]}
TOOLS = {"support_tickets_search": SCHEMA}
BAD = ToolCallSpec("support_tickets_search", {"limit": "10"})
GOOD = ToolCallSpec("support_tickets_search", {"limit": 10})
CASES = [(kind, stream) for kind in AGENTS for stream in (False, True)]
IDS = [f"{kind}-{'stream' if stream else 'whole'}" for kind, stream in CASES]

# (the model's turns, what the agent's text must be, the calls it gets)
SCENARIOS = {
    "corrected": (
        [Turn(text="Searching.", tool_calls=[BAD]), Turn(text="Sorry, fixed the limit.", tool_calls=[GOOD])],
        "Searching.",
        [("support_tickets_search", {"limit": 10})],
    ),
    "abandoned": (
        [Turn(text="Searching.", tool_calls=[BAD]), Turn(text="I cannot search with that limit.")],
        "Searching.\n\nI cannot search with that limit.",
        [],
    ),
    "exhausted": (
        [Turn(text="Searching.", tool_calls=[BAD]), Turn(text="Trying again.", tool_calls=[BAD])],
        None,  # checked below: the preamble, a blank line, then the sidecar's explanation
        [],
    ),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize(("kind", "stream"), CASES, ids=IDS)
async def test_one_natural_turn(start_sidecar, model, kind, stream, scenario) -> None:
    sidecar = await start_sidecar(enforcement={"max_repair_rounds": 1})
    turns, text, calls = SCENARIOS[scenario]
    model.add_turns(turns)
    got = await AGENTS[kind](sidecar.proxy_url, TOOLS, {"X-Sidecar-Session": f"{kind}-{stream}"}).ask(stream)
    assert got.calls == calls
    if text is not None:
        assert got.text == text
    else:
        assert got.text.startswith("Searching.\n\n[sidecar] These tool calls were not run:")
        assert "Trying again." not in got.text


@pytest.mark.parametrize("kind", list(AGENTS))
async def test_streamed_and_whole_replies_read_the_same(start_sidecar, model, kind) -> None:
    sidecar = await start_sidecar(enforcement={"max_repair_rounds": 1})
    texts = []
    for stream in (False, True):
        model.add_turns(SCENARIOS["abandoned"][0])
        agent = AGENTS[kind](sidecar.proxy_url, TOOLS, {"X-Sidecar-Session": f"same-{stream}"})
        texts.append((await agent.ask(stream)).text)
    assert texts[0] == texts[1]
