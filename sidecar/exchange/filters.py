"""The filter protocol and the chain that runs filters in order (Envoy's filter chain, mitmproxy's
ordered addon list).

A filter is one concern with optional hooks, one per event it cares about. Each filter says
how it fails: a `critical` filter guards a promise (lockdown, the replay ledger, policy,
approvals), so when it raises, the exchange fails closed: the call it was judging is refused
with a clear reason, a hook before delivery withdraws the calls, counted in
`sidecar_filter_errors_total` and reported on /readyz. A best-effort filter (metrics, traces,
logs) is isolated: its failure is logged and counted, and the exchange goes on.

Hooks, in the order an exchange meets them (see `sidecar/exchange/runner.py`):

    on_request(ex)            the agent's request was read, before it goes upstream
    on_result(ex, record)     a tool result in the request, matched to its call
    on_sent(ex)               the agent's request was written to the provider (model path; not
                              a repair round's): the agent and the provider's answer are both
                              awaited, and the request is most likely still in the CPU's
                              caches, so what only observes the request (sizing it) belongs here
    on_upstream(ex, status,s) one upstream request finished (status None: no HTTP answer)
    on_reply(ex, reply)       a model reply was read (the agent's, then one per repair round)
    look_up(check)            gather what this filter knows about a call, before any decides
    on_call(check)            decide: a refusal Verdict, or None to let the next filter look
    on_checked(ex, checks)    a turn was judged; `check.action` says what was done
    on_repaired(ex, outcome)  a sequence of repair rounds ended
    on_deliver(ex, calls)     the calls are about to reach the agent: commit (ledger) here
    on_delivered(ex, reply, calls)  the reply (and these calls) is final and goes to the
                              agent next: store what the agent's next request relies on here
    on_answered(ex)           tool results arrived in an upstream reply (MCP: the `tools/call`
                              result), in `ex.view.results`: match them (`ex.results`), then
                              every filter hears each one (`on_result`)
    on_done(ex, end)          the exchange ended (done or failed), exactly once, in reverse
                              order; the agent already has its answer, so what only observes
                              (metrics, logs, traces, token estimates) belongs here

The MCP path (`sidecar/mcp/runner.py`) runs the same chain: `on_request` on the declarations a
`tools/list` returns or a `tools/call` is judged against, `check`/`checked`/`deliver` before
a call is forwarded to the server, `answered` when its result comes back, `done`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from functools import partial
from typing import Any, ClassVar

from sidecar.exchange.state import CallCheck, End, Exchange, RepairOutcome, ToolResultRecord
from sidecar.model import Reply, ToolCall, Verdict, VerdictKind

log = logging.getLogger("sidecar.exchange")

# Checks between two yields to the event loop while judging one turn (filters whose store
# answers from memory never await anything real).
_YIELD_EVERY = 16

HOOKS = (
    "on_request",
    "on_result",
    "on_sent",
    "on_upstream",
    "on_reply",
    "look_up",
    "on_call",
    "on_checked",
    "on_repaired",
    "on_deliver",
    "on_delivered",
    "on_answered",
    "on_done",
)


async def pause(position: int) -> None:
    """Let the event loop run every few items of a long loop over one turn's calls: a turn of
    thousands of calls must not hold it (filters whose store answers from memory never await
    anything real)."""
    if position and position % _YIELD_EVERY == 0:
        await asyncio.sleep(0)


class Filter:
    """One concern. Override only the hooks you need; the chain skips the others."""

    name: ClassVar[str] = "filter"
    # A critical filter that raises makes the exchange fail closed (see the module docstring).
    critical: ClassVar[bool] = False
    # Once a call is refused, later filters' `on_call` is skipped, except for filters that
    # resolve that kind of refusal (the approval filter turns "needs approval" into a request,
    # a decision already taken, or an allowed call).
    resolves: ClassVar[frozenset[VerdictKind]] = frozenset()
    # A decision taken once per logical call (policy, approval): skipped for a call whose
    # earlier leg already took it (`CallCheck.earlier`: an MCP execution of a call the model
    # path delivered), so an approval covers one execution and a decision is never asked twice.
    decides_once: ClassVar[bool] = False
    # Its `on_request` makes something current for the rest of the exchange (the tracing
    # filter: the request's span): it runs in the exchange's own task, and so does every
    # filter before it; the ones after it may run in a task of their own (`FilterChain.request`).
    sets_context: ClassVar[bool] = False

    async def on_request(self, ex: Exchange) -> None:
        return None

    async def on_result(self, ex: Exchange, record: ToolResultRecord) -> None:
        return None

    async def on_sent(self, ex: Exchange) -> None:
        return None

    async def on_upstream(self, ex: Exchange, status: int | None, seconds: float) -> None:
        return None

    async def on_reply(self, ex: Exchange, reply: Reply) -> None:
        return None

    async def look_up(self, check: CallCheck) -> None:
        return None

    async def on_call(self, check: CallCheck) -> Verdict | None:
        return None

    async def on_checked(self, ex: Exchange, checks: list[CallCheck]) -> None:
        return None

    async def on_repaired(self, ex: Exchange, outcome: RepairOutcome) -> None:
        return None

    async def on_deliver(self, ex: Exchange, calls: list[ToolCall]) -> None:
        return None

    async def on_delivered(self, ex: Exchange, reply: Reply, calls: list[ToolCall]) -> None:
        return None

    async def on_answered(self, ex: Exchange) -> None:
        return None

    async def on_done(self, ex: Exchange, end: End) -> None:
        return None


class FilterFailed(Exception):
    """A critical filter raised: the exchange fails closed. Carries who failed, and where."""

    def __init__(self, filter_name: str, hook: str, cause: BaseException) -> None:
        super().__init__(f"{filter_name}.{hook} failed: {type(cause).__name__}: {cause}")
        self.filter_name = filter_name
        self.hook = hook
        self.cause = cause


# Reports a filter failure: (filter name, hook, exception, critical). Metrics and /readyz.
FailureSink = Callable[[str, str, BaseException, bool], None]
# Work awaited once a request is written, while its answer is awaited: `on_sent` for one
# exchange (`FilterChain.sent_of`), which the upstream port and its client await.
WhileAwaited = Callable[[], Awaitable[None]]
# Runs a step of the chain (a coroutine) and gives its result: `in_own_task` (runner.py).
InTask = Callable[[Coroutine[Any, Any, None]], Awaitable[None]]


def _overrides(f: Filter, hook: str) -> bool:
    return getattr(type(f), hook) is not getattr(Filter, hook)


def _only_observes_sent(f: Filter) -> None:
    """`on_sent` runs after the request went out and its failures are only reported: a filter
    that guards a promise (critical) cannot rely on it."""
    if f.critical and _overrides(f, "on_sent"):
        raise TypeError(f"filter {f.name} is critical: on_sent is for filters that only observe")


def failed_check_verdict(failure: FilterFailed) -> Verdict:
    """The refusal a call gets when a critical filter could not judge it."""
    reason = (
        f"the sidecar could not check this call ({failure.filter_name} failed: "
        f"{type(failure.cause).__name__}); it was not run. Try again later."
    )
    return Verdict(VerdictKind.DENY, "denied", reasons=[reason], retryable=True, guard=failure.filter_name)


class FilterChain:
    """Filters in one ordered list; each hook runs over the filters that implement it."""

    def __init__(self, filters: Sequence[Filter], on_failure: FailureSink | None = None) -> None:
        self.filters = list(filters)
        self._on_failure = on_failure
        # Per hook, only the filters that implement it: an empty hook costs nothing.
        for f in self.filters:
            _only_observes_sent(f)
        self._by_hook: dict[str, list[Filter]] = {h: [f for f in self.filters if _overrides(f, h)] for h in HOOKS}
        self._split_request()

    def add(self, extra: Filter) -> None:
        """Append a filter at the end of the chain."""
        _only_observes_sent(extra)
        self.filters.append(extra)
        for hook, members in self._by_hook.items():
            if _overrides(extra, hook):
                members.append(extra)
        self._split_request()

    def _split_request(self) -> None:
        """The `on_request` filters up to the last one that `sets_context`, and the rest."""
        filters = self._by_hook["on_request"]
        split = max((i + 1 for i, f in enumerate(filters) if f.sets_context), default=0)
        self._request_in_context, self._request_rest_filters = filters[:split], filters[split:]

    def names(self) -> list[str]:
        return [f.name for f in self.filters]

    async def _run(self, f: Filter, hook: str, step: Awaitable[None]) -> None:
        try:
            await step
        except Exception as exc:
            self._report(f, hook, exc)
            if f.critical:
                raise FilterFailed(f.name, hook, exc) from exc
            log.exception("filter %s failed in %s (best-effort: the exchange goes on)", f.name, hook)

    def _report(self, f: Filter, hook: str, exc: BaseException) -> None:
        if self._on_failure is not None:
            try:
                self._on_failure(f.name, hook, exc, f.critical)
            except Exception:
                log.exception("reporting a filter failure failed")

    # -- hooks -----------------------------------------------------------------------------

    async def request(self, ex: Exchange, in_task: InTask | None = None) -> None:
        """`on_request`, then `on_result` per result. `in_task`: how to run the filters after
        the last one that `sets_context` (sidecar/exchange/runner.py: as a task of their own,
        whose context is a copy of this one, made after that filter made its span current)."""
        for f in self._request_in_context:
            await self._run(f, "on_request", f.on_request(ex))
        rest = self._request_rest(ex)
        await (rest if in_task is None else in_task(rest))

    async def _request_rest(self, ex: Exchange) -> None:
        for f in self._request_rest_filters:
            await self._run(f, "on_request", f.on_request(ex))
        for record in ex.results:
            for f in self._by_hook["on_result"]:
                await self._run(f, "on_result", f.on_result(ex, record))

    def sent_of(self, ex: Exchange) -> WhileAwaited | None:
        """`on_sent` for this exchange, to be awaited once its request is written; None when no
        filter listens."""
        return partial(self.sent, ex) if self._by_hook["on_sent"] else None

    async def sent(self, ex: Exchange) -> None:
        """`on_sent`: observers only, so it never raises (like `done`): a failure is reported,
        logged and the exchange goes on; the request is on its way already."""
        for f in self._by_hook["on_sent"]:
            try:
                await f.on_sent(ex)
            except Exception as exc:
                self._report(f, "on_sent", exc)
                log.exception("filter %s failed in on_sent", f.name)

    async def upstream(self, ex: Exchange, status: int | None, seconds: float) -> None:
        for f in self._by_hook["on_upstream"]:
            await self._run(f, "on_upstream", f.on_upstream(ex, status, seconds))

    async def reply(self, ex: Exchange, reply: Reply) -> None:
        for f in self._by_hook["on_reply"]:
            await self._run(f, "on_reply", f.on_reply(ex, reply))

    async def check(self, ex: Exchange, calls: Sequence[ToolCall], round: int = 0) -> list[CallCheck]:
        """Judge the calls of one model turn, in order: facts first, then decisions.

        A critical filter that raises refuses that call (fail closed); the others go on.
        """
        checks = [CallCheck(call, ex, len(calls), round) for call in calls]
        for position, check in enumerate(checks):
            await pause(position)
            decided = check.earlier is not None
            try:
                for f in self._by_hook["look_up"]:
                    if decided and f.decides_once:
                        continue
                    await self._run(f, "look_up", f.look_up(check))
                for f in self._by_hook["on_call"]:
                    if decided and f.decides_once:
                        continue
                    if not check.verdict.allowed and check.verdict.kind not in f.resolves:
                        continue
                    verdict = await self._decide(f, check)
                    if verdict is not None:
                        if not verdict.allowed:
                            verdict.guard = verdict.guard or f.name
                        check.verdict = verdict
            except FilterFailed as failure:
                check.verdict = failed_check_verdict(failure)
        return checks

    async def _decide(self, f: Filter, check: CallCheck) -> Verdict | None:
        try:
            return await f.on_call(check)
        except Exception as exc:
            self._report(f, "on_call", exc)
            if f.critical:
                raise FilterFailed(f.name, "on_call", exc) from exc
            log.exception("filter %s failed judging a call (best-effort: ignored)", f.name)
            return None

    async def checked(self, ex: Exchange, checks: list[CallCheck]) -> None:
        for f in self._by_hook["on_checked"]:
            await self._run(f, "on_checked", f.on_checked(ex, checks))

    async def repaired(self, ex: Exchange, outcome: RepairOutcome) -> None:
        for f in self._by_hook["on_repaired"]:
            await self._run(f, "on_repaired", f.on_repaired(ex, outcome))

    async def deliver(self, ex: Exchange, calls: list[ToolCall]) -> None:
        """Before the calls reach the agent. Raises FilterFailed: the caller withdraws them."""
        if calls:
            for f in self._by_hook["on_deliver"]:
                await self._run(f, "on_deliver", f.on_deliver(ex, calls))

    async def delivered(self, ex: Exchange, reply: Reply, calls: list[ToolCall]) -> None:
        for f in self._by_hook["on_delivered"]:
            await self._run(f, "on_delivered", f.on_delivered(ex, reply, calls))

    async def answered(self, ex: Exchange) -> None:
        """Results that came back in an upstream reply (`ex.view.results`): matched, then heard."""
        for f in self._by_hook["on_answered"]:
            await self._run(f, "on_answered", f.on_answered(ex))
        for record in ex.results:
            for f in self._by_hook["on_result"]:
                await self._run(f, "on_result", f.on_result(ex, record))

    async def done(self, ex: Exchange, end: End) -> None:
        """Every filter hears the end, whatever another one does (never raises), in reverse
        order: what a filter set up first (a trace span) is torn down last."""
        for f in reversed(self._by_hook["on_done"]):
            try:
                await f.on_done(ex, end)
            except Exception as exc:
                self._report(f, "on_done", exc)
                log.exception("filter %s failed in on_done", f.name)
