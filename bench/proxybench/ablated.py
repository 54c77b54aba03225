"""`sidecar` with some of its filter hooks turned into no-ops: the parts `bench_ablation.py`
takes away to measure what each costs a request where it runs, in the proxy under load.

A benchmark instrument, never a way to run the sidecar: what it takes away is enforcement.
It lives in bench/, and it patches the classes in this process only, before the sidecar's
command line starts.

Run: python -m proxybench.ablated --without cost,call_policy run --config FILE
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Ablation:
    """One part of the request path, as the hooks that do its work."""

    what: str
    hooks: tuple[str, ...]  # "module:Class.method"


_F = "sidecar.filters."
ABLATIONS: dict[str, Ablation] = {
    "call_policy": Ablation(
        "the policy decision of each call (input, engine, metrics)", (f"{_F}policy:PolicyFilter.on_call",)
    ),
    "replay": Ablation(
        "the replay guard: the ledger lookup of each call and the record of each delivered one",
        tuple(f"{_F}replay:ReplayFilter.{hook}" for hook in ("look_up", "on_call", "on_checked", "on_deliver")),
    ),
    "lockdown": Ablation("schema validation of each call's arguments", (f"{_F}arguments:ArgumentsFilter.on_call",)),
    "result_policy": Ablation(
        "the result policy over the request's tool results (inspection, memo, decision)",
        (f"{_F}result_policy:ResultPolicy.on_request",),
    ),
    "tool_list": Ablation("the tool-list policy (visible_tools)", (f"{_F}tool_list:ToolListFilter.on_request",)),
    "drift": Ablation("the tool inventory and drift watch", (f"{_F}drift:DriftFilter.on_request",)),
    "cost": Ablation(
        "token attribution per tool (the request sized once sent, the usage shared after the reply)",
        tuple(f"{_F}cost:CostFilter.{hook}" for hook in ("on_sent", "on_done")),
    ),
    "request_log": Ablation(
        "the request's log line and overhead histogram (after the reply)", (f"{_F}telemetry:TelemetryFilter.on_done",)
    ),
}


async def _skipped(*_args: Any, **_kwargs: Any) -> None:
    """A hook taken away: no verdict, no effect."""
    return None


def ablate(names: Sequence[str]) -> None:
    """Replace the hooks of the named ablations, in this process, before the sidecar starts."""
    for name in names:
        for hook in ABLATIONS[name].hooks:
            module, _, attribute = hook.partition(":")
            cls, _, method = attribute.partition(".")
            owner = getattr(importlib.import_module(module), cls)
            if not callable(getattr(owner, method, None)):
                raise SystemExit(f"ablation {name}: {module}.{cls} has no hook {method}")
            setattr(owner, method, _skipped)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--without", default="", help=f"comma-separated: {', '.join(ABLATIONS)}")
    args, sidecar_argv = parser.parse_known_args(argv)
    names = [name for name in args.without.split(",") if name]
    unknown = [name for name in names if name not in ABLATIONS]
    if unknown:
        parser.error(f"unknown ablation(s) {', '.join(unknown)}; known: {', '.join(ABLATIONS)}")
    ablate(names)
    from sidecar.cli import main as sidecar_main

    return sidecar_main(sidecar_argv)


if __name__ == "__main__":
    sys.exit(main())
