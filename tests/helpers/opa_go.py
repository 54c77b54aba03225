"""OPA's own evaluator in-process: the PyPI package opa-golib-python-bindings (a ctypes wrapper
around OPA's Go library, OPA v1.20). It declares Requires-Python >= 3.14 but is stdlib-only
ctypes and works on 3.11, so it is installed with --ignore-requires-python into a cache
directory of the test run (pip's cache makes that a second after the first time). No opa
binary is published on PyPI, Debian or npm; this is how the suite proves the shipped policies
run unchanged on OPA."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson

from sidecar.policy._regorus import UNDEFINED
from sidecar.policy.engine import _Interpreting
from sidecar.policy.loader import DECISION, RESULT_DECISION, VISIBLE_TOOLS, PolicyBundle

PACKAGE = "opa-golib-python-bindings==0.4.4"


def load(target: Path) -> ModuleType:
    """`opa_bindings`, installed into `target` if it is not importable yet."""
    try:
        return importlib.import_module("opa_bindings")
    except ImportError:
        pass
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--ignore-requires-python",
            "--target",
            str(target),
            PACKAGE,
        ],
        check=True,
        capture_output=True,
    )
    sys.path.insert(0, str(target))
    return importlib.import_module("opa_bindings")


class OpaGoEngine(_Interpreting):
    """The sidecar's PolicyEngine interface over OPA's evaluator (decisions interpreted by the
    same code as the embedded and OPA-server engines)."""

    name = "opa"

    def __init__(self, bindings: ModuleType, bundle: PolicyBundle) -> None:
        self.on_error = "deny"
        self.eval_errors = 0
        self.bindings = bindings
        self.opa: Any = bindings.OpaEngine()
        for path, text in bundle.modules:
            self.opa.add_policy(path, text)
        self.opa.add_data(orjson.loads(orjson.dumps(bundle.data)))

    def value(self, rule: str, document: Any) -> Any:
        try:
            return self.opa.eval_document(rule.removeprefix("data."), document)
        except self.bindings.OpaUndefinedError:
            return UNDEFINED

    async def decide(self, input: dict[str, Any]) -> Any:
        return self._decision(self.value(DECISION, input), None, required=True)

    async def visible_tools(self, input: dict[str, Any]) -> list[str] | None:
        return self._visible(self.value(VISIBLE_TOOLS, input), None)

    async def result_decision(self, input: dict[str, Any]) -> Any:
        return self._decision(self.value(RESULT_DECISION, input), None, required=False)

    def health(self) -> dict[str, Any]:
        return {"ok": True, "engine": "opa-go"}

    async def close(self) -> None:
        self.opa.close()
