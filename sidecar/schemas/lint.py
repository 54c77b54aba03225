"""Lint tool schemas for lockdown: predict rejections and weak repair hints before enforcing.

Every finding is about what the lockdown will *do* with the schema, so the checks lean on the
lockdown itself: compile errors come from `Lockdown.compiled`, the `expected` text is the
lockdown's own (`CompiledSchema.expected_at`), format support is asked of jsonschema-rs, and
enum near-duplicates use the same matcher the repair hint uses (`messages.suggest`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import jsonschema_rs

from sidecar.config import LockdownSettings, Settings
from sidecar.lockdown import messages as msg
from sidecar.lockdown.schema_prep import JsonPointer, lock_unknown_properties, make_resolver, pointer_get, walk
from sidecar.lockdown.validator import CompiledSchema, Lockdown
from sidecar.schemas.load import LoadedFile, LoadedTool, pointer

SEVERITIES = ("error", "warning", "info")
_RANK = {s: i for i, s in enumerate(SEVERITIES)}
_COMPOSITION = ("allOf", "anyOf", "oneOf", "not", "if", "$ref")
_BRANCH_LISTS = ("allOf", "anyOf", "oneOf")
_BRANCH_ONE = ("if", "then", "else", "not")
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
# Name tokens of numeric parameters that usually need bounds (heuristic, info level).
_COUNT_WORDS = frozenset(
    {
        *("count", "limit", "max", "min", "size", "page", "pages", "per", "top", "k", "n"),
        *("num", "number", "offset", "qty", "quantity", "amount", "retries", "attempts"),
        *("timeout", "days", "hours", "minutes", "seconds", "depth", "results", "items"),
    }
)
_TOKENS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_ITEMS = object()  # field-path marker for "any array item"
_MAX_FIELD_DEPTH = 8


@dataclass(frozen=True, slots=True)
class Finding:
    """One observation about a tool schema; `pointer` is RFC 6901, relative to the schema."""

    severity: str
    code: str
    pointer: str
    message: str
    field: str = ""

    def to_json(self) -> dict[str, str]:
        out = {"severity": self.severity, "code": self.code, "pointer": self.pointer, "message": self.message}
        if self.field:
            out["field"] = self.field
        return out


@dataclass(slots=True)
class ToolReport:
    file: str
    tool: str
    dialect: str
    location: str
    schema_hash: str
    findings: list[Finding] = field(default_factory=list)

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "tool": self.tool,
            "dialect": self.dialect,
            "location": self.location,
            "schema_hash": self.schema_hash,
            "findings": [f.to_json() for f in self.findings],
        }


def lint_file(loaded: LoadedFile, settings: Settings, lockdown: Lockdown | None = None) -> list[ToolReport]:
    """One report per tool of the file, with the per-tool lockdown settings the proxy uses."""
    lockdown = lockdown or Lockdown()
    reports = []
    for tool in loaded.tools:
        decl = tool.declaration
        report = ToolReport(loaded.path, decl.name, tool.dialect, tool.location, decl.schema_hash)
        report.findings = lint_tool(tool, settings.lockdown_for(decl.name), lockdown)
        reports.append(report)
    return reports


def lint_tool(tool: LoadedTool, settings: LockdownSettings, lockdown: Lockdown) -> list[Finding]:
    """All findings for one tool, errors first, then in schema order."""
    decl = tool.declaration
    schema = decl.schema
    out: list[Finding] = []
    if tool.duplicate:
        out.append(
            Finding(
                "warning",
                "duplicate-tool",
                "",
                f"tool {decl.name!r} is declared more than once: the sidecar keeps the last declaration",
            )
        )
    if not tool.declared_schema:
        out.append(
            Finding(
                "warning",
                "no-schema",
                "",
                'no argument schema: the sidecar reads it as {"type": "object"}, so any arguments pass',
            )
        )
    entry = lockdown.compiled(decl, settings)
    if entry.validator is None:
        out.append(
            Finding(
                "error",
                "does-not-compile",
                "",
                f"the schema does not compile ({entry.compile_error}): the lockdown refuses every "
                "call of this tool with retryable: false",
            )
        )
    elif settings.reject_unknown_properties and entry.root == schema and lock_unknown_properties(schema) != schema:
        out.append(
            Finding(
                "warning",
                "lock-fallback",
                "",
                "the rewrite that refuses undeclared properties makes this schema uncompilable, so the "
                "lockdown validates it as declared: undeclared properties pass",
            )
        )
    if not settings.enabled:
        out.append(Finding("warning", "lockdown-off", "", "lockdown is disabled for this tool: every argument passes"))
    elif not settings.reject_unknown_properties:
        out.append(
            Finding(
                "warning",
                "unknown-properties-allowed",
                "",
                "reject_unknown_properties is off for this tool: undeclared properties pass everywhere",
            )
        )
    out += _root_findings(schema)
    out += _node_findings(schema, settings, entry if entry.validator is not None else None)
    if entry.validator is not None:
        out += _expected_findings(entry)
    out.sort(key=lambda f: _RANK[f.severity])  # stable: schema order within a severity
    return out


def _types(node: dict[str, Any]) -> list[str]:
    kind = node.get("type")
    if isinstance(kind, str):
        return [kind]
    return [t for t in kind if isinstance(t, str)] if isinstance(kind, list) else []


def _root_findings(schema: dict[str, Any]) -> list[Finding]:
    out = []
    types = _types(schema)
    if "type" in schema and "object" not in types:
        out.append(
            Finding(
                "error",
                "root-not-object",
                "/type",
                f"the root is not an object schema (type {msg.render(schema['type'])}): tool arguments "
                "are always a JSON object, so every call is refused",
            )
        )
    resolve = make_resolver(schema)
    for where, node in walk(schema):
        ref = node.get("$ref")
        if isinstance(ref, str) and resolve(ref) is None:
            why = (
                "points nowhere in this schema"
                if ref.startswith("#")
                else "is not local: the sidecar validates offline and never fetches it"
            )
            out.append(
                Finding(
                    "error",
                    "unresolved-ref",
                    pointer((*where, "$ref")),
                    f"$ref {ref!r} {why}; the schema cannot compile",
                )
            )
    return out


def _is_branch(where: JsonPointer) -> bool:
    """Part of a composition: describes only part of the value (the owner carries the type)."""
    return (len(where) >= 2 and where[-2] in (*_BRANCH_LISTS, "dependentSchemas", "dependencies")) or (
        bool(where) and where[-1] in _BRANCH_ONE
    )


def _property_name(where: JsonPointer) -> str | None:
    return str(where[-1]) if len(where) >= 2 and where[-2] == "properties" else None


def _node_findings(schema: dict[str, Any], settings: LockdownSettings, entry: CompiledSchema | None) -> list[Finding]:
    out: list[Finding] = []
    resolve = make_resolver(schema)
    for where, node in walk(schema):
        here = pointer(where)
        types = _types(node)
        name = _property_name(where)
        untyped = not any(k in node for k in ("type", "enum", "const", *_COMPOSITION))
        if untyped and where and not _is_branch(where):  # the root is always an object (arguments)
            out.append(
                Finding(
                    "warning",
                    "type-missing",
                    here,
                    'no `type`: any JSON value passes here (a string "10" where a number is meant, an object, null)',
                )
            )
        if "object" in types and not any(
            k in node for k in ("properties", "patternProperties", "additionalProperties", *_COMPOSITION)
        ):
            what = (
                'the tool accepts any arguments (declare `"properties": {}` if it takes none)'
                if not where
                else ("nothing nested is checked and any property names pass")
            )
            out.append(Finding("warning", "free-form-object", here, f"free-form object (no `properties`): {what}"))
        for key in ("additionalProperties", "unevaluatedProperties"):
            if node.get(key) is True or node.get(key) == {}:
                out.append(
                    Finding(
                        "warning",
                        "additional-properties-true",
                        pointer((*where, key)),
                        f"`{key}: true` is kept as declared (the lockdown only adds `{key}: false` where "
                        "the schema says nothing): undeclared, invented properties pass here unchecked; "
                        "remove it to have them refused",
                    )
                )
        fmt = node.get("format")
        if isinstance(fmt, str):
            out += _format_findings(fmt, pointer((*where, "format")), settings)
        enum = node.get("enum")
        if isinstance(enum, list):
            out += _enum_findings(enum, pointer((*where, "enum")))
        if node.get("nullable") is True and types and "null" not in types:
            out.append(
                Finding(
                    "warning",
                    "openapi-nullable",
                    pointer((*where, "nullable")),
                    "`nullable: true` is OpenAPI, not JSON Schema: the lockdown ignores it and refuses "
                    'null; write `"type": [..., "null"]` instead',
                )
            )
        if name is not None:
            if _description(node, resolve) is None:
                bare = f'only "{entry.expected_at(where)}"' if entry is not None else "only the bare constraint"
                out.append(
                    Finding(
                        "warning",
                        "no-description",
                        here,
                        f"no description: the model's repair hint for this parameter is {bare}",
                    )
                )
            parent = pointer_get(schema, where[:-2])
            required = parent.get("required") if isinstance(parent, dict) else None
            if not (isinstance(required, list) and name in required) and not (
                "default" in node or _nullable(node, resolve)
            ):
                null_rule = (
                    'if it sends null the lockdown refuses it ("null is not allowed")'
                    if settings.reject_null_for_non_nullable
                    else "a null is treated as if it were left out"
                )
                out.append(
                    Finding(
                        "warning",
                        "optional-not-nullable",
                        here,
                        f"optional, no default and not nullable: the model may leave it out, and {null_rule}; "
                        "list it in `required`, give it a `default`, or allow null",
                    )
                )
            if (
                {"integer", "number"} & set(types)
                and not any(k in node for k in (*_BOUNDS, "enum", "const"))
                and _COUNT_WORDS & {t.lower() for t in _TOKENS.findall(name)}
            ):
                out.append(
                    Finding(
                        "info",
                        "unbounded-count",
                        here,
                        f"{name!r} looks like a count or limit but has no minimum/maximum: the lockdown "
                        "accepts 0, negative and huge values",
                    )
                )
    return out


def _description(node: dict[str, Any], resolve: Any) -> str | None:
    for candidate in (node, resolve(node["$ref"]) if isinstance(node.get("$ref"), str) else None):
        desc = candidate.get("description") if isinstance(candidate, dict) else None
        if isinstance(desc, str) and desc.strip():
            return desc
    return None


def _nullable(node: Any, resolve: Any, depth: int = 0) -> bool:
    if not isinstance(node, dict) or depth > 4:
        return node is True
    if not any(k in node for k in ("type", "enum", "const", *_COMPOSITION)):
        return True  # unconstrained: null passes like any other value
    if "null" in _types(node) or ("const" in node and node["const"] is None):
        return True
    enum = node.get("enum")
    if isinstance(enum, list) and None in enum:
        return True
    if isinstance(node.get("$ref"), str) and _nullable(resolve(node["$ref"]), resolve, depth + 1):
        return True
    return any(_nullable(b, resolve, depth + 1) for key in ("anyOf", "oneOf") for b in _list(node.get(key)))


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


@functools.lru_cache(maxsize=128)
def validator_knows_format(fmt: str) -> bool:
    """Asked of jsonschema-rs itself: formats it does not know are ignored (any string passes)."""
    try:
        jsonschema_rs.validator_for(
            {"type": "string", "format": fmt}, validate_formats=True, ignore_unknown_formats=False, offline=True
        )
    except Exception:
        return False
    return True


def _format_findings(fmt: str, where: str, settings: LockdownSettings) -> list[Finding]:
    if not settings.assert_formats:
        return [
            Finding(
                "warning",
                "format-not-asserted",
                where,
                f'format "{fmt}" is not checked: assert_formats is off for this tool',
            )
        ]
    if not validator_knows_format(fmt):
        return [
            Finding(
                "warning",
                "format-not-asserted",
                where,
                f'format "{fmt}" is unknown to the validator: the lockdown ignores it and any string passes '
                "(constrain it with `pattern`)",
            )
        ]
    if fmt not in msg.FORMATS:
        return [
            Finding(
                "info",
                "format-generic-hint",
                where,
                f'format "{fmt}" is asserted, but the repair hint only says "string in \\"{fmt}\\" format" '
                "(no example); say what is meant in the description",
            )
        ]
    return []


def _enum_findings(enum: list[Any], where: str) -> list[Finding]:
    """Members that the repair hint's near-miss matcher cannot tell apart."""
    out = []
    for value in enum:
        meant = msg.suggest(value, enum) if isinstance(value, str) else None
        if meant is not None and meant != value:
            out.append(
                Finding(
                    "warning",
                    "enum-case-variants",
                    where,
                    f"enum members {msg.render(meant)} and {msg.render(value)} differ only in case, "
                    f"spaces, - or _: each is accepted only exactly as written, and a near miss is "
                    f"always pointed to {msg.render(meant)}",
                )
            )
    return out


@dataclass(frozen=True, slots=True)
class _Param:
    path: tuple[Any, ...]
    where: JsonPointer  # absolute schema location
    evaluation: tuple[str | int, ...]  # keyword path from the root, through `$ref`s
    required: bool


def _field_name(path: tuple[Any, ...]) -> str:
    out = ""
    for part in path:
        if part is _ITEMS:
            out += "[*]"
            continue
        piece = msg.field_path([part])
        out += piece if not out or piece.startswith("[") else "." + piece
    return out


def _ref_pointer(ref: str) -> JsonPointer | None:
    if ref == "#":
        return ()
    if not ref.startswith("#/"):
        return None
    return tuple(p.replace("~1", "/").replace("~0", "~") for p in ref[2:].split("/"))


def _parameters(
    node: Any,
    where: JsonPointer,
    evaluation: tuple[str | int, ...],
    path: tuple[Any, ...],
    resolve: Any,
    refs: frozenset[JsonPointer],
) -> Iterator[_Param]:
    """Every argument location a model can fill, following `$ref`s (cycle safe)."""
    if not isinstance(node, dict) or len(path) > _MAX_FIELD_DEPTH:
        return
    ref = node.get("$ref")
    target_at = _ref_pointer(ref) if isinstance(ref, str) else None
    if target_at is not None and target_at not in refs and isinstance(resolve(str(ref)), dict):
        yield from _parameters(resolve(str(ref)), target_at, (*evaluation, "$ref"), path, resolve, refs | {target_at})
    for key in _BRANCH_LISTS:
        branches = node.get(key)
        if isinstance(branches, list):
            for i, branch in enumerate(branches):
                yield from _parameters(branch, (*where, key, i), (*evaluation, key, i), path, resolve, refs)
    props = node.get("properties")
    if isinstance(props, dict):
        required = node.get("required")
        required_names = set(required) if isinstance(required, list) else set()
        for name, sub in props.items():
            sub_where, sub_eval = (*where, "properties", name), (*evaluation, "properties", name)
            yield _Param((*path, name), sub_where, sub_eval, name in required_names)
            yield from _parameters(sub, sub_where, sub_eval, (*path, name), resolve, refs)
    items = node.get("items")
    if isinstance(items, dict):
        yield from _parameters(items, (*where, "items"), (*evaluation, "items"), (*path, _ITEMS), resolve, refs)


def _expected_findings(entry: CompiledSchema) -> list[Finding]:
    """How the lockdown reads each parameter: the `expected` text the model would receive."""
    out = []
    seen: set[tuple[str, JsonPointer]] = set()
    resolve = make_resolver(entry.root)
    for param in _parameters(entry.root, (), (), (), resolve, frozenset()):
        name = _field_name(param.path)
        if (name, param.where) in seen:
            continue
        seen.add((name, param.where))
        text = entry.expected_at(param.where, param.evaluation)
        need = "required" if param.required else "optional"
        out.append(Finding("info", "expected", pointer(param.where), f"{need}; expected: {text}", name))
    return out
