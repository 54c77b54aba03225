"""Compile-time schema preparation for argument lockdown.

Tool schemas rarely say `additionalProperties: false`, yet a property the schema does not
declare is exactly the kind of argument a model invents. `lock_unknown_properties` rewrites a
*copy* of the schema once, at compile time, so the validator itself rejects undeclared
properties; nothing here runs per call.

Rules (see `lock_unknown_properties`):

* A plain object schema (has `properties`, no in-place composition) gets
  `additionalProperties: false`. Explicit `additionalProperties` / `unevaluatedProperties` are
  left alone; `patternProperties` keeps working (names matching a pattern are declared).
* A schema that composes others in place (`allOf`/`anyOf`/`oneOf`/`if`/`then`/`else`/`not`/
  `dependentSchemas`, or `$ref` with sibling keywords) is a *composition owner*. Its branches
  are *fragments*: they only describe part of the object, so they are never locked themselves
  (locking an `allOf` branch would reject the other branches' properties). The owner gets
  `unevaluatedProperties: false` (draft 2019-09 / 2020-12, the default), which the validator
  resolves exactly: a property is accepted iff some applicable branch declares it. Drafts 4-7
  have no `unevaluatedProperties`; there the owner gets the union of the branches' property
  names merged into its `properties` plus `additionalProperties: false`, unless a branch uses
  `patternProperties`/`additionalProperties` (then it is left alone).
* A `$defs` target used only through plain `{"$ref": …}` is locked like a plain schema; a
  target also used as a fragment is not, and its plain use sites get
  `unevaluatedProperties: false` instead (2019-09+ only).
* Schemas without any `properties` anywhere in their closure (free-form `{"type": "object"}`
  maps) are never locked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote

import orjson

JsonPointer = tuple[str | int, ...]

# Keywords whose subschemas apply to the same instance location (in-place applicators).
_INPLACE_LIST = ("allOf", "anyOf", "oneOf")
_INPLACE_ONE = ("if", "then", "else", "not")
_INPLACE_MAP = ("dependentSchemas", "dependencies")
# Keywords whose subschemas apply to a child location.
_CHILD_ONE = (
    "items",
    "additionalItems",
    "additionalProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "propertyNames",
)
_CHILD_LIST = ("prefixItems", "items")
_CHILD_MAP = ("properties", "patternProperties")
_CONTAINERS = ("$defs", "definitions")
# Keys that may sit next to `$ref` without making the node a composition.
_ANNOTATIONS = frozenset(
    {
        "$ref",
        "description",
        "title",
        "default",
        "examples",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
_OLD_DRAFTS = ("draft-03", "draft-04", "draft-06", "draft-07")


def deep_copy(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON round trip: the cheapest complete copy of a JSON document."""
    copied: dict[str, Any] = orjson.loads(orjson.dumps(schema))
    return copied


def is_old_draft(schema: Any) -> bool:
    """Drafts 4-7 know neither `unevaluatedProperties` nor `$ref` with siblings."""
    uri = schema.get("$schema") if isinstance(schema, dict) else None
    return isinstance(uri, str) and any(d in uri for d in _OLD_DRAFTS)


def pointer_get(root: Any, pointer: JsonPointer) -> Any:
    """The value at a pointer (path segments), or None when absent."""
    node = root
    for part in pointer:
        if isinstance(node, dict) and isinstance(part, str):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            return None
    return node


def make_resolver(root: Any) -> Callable[[str], Any]:
    """Resolve local references (`#`, `#/…` JSON pointers); anything else gives None."""

    def resolve(ref: str) -> Any:
        if ref == "#":
            return root
        if not ref.startswith("#/"):
            return None
        node = root
        for raw in ref[2:].split("/"):
            part = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict):
                node = node.get(part)
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node

    return resolve


def inplace_branches(node: dict[str, Any]) -> Iterator[Any]:
    """Subschemas applied at the same instance location (excluding `$ref`)."""
    for key in _INPLACE_LIST:
        value = node.get(key)
        if isinstance(value, list):
            yield from value
    for key in _INPLACE_ONE:
        if key in node:
            yield node[key]
    for key in _INPLACE_MAP:
        value = node.get(key)
        if isinstance(value, dict):
            yield from (v for v in value.values() if isinstance(v, (dict, bool)))


def child_schemas(node: dict[str, Any]) -> Iterator[tuple[JsonPointer, Any]]:
    """Every direct subschema with its relative pointer (in-place, child and containers)."""
    for key in _INPLACE_LIST + _CHILD_LIST:
        value = node.get(key)
        if isinstance(value, list):
            for i, sub in enumerate(value):
                yield (key, i), sub
    for key in _INPLACE_ONE + _CHILD_ONE:
        value = node.get(key)
        if isinstance(value, (dict, bool)):
            yield (key,), value
    for key in _INPLACE_MAP + _CHILD_MAP + _CONTAINERS:
        value = node.get(key)
        if isinstance(value, dict):
            for name, sub in value.items():
                if isinstance(sub, (dict, bool)):
                    yield (key, name), sub


def walk(root: Any) -> Iterator[tuple[JsonPointer, dict[str, Any]]]:
    """Every object subschema of the document with its pointer (depth first, cycle safe)."""
    seen: set[int] = set()
    stack: list[tuple[JsonPointer, Any]] = [((), root)]
    while stack:
        pointer, node = stack.pop()
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        yield pointer, node
        children = list(child_schemas(node))
        stack.extend((pointer + rel, sub) for rel, sub in reversed(children))


def _is_pure_ref(node: dict[str, Any]) -> bool:
    return "$ref" in node and node.keys() <= _ANNOTATIONS


def _is_composite(node: dict[str, Any]) -> bool:
    if any(k in node for k in _INPLACE_LIST + _INPLACE_ONE + _INPLACE_MAP):
        return True
    return "$ref" in node and not _is_pure_ref(node)


def _closure(node: dict[str, Any], resolve: Callable[[str], Any]) -> list[dict[str, Any]] | None:
    """The node and every schema applied in place with it; None if a `$ref` is unresolvable."""
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    stack: list[Any] = [node]
    while stack:
        current = stack.pop()
        if not isinstance(current, dict) or id(current) in seen:
            continue
        seen.add(id(current))
        out.append(current)
        ref = current.get("$ref")
        if isinstance(ref, str):
            target = resolve(ref)
            if target is None:
                return None
            stack.append(target)
        stack.extend(reversed(list(inplace_branches(current))))
    return out


def declared_names(node: dict[str, Any], resolve: Callable[[str], Any]) -> list[str]:
    """Property names declared by a node and the schemas it applies in place (for messages)."""
    names: dict[str, None] = {}
    for part in _closure(node, resolve) or [node]:
        props = part.get("properties")
        if isinstance(props, dict):
            names.update(dict.fromkeys(props))
    return list(names)


def _fragments(root: dict[str, Any], resolve: Callable[[str], Any]) -> set[int]:
    """ids of schemas that only describe part of an object (branches of compositions)."""
    fragment: set[int] = set()
    work: list[Any] = []
    for _, node in walk(root):
        if _is_composite(node):
            work.extend(inplace_branches(node))
            ref = node.get("$ref")
            if isinstance(ref, str):
                work.append(resolve(ref))
    while work:
        node = work.pop()
        if not isinstance(node, dict) or id(node) in fragment:
            continue
        fragment.add(id(node))
        work.extend(inplace_branches(node))
        ref = node.get("$ref")
        if isinstance(ref, str):
            work.append(resolve(ref))
    return fragment


def lock_unknown_properties(schema: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of `schema` in which undeclared properties are invalid (module docstring)."""
    root = deep_copy(schema)
    resolve = make_resolver(root)
    old = is_old_draft(root)
    fragment = _fragments(root, resolve)
    for _, node in list(walk(root)):
        if id(node) in fragment or "additionalProperties" in node:
            continue
        if "unevaluatedProperties" in node:
            continue
        if _is_composite(node) or (_is_pure_ref(node) and id(resolve(str(node["$ref"]))) in fragment):
            _lock_owner(node, resolve, old)
        elif "properties" in node and isinstance(node["properties"], dict):
            node["additionalProperties"] = False
    return root


def _lock_owner(node: dict[str, Any], resolve: Callable[[str], Any], old: bool) -> None:
    closure = _closure(node, resolve)
    if closure is None or not any("properties" in part for part in closure):
        return  # unresolvable reference or free-form object: leave it alone
    if not old:
        node["unevaluatedProperties"] = False
        return
    if "$ref" in node or "not" in node or "if" in node:
        return  # drafts 4-7 ignore siblings of $ref; `not`/`if` make a name union unsound
    branches = closure[1:]
    if any("patternProperties" in b or b.get("additionalProperties", False) is not False for b in branches):
        return
    props = node.setdefault("properties", {})
    if not isinstance(props, dict):
        return
    for name in declared_names(node, resolve):
        props.setdefault(name, {})
    node["additionalProperties"] = False
