"""What a provider holds between turns, and the agent's next turn must agree with.

Three APIs keep the conversation at the provider, so a later request carries only what is new:

- Anthropic message threads (`thread: {type: create}`, then `{type: continue,
  previous_message_id}`): a `continue` carries neither `system` nor `tools`. The sidecar
  remembers per thread what it was created with (the tools as they went upstream, the system)
  and per message the calls delivered in it, so a continuation's calls are checked against the
  thread's tools and its tool results matched to their calls.
- Responses `previous_response_id` chains (`store`): each response is kept by id.
- OpenAI conversations (`conversation` on /v1/responses): the conversation holds every item.

The sidecar's edits must stay consistent with what the provider holds:

- calls the sidecar removed from a reply (blocked, withdrawn) are still in the provider's copy,
  so the next turn must answer them: their outputs are remembered (`on_checked`) and added to
  the agent's next request (`on_request`): by turn id for chains and threads, by conversation;
- a stream keeps the id it announced first, while a repair round produced a newer message or
  response: the next turn must continue from the newer one (`on_delivered` remembers the alias,
  `on_request` follows it). A whole reply carries the newer id itself;
- the session (DESIGN.md): a thread is one session named by its root message, a chain by its
  root response, a conversation by its id, unless the session header names one. A chain's first
  turn cannot know it starts a chain: its calls are recorded under the session it had, and are
  carried into the chain's session when the chain's second turn arrives (`_carry_root_calls`).

First in the chain: the session and declarations it restores are the ones every later filter
works with. Best-effort: the memo is in the state store (counted when it fails); a lost entry
makes the provider refuse the agent's next turn, or the sidecar refuse a thread's calls as
undeclared (a visible error), never lets a call through unchecked.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson

from sidecar.dialects.base import as_list
from sidecar.exchange.filters import Filter
from sidecar.exchange.state import Action, CallCheck, Exchange, ExchangeKey
from sidecar.identity import call_key, named
from sidecar.model import NOT_RUN_PAYLOAD, EchoedCall, Reply, SessionSource, ThreadMode, ToolCall
from sidecar.state import CallRecord, HeldCall, HeldState, StateStore, StateUnavailable
from sidecar.state.continuations import Continuation, Continuations, conversation_key, thread_key, turn_key

log = logging.getLogger("sidecar.conversation")


class HeldKind(StrEnum):
    THREAD = "thread"  # an Anthropic message thread
    CHAIN = "chain"  # a Responses chain (`store`, with or without `previous_response_id`)
    CONVERSATION = "conversation"  # an OpenAI conversation


@dataclass(slots=True)
class _Held:
    """Per exchange: which provider-held conversation it is part of, and what it learnt."""

    kind: HeldKind | None = None
    root: str | None = None  # the thread's / chain's root id, once known
    first: str | None = None  # id of the upstream's first reply
    last: str | None = None  # id of the latest reply (a repair round's)
    withheld: dict[str, str] = field(default_factory=dict)  # outputs of calls removed from the reply
    carried: bool = False  # this request carries a conversation's withheld outputs


_HELD: ExchangeKey[_Held] = ExchangeKey("conversation.held")


def _arguments(canonical: str) -> Any:
    with contextlib.suppress(orjson.JSONDecodeError):
        return orjson.loads(canonical)
    return canonical


class ProviderStateFilter(Filter):
    name = "conversation"

    def __init__(self, continuations: Continuations, ledger: StateStore | None = None) -> None:
        self.continuations = continuations
        self.ledger = ledger

    # -- the agent's request -----------------------------------------------------------------

    async def on_request(self, ex: Exchange) -> None:
        view, held = ex.view, ex.setdefault(_HELD, _Held)
        if view.conversation and ex.dialect.server_side_state:
            held.kind = HeldKind.CONVERSATION
            state = await self.continuations.get(conversation_key(view.conversation))
            if state is not None and state.withheld:
                ex.request = ex.model_dialect.add_withheld_outputs(ex.request, state.withheld)
                held.carried = True
        elif view.thread is not None:
            held.kind = HeldKind.THREAD
            if view.thread.mode is ThreadMode.CONTINUE and view.thread.previous_message_id:
                await self._continue_thread(ex, held, view.thread.previous_message_id)
        elif ex.dialect.server_side_state and view.store:
            held.kind = HeldKind.CHAIN
            if view.previous_response_id:
                await self._continue_chain(ex, held, view.previous_response_id)

    async def _follow(self, ex: Exchange, held: _Held, asked: str) -> Continuation:
        """The turn the agent continues from: its root, its withheld outputs added."""
        found = await self.continuations.resolve(asked)
        held.root = found.root
        if found.outputs:
            ex.request = ex.model_dialect.add_withheld_outputs(ex.request, found.outputs)
        return found

    async def _continue_thread(self, ex: Exchange, held: _Held, asked: str) -> None:
        found = await self._follow(ex, held, asked)
        if found.response_id != asked:
            thread = {"type": ThreadMode.CONTINUE.value, "previous_message_id": found.response_id}
            ex.request = {**ex.request, "thread": thread}
        created = await self.continuations.get(thread_key(found.root))
        if created is not None and created.tools is not None:
            # Checked against the thread's tools (a `continue` carries none).
            ex.view.declarations = ex.model_dialect.declarations({"tools": created.tools})
        # The previous turn's calls are the thread's: its results are matched to them.
        ex.view.echoed_calls.extend(EchoedCall(c.id, c.tool, _arguments(c.arguments)) for c in found.calls)
        self._name_session(ex, SessionSource.THREAD, found.root)

    async def _continue_chain(self, ex: Exchange, held: _Held, asked: str) -> None:
        found = await self._follow(ex, held, asked)
        if found.response_id != asked:
            ex.request = {**ex.request, "previous_response_id": found.response_id}
        self._name_session(ex, SessionSource.CHAIN, found.root)
        if found.known and found.session and asked == found.root:
            await self._carry_root_calls(ex, found)

    @staticmethod
    def _name_session(ex: Exchange, source: SessionSource, root: str) -> None:
        """The provider handle names the session, unless the session header does."""
        if ex.session_source is not SessionSource.HEADER:
            ex.set_session(named(source, root))

    async def _carry_root_calls(self, ex: Exchange, found: Continuation) -> None:
        """A chain's second turn: its first turn's calls, recorded under the session that turn
        had, join the chain's session (same call, same delivery time, its replay key rebuilt),
        so their results are matched and their replays caught from here on."""
        earlier, session = found.session, ex.session
        if self.ledger is None or not earlier or earlier == session:
            return
        for call in found.calls:
            try:
                if await self.ledger.get_call(session, call.id) is not None:
                    continue
                first = await self.ledger.get_call(earlier, call.id)
                if first is None:
                    continue
                key = call_key(session, call.tool, call.arguments.encode())
                await self.ledger.record_call(
                    CallRecord(session, call.id, call.tool, first.args_hash, key, first.delivered_at)
                )
                if first.result is not None and first.result_at is not None:
                    is_error = bool(first.result_is_error)
                    await self.ledger.record_result(session, call.id, first.result, is_error, first.result_at)
            except StateUnavailable as exc:  # counted by the store; the chain's replays then start later
                log.warning("could not carry call %s into the chain's session: %s", call.id, exc)
                return

    async def on_upstream(self, ex: Exchange, status: int | None, seconds: float) -> None:
        held = ex.get(_HELD)
        if held is not None and held.carried and status == 200 and ex.view.conversation:
            held.carried = False  # the provider accepted the answers: they are the conversation's now
            await self.continuations.forget(conversation_key(ex.view.conversation))

    # -- the model's replies -------------------------------------------------------------------

    async def on_reply(self, ex: Exchange, reply: Reply) -> None:
        held = ex.setdefault(_HELD, _Held)
        response_id = ex.model_dialect.response_id(reply)
        if held.first is None:
            held.first = response_id
            thread = ex.view.thread
            if held.kind is HeldKind.THREAD and thread is not None and thread.mode is ThreadMode.CREATE:
                # The thread is named by its first message: known now, before any call is judged.
                held.root = response_id
                if response_id:
                    self._name_session(ex, SessionSource.THREAD, response_id)
        held.last = response_id

    async def on_checked(self, ex: Exchange, checks: list[CallCheck]) -> None:
        """A turn removed from the agent's view is still the provider's: remember its answers."""
        held = ex.get(_HELD)
        if held is None or held.kind is None:
            return
        if not any(c.action in (Action.BLOCKED, Action.WITHDRAWN) for c in checks):
            return
        withheld: dict[str, str] = {}
        for c in checks:
            payload = c.verdict.model_payload() if not c.verdict.allowed else NOT_RUN_PAYLOAD
            answer = ex.model_dialect.withheld_output(c.call, payload)  # in kind; none for server calls
            if answer is not None:
                withheld[c.call.id] = answer
        held.withheld = withheld

    async def on_delivered(self, ex: Exchange, reply: Reply, calls: list[ToolCall]) -> None:
        held = ex.get(_HELD)
        if held is None or held.kind is None:
            return
        if held.kind is HeldKind.CONVERSATION:
            if held.withheld and ex.view.conversation:
                await self.continuations.put(conversation_key(ex.view.conversation), HeldState(withheld=held.withheld))
            return
        shown = ex.model_dialect.response_id(reply)
        last = held.last or shown
        if not shown or not last:
            return
        root = held.root or shown
        delivered = [HeldCall(c.id, c.name, c.canonical_arguments.decode()) for c in calls]
        state = HeldState(root=root, withheld=held.withheld, calls=delivered)
        if held.kind is HeldKind.CHAIN and held.root is None:
            # A chain's first turn (or a turn no chain follows): only what a continuation needs.
            if not (delivered or held.withheld or shown != last):
                return
            state.session = ex.session
        await self.continuations.put(turn_key(last), state)
        if shown != last:
            await self.continuations.put(turn_key(shown), HeldState(root=root, continue_from=last))
        thread = ex.view.thread
        if held.kind is HeldKind.THREAD and thread is not None and thread.mode is ThreadMode.CREATE:
            created = HeldState(root=root, tools=as_list(ex.request.get("tools")), system=ex.request.get("system"))
            await self.continuations.put(thread_key(root), created)
