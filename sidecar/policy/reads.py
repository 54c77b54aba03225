"""Which `input` fields a rule can read: what the engine is given, and what a cached answer
must be keyed on.

The tool-list question (`data.sidecar.visible_tools`) is asked on every request, with an input
that changes on every request (session, counts, time) while the policy usually reads only the
tool names. Walking the policy's AST from the rule through every rule and function it refers
to (in any package, through imports) gives the set of `input.<field>` it may read; an answer
keyed on those fields (the policy revision aside) is the answer for any input that agrees on
them. The same paths give the engine only what the rule reads (`project`): regorus parses the
input it is given, so a call decision's input without its ids and hashes is set faster.

A read is a path: `input.session.calls_by_tool[input.tool.name]` reads
`session.calls_by_tool` (whole: the key is not a constant) and `tool.name`; `input.call` used
as a value reads the whole call.

The walk over-approximates, and gives up (None: do not cache) on what it cannot bound: the
whole `input` used as a value, `input[<expression>]`, the whole `data` document, and builtins
whose answer is not a function of their arguments (the clock, randomness, the network). Values
a policy substitutes with `with input as ...` come from fields it reads, so they are covered.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sidecar.policy.lint import dotted, inner
from sidecar.policy.loader import rule_name

# Builtins whose value changes between two calls with the same arguments.
NONDETERMINISTIC = frozenset(
    {"time.now_ns", "rand.intn", "uuid.rfc4122", "http.send", "net.lookup_ip_addr", "opa.runtime"}
)

RuleKey = tuple[str, str]  # (package as "data.a.b", rule name)
Path = tuple[str, ...]  # input.a.b read as ("a", "b"); at least one field
# The fields a rule reads as a tree: {"call": {"args": {}}, "tool": {}}; an empty subtree is
# the whole value at that key.
Shape = dict[str, "Shape"]


def project(document: dict[str, Any], shape: Shape) -> dict[str, Any]:
    """`document` cut to `shape`: what a rule reading only those paths can tell apart. An
    absent field stays absent (undefined is not null in Rego); a value that is not an object
    where the shape goes deeper is kept whole (a field of it reads as undefined either way).
    For one shape cut many times, make its `projector` once."""
    return projector(shape)(document)


Projector = Callable[[dict[str, Any]], dict[str, Any]]


def projector(shape: Shape) -> Projector:
    """`project` for one shape, made once: the shape is walked when the projector is made, not
    on every cut (a call decision's input is cut on every call)."""
    parts = tuple((key, projector(deeper) if deeper else None) for key, deeper in shape.items())

    def cut(document: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, deeper in parts:
            if key in document:
                value = document[key]
                out[key] = deeper(value) if deeper is not None and isinstance(value, dict) else value
        return out

    return cut


def shape_of(paths: tuple[Path, ...]) -> Shape:
    """The tree of `paths`; a path that another one extends keeps the whole value."""
    shape: Shape = {}
    for path in sorted(paths, key=len):
        node = shape
        for key in path:
            if key in node and not node[key]:
                break  # a shorter path already reads the whole value
            node = node.setdefault(key, {})
    return shape


class _Unbounded(Exception):
    """The rule reads something the walk cannot bound to named fields."""


@dataclass
class _Rule:
    reads: set[Path] = field(default_factory=set)
    refers: set[RuleKey] = field(default_factory=set)


class _Module:
    """One module's package, import aliases and rule names, to resolve the names it uses."""

    def __init__(self, module: dict[str, Any]) -> None:
        ast = module.get("ast", {})
        self.package = "data." + (dotted(ast.get("package", {}).get("refr")) or "")
        contents = str(module.get("source", {}).get("contents", "")).encode()
        self.aliases: dict[str, list[str]] = {}
        for item in ast.get("imports", []):
            path = (dotted(item.get("refr")) or "").split(".")
            if path[0] not in ("data", "input"):
                continue  # rego.v1, future.keywords: no document
            alias = item.get("as")
            if isinstance(alias, dict) and "start" in alias:
                name = contents[int(alias["start"]) : int(alias["end"])].decode()
            else:
                name = path[-1]
            self.aliases[name] = path
        self.items = [item for item in ast.get("rules", []) if rule_name(item)]


class ReadsAnalysis:
    """Built once per compiled bundle from the engine's AST; `input_shape` per rule."""

    def __init__(self, modules: list[dict[str, Any]]) -> None:
        self.modules = [_Module(m) for m in modules]
        self.rules: dict[str, set[str]] = {}  # package -> rule names
        for module in self.modules:
            names = self.rules.setdefault(module.package, set())
            names.update(rule_name(item) for item in module.items)
        self._facts: dict[RuleKey, _Rule | None] = {}

    def input_shape(self, rule: str) -> Shape | None:
        """The tree of what `rule` may read (see `project`), or None when it cannot be bounded."""
        paths = self.input_paths(rule)
        return None if paths is None else shape_of(paths)

    def input_paths(self, rule: str) -> tuple[Path, ...] | None:
        """Every input path `rule` (e.g. "data.sidecar.visible_tools") may read, sorted, or None
        when they cannot be bounded."""
        package, _, name = rule.rpartition(".")
        reads: set[Path] = set()
        seen: set[RuleKey] = set()
        todo: deque[RuleKey] = deque([(package, name)])
        while todo:
            key = todo.popleft()
            if key in seen:
                continue
            seen.add(key)
            facts = self._rule(key)
            if facts is None:
                return None
            reads |= facts.reads
            todo.extend(facts.refers - seen)
        return tuple(sorted(reads))

    def _rule(self, key: RuleKey) -> _Rule | None:
        if key not in self._facts:
            facts = _Rule()
            try:
                for module in self.modules:
                    if module.package != key[0]:
                        continue
                    for item in module.items:
                        if rule_name(item) == key[1]:
                            self._visit(item, module, facts)
            except _Unbounded:
                self._facts[key] = None
            else:
                self._facts[key] = facts
        return self._facts[key]

    # --- the walk ------------------------------------------------------------------------

    def _visit(self, node: Any, module: _Module, facts: _Rule) -> None:
        if isinstance(node, list):
            for value in node:
                self._visit(value, module, facts)
            return
        if not isinstance(node, dict):
            return
        kind, body = inner(node)
        if kind in ("RefDot", "RefBrack", "Var"):
            self._reference(node, module, facts)
            return
        if kind == "Call" and dotted(body.get("fcn")) in NONDETERMINISTIC:
            raise _Unbounded
        for value in node.values():
            self._visit(value, module, facts)

    def _reference(self, node: Any, module: _Module, facts: _Rule) -> None:
        """A chain `root.a["b"][x]...`: resolved by its root and its leading constant path."""
        path: list[str | None] = []
        while True:
            kind, body = inner(node)
            if kind == "RefDot":
                name = body.get("field")
                path.append(str(name[1]) if isinstance(name, list) and len(name) > 1 else None)
                node = body.get("refr")
            elif kind == "RefBrack":
                index_kind, index = inner(body.get("index"))
                path.append(str(index.get("value")) if index_kind == "String" else None)
                self._visit(body.get("index"), module, facts)
                node = body.get("refr")
            else:
                break
        path.reverse()
        if kind != "Var":
            self._visit(node, module, facts)  # e.g. f(x).field: the call is a reference too
            return
        root = str(body.get("value"))
        if root in module.aliases:
            alias = module.aliases[root]
            root, path = alias[0], [*alias[1:], *path]
        if root == "input":
            if not path or path[0] is None:
                raise _Unbounded
            end = path.index(None) if None in path else len(path)
            facts.reads.add(tuple(str(part) for part in path[:end]))
        elif root == "data":
            self._data(path, facts)
        elif root in self.rules.get(module.package, ()):
            facts.refers.add((module.package, root))

    def _data(self, path: list[str | None], facts: _Rule) -> None:
        """`data.<path>`: the rule it names, or every rule under a package it stops at. Plain
        data is part of the policy revision, which the cache is already keyed on."""
        prefix = "data"
        for part in path:
            if part is None:
                break
            if part in self.rules.get(prefix, ()):
                facts.refers.add((prefix, part))
                return
            prefix = f"{prefix}.{part}"
        if prefix == "data":
            raise _Unbounded  # the whole data document (every rule of every package)
        for package, names in self.rules.items():
            if package == prefix or package.startswith(prefix + "."):
                facts.refers.update((package, name) for name in names)
