"""`in_own_task` (sidecar/exchange/runner.py): a step of an exchange run as a task of its own
gives its result or its error, starts at the loop's next turn, and is never left running."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars

import pytest
from multidict import CIMultiDict
from yarl import URL

from sidecar.dialects import ANTHROPIC
from sidecar.exchange.filters import Filter, FilterChain
from sidecar.exchange.runner import in_own_task
from sidecar.exchange.state import Exchange
from sidecar.model import Provider

REQUEST = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


async def test_the_result_or_the_error_of_the_step() -> None:
    async def answer() -> int:
        return 42

    async def fail() -> int:
        raise ValueError("boom")

    assert await in_own_task(answer()) == 42
    with pytest.raises(ValueError, match="boom"):
        await in_own_task(fail())


async def test_the_step_starts_at_the_next_turn_beside_the_others() -> None:
    order: list[str] = []

    async def step(name: str) -> None:
        order.append(name)

    async def exchange(name: str) -> None:
        order.append(f"{name} ready")
        await in_own_task(step(name))

    await asyncio.gather(exchange("a"), exchange("b"))
    assert order == ["a ready", "b ready", "a", "b"]  # both got there first, then both steps ran


@pytest.mark.parametrize("how", ["cancelled", "waiting failed"])
async def test_a_caller_that_stops_waiting_leaves_nothing_running(how: str) -> None:
    started, unwound = asyncio.Event(), asyncio.Event()

    async def held() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            await asyncio.sleep(0)  # unwinding takes a turn of the loop
            unwound.set()

    async def failing_wait(task: asyncio.Future[None]) -> None:
        await started.wait()
        raise ConnectionResetError("keep-alive failed")

    if how == "cancelled":
        caller = asyncio.ensure_future(in_own_task(held()))
        await started.wait()
        caller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await caller
    else:
        with pytest.raises(ConnectionResetError):
            await in_own_task(held(), failing_wait)
    assert unwound.is_set()  # waited for, not only cancelled


async def test_filters_after_the_one_that_sets_context_run_in_a_task_and_see_it() -> None:
    """`FilterChain.request(ex, in_own_task)`: a filter that `sets_context` (tracing) and every
    filter before it run in the caller's task, so what it makes current stays current for the
    caller; the filters after it run in a task of their own, and see it too."""
    current: contextvars.ContextVar[str] = contextvars.ContextVar("current", default="none")
    seen: dict[str, tuple[str, bool]] = {}
    caller = asyncio.current_task()

    class Probe(Filter):
        def __init__(self, name: str, sets: bool = False) -> None:
            self.name, self.sets = name, sets

        async def on_request(self, ex: Exchange) -> None:
            if self.sets:
                current.set("span")
            seen[self.name] = (current.get(), asyncio.current_task() is caller)

    class Setter(Probe):
        sets_context = True

    chain = FilterChain([Probe("first"), Setter("tracing", sets=True), Probe("later")])
    ex = Exchange(
        "x",
        Provider.ANTHROPIC,
        ANTHROPIC,
        "s",
        ANTHROPIC.read_request(REQUEST),
        REQUEST,
        URL("http://u"),
        CIMultiDict(),
    )
    await chain.request(ex, in_own_task)
    assert seen == {"first": ("none", True), "tracing": ("span", True), "later": ("span", False)}
    assert current.get() == "span"  # still current for the rest of the exchange
