"""`in_own_task` (sidecar/exchange/runner.py): a step of an exchange run as a task of its own
gives its result or its error, starts at the loop's next turn, and is never left running."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from sidecar.exchange.runner import in_own_task


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
