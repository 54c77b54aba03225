"""Session identity (DESIGN.md: header, provider handle, user field, derived) and what a
session may share: a replay's remembered result goes to another request only when the session
is strong or the request's history carries the original call. No byte of one conversation's
tool result is ever sent upstream in another conversation's request.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

import pytest

from sidecar.app import Running
from sidecar.filters.policy import PolicyFilter
from sidecar.identity import DERIVED_CACHE_CHARS, derived, named, session_id
from sidecar.model import RequestView, SessionSource
from sidecar.scripted import ScriptedModel, ToolCallSpec, Turn
from tests.conftest import StartSidecar
from tests.e2e.agents import AGENTS, Agent, Received, ResponsesAgent
from tests.e2e.clients import anthropic_client, openai_client
from tests.helpers.ledger import SEND_SCHEMA, TOOLS, TRAITS, Capture

SEND = ToolCallSpec("support_replies_send", {"ticket_id": "T-1", "body": "Hello"})
SECRET = "SECRET-of-conversation-A-7f3a"
SENT_A = '{"status": "sent", "confirmation": "' + SECRET + '"}'


class StatelessResponsesAgent(ResponsesAgent):
    """Responses without server state (`store: false`, the whole history every turn)."""

    kind = "responses"

    async def ask(self, stream: bool) -> Received:
        async with openai_client(self.base_url, default_headers=self.headers) as client:
            response = await client.responses.create(
                model="gpt-test", input=self.history, tools=self.tools, store=False
            )
        items = [i for i in response.output if i.type == "function_call"]
        self.history += [i.model_dump(exclude_none=True) for i in response.output]
        calls = [(i.name, json.loads(i.arguments or "{}")) for i in items]
        self.last = Received(calls, [i.call_id for i in items], response.output_text, None, response)
        return self.last

    def answer(self, results: dict[str, str]) -> None:
        assert self.last is not None
        outputs = [{"type": "function_call_output", "call_id": i, "output": results[i]} for i in self.last.call_ids]
        self.history += outputs or [{"role": "user", "content": "thanks"}]


STATELESS_AGENTS: dict[str, type[Agent]] = {**AGENTS, "responses": StatelessResponsesAgent}
STATELESS = ["anthropic", "chat", "responses"]  # full history in every request: derived sessions


def _leaked(model: ScriptedModel, start: int) -> list[int]:
    """Positions of the upstream requests from `start` on whose bytes carry the secret."""
    return [n for n, r in enumerate(model.model_requests) if n >= start and SECRET.encode() in r.body]


async def _conversation_a(
    sidecar: Running, model: ScriptedModel, kind: str, headers: dict[str, str] | None = None
) -> Any:
    """Conversation A: SEND runs, its result (carrying the secret) goes back to the model."""
    agent = STATELESS_AGENTS[kind](sidecar.proxy_url, TOOLS, headers)
    model.add_turns([Turn(tool_calls=[SEND]), Turn(text="Sent.")])
    first = await agent.ask(False)
    assert first.calls == [("support_replies_send", {"ticket_id": "T-1", "body": "Hello"})]
    agent.answer({first.call_ids[0]: SENT_A})
    assert (await agent.ask(False)).text == "Sent."
    return agent


@pytest.mark.parametrize("kind", STATELESS)
async def test_derived_session_never_hands_a_result_to_another_conversation(
    start_sidecar: StartSidecar, model: ScriptedModel, kind: str
) -> None:
    sidecar = await start_sidecar(tools=TRAITS)
    a = await _conversation_a(sidecar, model, kind)

    # Conversation B begins exactly like A (one derived session), and the model makes A's call.
    b = STATELESS_AGENTS[kind](sidecar.proxy_url, TOOLS)
    start = len(model.model_requests)
    model.add_turns([Turn(tool_calls=[SEND]), Turn(text="It seems it was already sent.")])
    second = await b.ask(False)
    assert second.calls == []  # still refused: the session cannot tell the two apart
    told = STATELESS_AGENTS[kind].tool_outputs(model.model_requests[start + 1])[-1]
    assert told["status"] == "replayed" and told["result_shared"] is False
    assert "result" not in told and "original_call_id" not in told
    assert _leaked(model, start) == []

    # A itself, later: its history carries the call, so the model is given A's own result.
    a.answer({})
    start = len(model.model_requests)
    model.add_turns([Turn(tool_calls=[SEND]), Turn(text="Already sent.")])
    assert (await a.ask(False)).calls == []
    told = STATELESS_AGENTS[kind].tool_outputs(model.model_requests[start + 1])[-1]
    assert told["result"] == SENT_A


@pytest.mark.parametrize("kind", STATELESS)
async def test_strong_session_shares_the_remembered_result(
    start_sidecar: StartSidecar, model: ScriptedModel, kind: str
) -> None:
    """One header names one session: a new conversation in it gets the result of the first."""
    sidecar = await start_sidecar(tools=TRAITS)
    headers = {"X-Sidecar-Session": "ticket-T-1"}
    await _conversation_a(sidecar, model, kind, headers)
    b = STATELESS_AGENTS[kind](sidecar.proxy_url, TOOLS, headers)
    b.history = [{"role": "user", "content": "Another start entirely."}]
    start = len(model.model_requests)
    model.add_turns([Turn(tool_calls=[SEND]), Turn(text="Already sent.")])
    assert (await b.ask(False)).calls == []
    told = STATELESS_AGENTS[kind].tool_outputs(model.model_requests[start + 1])[-1]
    assert told["result"] == SENT_A and told["replayed"] is True


async def test_session_ids_are_used_whole(start_sidecar: StartSidecar, model: ScriptedModel) -> None:
    """Two header ids sharing their first 250 characters are two sessions (no replay across)."""
    sidecar = await start_sidecar(tools=TRAITS)
    prefix = "s" * 250
    for suffix in ("-a", "-b"):
        agent = AGENTS["anthropic"](sidecar.proxy_url, TOOLS, {"X-Sidecar-Session": prefix + suffix})
        model.add_turns([Turn(tool_calls=[SEND])])
        assert (await agent.ask(False)).calls == [("support_replies_send", {"ticket_id": "T-1", "body": "Hello"})]


def test_session_identity_order_and_whole_ids() -> None:
    long_a, long_b = "x" * 300 + "a", "x" * 300 + "b"
    view = RequestView(session_hint="alice", conversation="conv_1", session_seed="sys\x00hi")
    assert session_id({"X-Sidecar-Session": "run-7"}, "X-Sidecar-Session", view) == named(SessionSource.HEADER, "run-7")
    assert session_id({}, "X-Sidecar-Session", view).id == "conversation:conv_1"
    view.conversation = None
    assert session_id({}, "X-Sidecar-Session", view).id == "user:alice"
    view.session_hint = None
    derived = session_id({}, "X-Sidecar-Session", view)
    assert derived.source is SessionSource.DERIVED and not derived.strong
    assert named(SessionSource.HEADER, long_a) != named(SessionSource.HEADER, long_b)
    assert named(SessionSource.USER, long_a) == named(SessionSource.USER, long_a)
    assert len(named(SessionSource.USER, long_a).id) < 100  # hashed whole, not cut
    assert named(SessionSource.THREAD, "msg_1").id == "thread:msg_1"


# -- conversations the provider holds: alike after turn one, still two sessions ------------------


async def _thread_turns(sidecar: Running, model: ScriptedModel, result: str) -> tuple[list[int], str]:
    """A thread: a greeting, then "send it" (SEND delivered), then the tool's result. Returns
    the positions of its upstream requests and the session its calls were judged in."""
    client = anthropic_client(sidecar.proxy_url)
    tools = [{"name": "support_replies_send", "input_schema": SEND_SCHEMA}]
    thread = client.beta.messages.thread(model="claude-test", max_tokens=256, system="Support agent.", tools=tools)
    start = len(model.model_requests)
    model.add_turns([Turn(text="Hello!"), Turn(tool_calls=[SEND]), Turn(text="Done.")])
    await thread.send({"role": "user", "content": "Please help."})
    second = await thread.send({"role": "user", "content": "Send it."})
    assert [b.name for b in second.content if b.type == "tool_use"] == ["support_replies_send"]
    call_id = next(b.id for b in second.content if b.type == "tool_use")
    third = await thread.send(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": result}]}
    )
    assert third.content[0].text == "Done."
    return list(range(start, len(model.model_requests))), second.id


async def test_two_threads_alike_after_turn_one_share_no_replay_and_no_result(
    start_sidecar: StartSidecar, model: ScriptedModel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    sidecar = await start_sidecar(tools=TRAITS)
    capture = Capture()
    sidecar.sidecar.add_filter(capture)
    await _thread_turns(sidecar, model, SENT_A)
    positions, _ = await _thread_turns(sidecar, model, '{"status": "sent"}')  # its SEND is not a replay
    assert _leaked(model, positions[0]) == []
    sessions = [c.exchange.session_info for c in capture.checks]
    assert [s.source for s in sessions] == [SessionSource.THREAD, SessionSource.THREAD]
    assert sessions[0].id != sessions[1].id
    # The policy is told where the session came from.
    policy = next(f for f in sidecar.sidecar.filters if isinstance(f, PolicyFilter))
    document = await policy.input_for(capture.checks[1])
    assert document["session"]["source"] == "thread" and document["session"]["id"] == sessions[1].id
    # ...and so is every request log line.
    sidecar.sidecar.settle_ended()  # request lines are written in batches
    lines = [r.fields for r in caplog.records if getattr(r, "event", None) == "request"]
    assert len(lines) == 6 and {line["session_source"] for line in lines} == {"thread"}


async def test_two_conversations_alike_share_no_replay_and_no_result(
    start_sidecar: StartSidecar, model: ScriptedModel
) -> None:
    sidecar = await start_sidecar(tools=TRAITS)
    client = openai_client(sidecar.proxy_url)
    tools: Any = [{"type": "function", "name": "support_replies_send", "parameters": SEND_SCHEMA}]
    starts = []
    for result in (SENT_A, '{"status": "sent"}'):
        conversation = await client.conversations.create()
        starts.append(len(model.model_requests))
        model.add_turns([Turn(tool_calls=[SEND]), Turn(text="Done.")])
        args: dict[str, Any] = {"model": "gpt-test", "conversation": conversation.id, "tools": tools}
        first = await client.responses.create(input="Send it.", instructions="Support agent.", **args)
        [call] = [i for i in first.output if i.type == "function_call"]  # delivered in each
        output = [{"type": "function_call_output", "call_id": call.call_id, "output": result}]
        assert (await client.responses.create(input=output, **args)).output_text == "Done."
    assert _leaked(model, starts[1]) == []


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_chain_session_is_its_root_and_keeps_the_first_turns_calls(
    start_sidecar: StartSidecar, model: ScriptedModel, stream: bool
) -> None:
    """A chain's first turn cannot know it starts a chain: its call is carried into the chain's
    session, so its result is matched and its replay in a later turn is answered."""
    sidecar = await start_sidecar(tools=TRAITS)
    capture = Capture()
    sidecar.sidecar.add_filter(capture)
    agent = AGENTS["responses"](sidecar.proxy_url, TOOLS)
    model.add_turns([Turn(tool_calls=[SEND])])
    first = await agent.ask(stream)
    root = agent.previous_response_id
    agent.answer({first.call_ids[0]: SENT_A})
    model.add_turns([Turn(tool_calls=[SEND]), Turn(text="Already sent.")])
    assert (await agent.ask(stream)).calls == []
    [told] = AGENTS["responses"].tool_outputs(model.model_requests[2])
    assert told["result"] == SENT_A
    assert [r.known for r in capture.results] == [True]
    assert capture.checks[-1].exchange.session_info == named(SessionSource.CHAIN, str(root))


def test_a_derived_session_is_hashed_once_per_seed_and_always_the_same() -> None:
    seed = "You are a careful agent.\x00" + "fix the parser " * 200
    first = derived(seed)
    assert first.source is SessionSource.DERIVED
    assert first.id == "derived:" + hashlib.sha256(seed.encode()).hexdigest()[:32]
    assert derived(seed[:-1] + seed[-1]) is first  # an equal seed, another string: remembered
    assert derived(seed + "!").id != first.id
    # A seed longer than a tenth of the bound is hashed every time, to the same id.
    long_seed = "x" * (DERIVED_CACHE_CHARS // 10 + 1)
    again = derived(long_seed)
    assert again == derived(long_seed) and again is not derived(long_seed)
    assert again.id == "derived:" + hashlib.sha256(long_seed.encode()).hexdigest()[:32]
