"""The import graph runs one way: neutral types and wire formats at the bottom, the exchange and
its filters in the middle, transport and wiring on top; no cycles between parts of the package."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sidecar"

# Each part may import only from these (besides itself and sidecar/__init__'s version).
ALLOWED: dict[str, set[str]] = {
    "memo": set(),
    "model": {"memo"},
    "timefmt": set(),
    "identity": {"model"},
    "dialects": {"model"},
    # A pure inspector over a result's content (the model path and MCP share it): below policy.
    "inspection": {"model"},
    "config": {"telemetry"},  # the redactor, for secrets in configuration errors
    "lockdown": {"config", "model"},
    "state": {"config", "memo", "model", "telemetry"},  # the redactor, for backend errors quoting URLs
    "telemetry": {"cli_output", "config", "lockdown", "memo", "model", "timefmt"},
    "policy": {"config", "inspection", "model", "telemetry"},  # inspection: `check` compiles the markers
    "approvals": {"config", "state", "telemetry", "timefmt"},
    "exchange": {"config", "dialects", "model", "telemetry"},  # the redactor, for upstream error bodies
    # The MCP path: wire reading, its sequence over the exchange chain; no transport, no wiring.
    "mcp": {"config", "dialects", "exchange", "identity", "lockdown", "model", "telemetry"},
}
# Nothing below the transport may reach up into it (or into the wiring).
NEVER_IMPORTED_BY_LOWER = {"app", "proxy", "admin", "cli", "demo", "workers"}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "sidecar"


def import_graph() -> dict[str, set[str]]:
    """part -> the parts it imports (module-level and lazy imports alike)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        source = _unit(module)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                if target.startswith("sidecar.") and _unit(target) != source:
                    edges[source].add(_unit(target))
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> list[str] | None:
        if node in visiting:
            return [*visiting[visiting.index(node) :], node]
        if node in done:
            return None
        visiting.append(node)
        for target in sorted(edges.get(node, ())):
            found = visit(target)
            if found:
                return found
        visiting.pop()
        done.add(node)
        return None

    for start in sorted(edges):
        found = visit(start)
        if found:
            return found
    return None


def test_no_cycles_between_parts() -> None:
    assert _cycle(import_graph()) is None


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_lower_layers_import_only_below_them(part: str) -> None:
    imported = import_graph().get(part, set()) - {"sidecar"}
    assert imported <= ALLOWED[part], f"{part} imports {sorted(imported - ALLOWED[part])}"


def test_filters_never_reach_the_transport() -> None:
    graph = import_graph()
    for part in ("filters", "exchange", "dialects", "inspection", "policy", "state", "lockdown", "mcp"):
        assert not graph.get(part, set()) & NEVER_IMPORTED_BY_LOWER, part


def test_the_check_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
