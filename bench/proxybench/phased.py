"""`sidecar` that notes when each exchange reaches each phase of its path, for
`bench_phases.py`: where the latency of one request goes, inside the proxy.

A benchmark instrument, never a way to run the sidecar. It wraps a few methods of the
sidecar's classes in this process only, before the command line starts, and writes what it
noted (one object per exchange: phase -> seconds since the handler started) as JSON to
`--phases-out` when the sidecar stops (SIGTERM: a graceful stop returns from its `main`).

An exchange's notes live in a context variable set when the handler starts: the tasks the
exchange starts (its filters', its checks') run in copies of that context, which hold the
same dict. Each phase keeps its first time (a repair round judges calls again; the first
judgement is the one the agent waited for). Each wrapped call costs 0.2 µs more in a warm loop (more in the
proxy, whose caches are cold): five per whole reply, a few more per stream (each write).

Run: python -m proxybench.phased --phases-out FILE run --config FILE
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import sys
import time
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    what: str
    hooks: tuple[str, ...]  # "module:Class.method": the phase is reached when the first returns


_H = "sidecar.proxy.handler:"
_C = "sidecar.proxy.http_client:"
# In the order an exchange reaches them (a whole reply has no `first_write`).
PHASES: tuple[Phase, ...] = (
    Phase(
        "checked",
        "the request's filters are done (results, tool list, ...)",
        ("sidecar.exchange.filters:FilterChain.request",),
    ),
    Phase("sent", "the request is written to the upstream's connection", (f"{_C}ClientPool._send",)),
    Phase("answer", "the exchange has the upstream's status and headers", (f"{_C}Response._head",)),
    Phase("first_write", "a stream's first bytes are written to the agent", (f"{_H}AiohttpAgent.write",)),
    Phase("calls_checked", "the reply's calls are judged", ("sidecar.exchange.filters:FilterChain.check",)),
    Phase(
        "answered",
        "the agent has its whole answer (a reply, or a stream's end)",
        (f"{_H}AiohttpAgent.respond", f"{_H}AiohttpAgent.close_stream"),
    ),
)
START, END = "start", "end"  # the handler is called (aiohttp has read the request's head) / returns

_current: ContextVar[dict[str, float] | None] = ContextVar("phases", default=None)
_noted: list[dict[str, float]] = []


def _note(name: str) -> None:
    marks = _current.get()
    if marks is not None and name not in marks:
        marks[name] = time.perf_counter() - marks[START]


def _wrapped(method: Callable[..., Any], name: str) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def noted_async(*args: Any, **kwargs: Any) -> Any:
            result = await method(*args, **kwargs)
            _note(name)
            return result

        return noted_async

    @functools.wraps(method)
    def noted(*args: Any, **kwargs: Any) -> Any:
        result = method(*args, **kwargs)
        _note(name)
        return result

    return noted


def _handled(method: Callable[..., Any]) -> Callable[..., Any]:
    """The handler: an exchange's notes start and end with it."""

    @functools.wraps(method)
    async def handle(*args: Any, **kwargs: Any) -> Any:
        marks = {START: time.perf_counter()}
        token = _current.set(marks)
        try:
            return await method(*args, **kwargs)
        finally:
            marks[END] = time.perf_counter() - marks[START]
            del marks[START]
            _noted.append(marks)
            _current.reset(token)

    return handle


def _owner(hook: str) -> tuple[Any, str]:
    module, _, attribute = hook.partition(":")
    cls, _, method = attribute.partition(".")
    owner = getattr(importlib.import_module(module), cls)
    if not callable(getattr(owner, method, None)):
        raise SystemExit(f"phase hook {hook}: no such method")
    return owner, method


def instrument() -> None:
    """Wrap the phases' methods and the handler, in this process."""
    for phase in PHASES:
        for hook in phase.hooks:
            owner, method = _owner(hook)
            setattr(owner, method, _wrapped(getattr(owner, method), phase.name))
    owner, method = _owner(f"{_H}ProxyHandler.handle")
    setattr(owner, method, _handled(getattr(owner, method)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phases-out", required=True, type=Path, help="where the notes go, as JSON, at the stop")
    args, sidecar_argv = parser.parse_known_args(argv)
    instrument()
    from sidecar.cli import main as sidecar_main

    try:
        return sidecar_main(sidecar_argv)
    finally:
        args.phases_out.write_bytes(orjson.dumps(_noted))


if __name__ == "__main__":
    sys.exit(main())
