"""Lint tool declarations: the classic mistakes that make a model call a tool badly, and what
the argument lockdown will do with each schema.

Rules and severities are in `findings.py`, the word-level heuristics in `heuristics.py`.
The lockdown-related checks lean on the lockdown itself: compile errors come from
jsonschema-rs with the location it reports, the `expected` text is the lockdown's own
(`CompiledSchema.expected_at`), format support is asked of jsonschema-rs, and enum
near-duplicates use the matcher the repair hint uses (`messages.suggest`).
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jsonschema_rs

from sidecar.config import LockdownSettings, Settings
from sidecar.lockdown import messages as msg
from sidecar.lockdown.schema_prep import JsonPointer, lock_unknown_properties, make_resolver, pointer_get, walk
from sidecar.lockdown.validator import CompiledSchema, Lockdown
from sidecar.schemas import heuristics as words
from sidecar.schemas.findings import Finding, Rule, ToolReport, by_severity
from sidecar.schemas.load import LoadedFile, LoadedTool, field_label, pointer

_COMPOSITION = ("allOf", "anyOf", "oneOf", "not", "if", "$ref")
_BRANCH_LISTS = ("allOf", "anyOf", "oneOf")
_BRANCH_ONE = ("if", "then", "else", "not")
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_JSON_TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")
_ITEMS = object()  # field-path marker for "any array item"
_MAX_FIELD_DEPTH = 8
MAX_REQUIRED = 5
_DESCRIBE = "<what it is, its unit or format, an example>"


@dataclass(frozen=True, slots=True)
class LintOptions:
    """Thresholds of the shape rules."""

    max_required: int = MAX_REQUIRED
    max_depth: int = 2


def lint_file(
    loaded: LoadedFile,
    settings: Settings,
    lockdown: Lockdown | None = None,
    options: LintOptions | None = None,
) -> list[ToolReport]:
    """One report per tool of the file, with the per-tool lockdown settings the proxy uses.
    The tools of one file (or one agent of an inventory) are also checked as a set: naming."""
    lockdown = lockdown or Lockdown()
    options = options or LintOptions()
    reports = []
    naming = naming_findings(loaded.tools)
    for tool in loaded.tools:
        decl = tool.declaration
        report = ToolReport(loaded.path, decl.name, tool.dialect, tool.location, decl.schema_hash)
        found = lint_tool(tool, settings.lockdown_for(decl.name), lockdown, options)
        report.findings = by_severity([*naming.get(decl.name, []), *found])
        reports.append(report)
    return reports


def lint_tool(
    tool: LoadedTool, settings: LockdownSettings, lockdown: Lockdown, options: LintOptions | None = None
) -> list[Finding]:
    """All findings for one tool, errors first, then in schema order."""
    options = options or LintOptions()
    entry = lockdown.compiled(tool.declaration, settings)
    compiled = entry if entry.validator is not None else None
    out = _tool_findings(tool)
    out += _lockdown_findings(tool, settings, entry)
    out += _SchemaChecks(tool, settings, compiled, options).run()
    if compiled is not None:
        out += _expected_findings(compiled)
    return by_severity(out)


# --- the tool itself -------------------------------------------------------------------------


def _tool_findings(tool: LoadedTool) -> list[Finding]:
    decl = tool.declaration
    out: list[Finding] = []
    if tool.duplicate:
        out.append(
            Finding(
                Rule.DUPLICATE_TOOL,
                "",
                f"tool {decl.name!r} is declared more than once: the sidecar keeps the last declaration",
                "declare each tool once; give different tools different names",
            )
        )
    if not decl.description.strip():
        out.append(
            Finding(
                Rule.NO_DESCRIPTION,
                "",
                "the tool has no description",
                "say what it does, when to use it (and when not), and what it returns",
                {"description": "<what it does, when to use it, what it returns>"},
            )
        )
    elif words.restates(decl.name, decl.description):
        out.append(
            Finding(
                Rule.DESCRIPTION_RESTATES_NAME,
                "",
                f"the tool's description {msg.render(decl.description)} only restates its name",
                "say what the name does not: what it acts on, when to use it, what it returns",
                {"description": f"{decl.description.rstrip('.')}: <when to use it, what it returns>"},
            )
        )
    if words.is_generic(decl.name):
        out.append(
            Finding(
                Rule.GENERIC_NAME,
                "",
                f"tool name {decl.name!r} is generic: it does not say what it acts on",
                "name the domain, the resource and the action (domain_resource_action): e.g. orders_search, "
                "tickets_search",
            )
        )
    return out


def naming_findings(tools: list[LoadedTool]) -> dict[str, list[Finding]]:
    """Tool name -> naming findings: names whose case style or action position differs from
    the one most tools of the set use."""
    names = [t.declaration.name for t in tools]
    out: dict[str, list[Finding]] = {}
    styles = [words.case_style(n) for n in names]
    main_style = words.majority(styles)
    positions = [words.action_position(n) for n in names]
    main_position = words.majority(positions)
    for name, style, position in zip(names, styles, positions, strict=True):
        if main_style is not None and style is not None and style != main_style:
            suggestion = words.restyle(name, main_style)
            out.setdefault(name, []).append(
                Finding(
                    Rule.INCONSISTENT_NAMING,
                    "",
                    f"{name!r} is {style}; most tools of this agent are {main_style}",
                    f"rename it {suggestion!r} (one scheme for all tools of an agent)",
                )
            )
        if main_position is not None and position is not None and position != main_position:
            out.setdefault(name, []).append(
                Finding(
                    Rule.INCONSISTENT_NAMING,
                    "",
                    f"{name!r} puts the action {position.split()[1]}; most tools of this agent put it "
                    f"{main_position.split()[1]}",
                    "use one word order for all tools of an agent, e.g. domain_resource_action "
                    "(support_tickets_search, payments_refund)",
                )
            )
    return out


# --- what the lockdown does with the schema ------------------------------------------------


def _lockdown_findings(tool: LoadedTool, settings: LockdownSettings, entry: CompiledSchema) -> list[Finding]:
    schema = tool.declaration.schema
    out = _ref_findings(schema)
    types = _types(schema)
    if "type" in schema and "object" not in types:
        out.append(
            Finding(
                Rule.ROOT_NOT_OBJECT,
                "/type",
                f"the root is not an object schema (type {msg.render(schema['type'])})",
                "wrap the value in an object parameter",
                {"type": "object", "properties": {"<name>": schema}, "required": ["<name>"]},
            )
        )
    if entry.validator is None and not out:
        out.append(_compile_finding(schema, settings))
    elif (
        entry.validator is not None
        and settings.reject_unknown_properties
        and entry.root == schema
        and lock_unknown_properties(schema) != schema
    ):
        out.append(
            Finding(
                Rule.LOCK_FALLBACK,
                "",
                "the rewrite that refuses undeclared properties makes this schema uncompilable, so the "
                "lockdown validates it as declared: undeclared properties pass",
                "declare `additionalProperties: false` (or `unevaluatedProperties: false`) where it applies",
            )
        )
    if not settings.enabled:
        out.append(
            Finding(Rule.LOCKDOWN_OFF, "", "lockdown is disabled for this tool", "enable it (tools.<name>.lockdown)")
        )
    elif not settings.reject_unknown_properties:
        out.append(
            Finding(
                Rule.UNKNOWN_PROPERTIES_ALLOWED,
                "",
                "reject_unknown_properties is off for this tool: undeclared properties pass everywhere",
                "turn reject_unknown_properties on for this tool",
            )
        )
    return out


def _ref_findings(schema: dict[str, Any]) -> list[Finding]:
    out = []
    resolve = make_resolver(schema)
    for where, node in walk(schema):
        ref = node.get("$ref")
        if isinstance(ref, str) and resolve(ref) is None:
            local = ref.startswith("#")
            why = "points nowhere in this schema" if local else "is not local: the sidecar never fetches it"
            out.append(
                Finding(
                    Rule.UNRESOLVED_REF,
                    pointer((*where, "$ref")),
                    f"$ref {ref!r} {why}; the schema cannot compile",
                    "define the target under `$defs` in this schema and point at it with `#/$defs/<Name>`",
                )
            )
    return out


def _compile_finding(schema: dict[str, Any], settings: LockdownSettings) -> Finding:
    """Where jsonschema-rs says the schema is wrong (the keyword, not the root)."""
    try:
        jsonschema_rs.validator_for(schema, validate_formats=settings.assert_formats, offline=True)
    except jsonschema_rs.ValidationError as exc:
        where: JsonPointer = tuple(exc.instance_path)
        detail = msg.truncate(exc.message, 200)
        value = exc.instance
    except Exception as exc:  # any other refusal of the library: no location to give
        where, detail, value = (), msg.truncate(str(exc).strip().splitlines()[0] if str(exc).strip() else "", 200), None
    else:  # compiles on its own: the failure came from the lockdown's settings
        where, detail, value = (), "rejected by the validator", None
    if "type" in where and isinstance(value, str) and value not in _JSON_TYPES:
        close = difflib.get_close_matches(value, _JSON_TYPES, n=1)
        meant = close[0] if close else "string"
        fixed = _with(pointer_get(schema, where[: where.index("type")]), type=meant)
        return Finding(
            Rule.DOES_NOT_COMPILE,
            pointer(where),
            f"{msg.render(value)} is not a JSON Schema type, so the schema does not compile",
            f"use one of {', '.join(_JSON_TYPES)} (probably {meant!r})",
            fixed,
        )
    return Finding(
        Rule.DOES_NOT_COMPILE,
        pointer(where),
        f"the schema does not compile: {detail}",
        "correct the keyword at this location (`sidecar schemas show` prints the enforced schema)",
    )


def _with(node: Any, **changes: Any) -> dict[str, Any]:
    base = dict(node) if isinstance(node, dict) else {}
    base.update(changes)
    return base


def _types(node: dict[str, Any]) -> list[str]:
    kind = node.get("type")
    if isinstance(kind, str):
        return [kind]
    return [t for t in kind if isinstance(t, str)] if isinstance(kind, list) else []


def _is_branch(where: JsonPointer) -> bool:
    """Part of a composition: describes only part of the value (the owner carries the type)."""
    return (len(where) >= 2 and where[-2] in (*_BRANCH_LISTS, "dependentSchemas", "dependencies")) or (
        bool(where) and where[-1] in _BRANCH_ONE
    )


def _property_name(where: JsonPointer) -> str | None:
    return str(where[-1]) if len(where) >= 2 and where[-2] == "properties" else None


def _value_name(where: JsonPointer) -> str | None:
    """The parameter a value belongs to: the property itself, or the property of an array item."""
    name = _property_name(where)
    if name is None and where and where[-1] == "items":
        name = _property_name(where[:-1])
    return name


def _untyped(node: dict[str, Any]) -> bool:
    return not any(k in node for k in ("type", "enum", "const", *_COMPOSITION))


# --- the schema, node by node ------------------------------------------------------------


class _SchemaChecks:
    """The node and parameter rules over one schema (walked once, `$defs` included)."""

    def __init__(
        self, tool: LoadedTool, settings: LockdownSettings, entry: CompiledSchema | None, options: LintOptions
    ) -> None:
        self.tool = tool
        self.schema = tool.declaration.schema
        self.settings = settings
        self.entry = entry
        self.options = options
        self.resolve = make_resolver(self.schema)

    def run(self) -> list[Finding]:
        out: list[Finding] = []
        for where, node in walk(self.schema):
            out += self._node(where, node)
            name = _property_name(where)
            if name is not None:
                out += self._parameter(where, node, name)
            value_name = _value_name(where)
            if value_name is not None:
                out += self._value(where, node, value_name)
        out += self._depth()
        return out

    # -- any node

    def _node(self, where: JsonPointer, node: dict[str, Any]) -> list[Finding]:
        out: list[Finding] = []
        here = pointer(where)
        types = _types(node)
        if where and _untyped(node) and not _is_branch(where):
            out.append(
                Finding(
                    Rule.UNTYPED,
                    here,
                    'no `type`: any JSON value passes here (a string "10" where a number is meant, an object, null)',
                    "declare its type (and `enum` or `format` where they apply)",
                    _with(node, type="string"),
                    field_label(where),
                )
            )
        free = self._free_form(where, node, types)
        if free is not None:
            out.append(free)
        elif "properties" in node:
            out += self._open_properties(where, node)
        fmt = node.get("format")
        if isinstance(fmt, str):
            out += _format_findings(fmt, where, self.settings)
        enum = node.get("enum")
        if isinstance(enum, list):
            out += _enum_findings(enum, where, node)
        if node.get("nullable") is True and types and "null" not in types:
            out.append(
                Finding(
                    Rule.OPENAPI_NULLABLE,
                    pointer((*where, "nullable")),
                    "`nullable: true` is OpenAPI, not JSON Schema: the lockdown ignores it and refuses null",
                    'write the null into the type instead: `"type": [..., "null"]`',
                    {**{k: v for k, v in node.items() if k != "nullable"}, "type": [*types, "null"]},
                    field_label(where),
                )
            )
        out += self._required_count(where, node)
        return out

    def _free_form(self, where: JsonPointer, node: dict[str, Any], types: list[str]) -> Finding | None:
        if any(k in node for k in ("properties", "patternProperties", *_COMPOSITION)):
            return None
        extra = node.get("additionalProperties")
        if extra is False or (isinstance(extra, dict) and extra):
            return None  # closed, or a map whose values are typed
        if where and "object" not in types:
            return None
        if not where and types and "object" not in types:
            return None  # root-not-object says it
        shape = {
            "type": "object",
            "properties": {"<key>": {"type": "string", "description": _DESCRIBE}},
            "required": ["<key>"],
            "additionalProperties": False,
        }
        if not where:
            what = (
                'no argument schema: the sidecar reads it as {"type": "object"}, so any arguments pass'
                if not self.tool.declared_schema
                else "the arguments are a free-form object (no `properties`): any arguments pass"
            )
            fix = (
                "declare the arguments in `properties` and `required`; a tool that takes none declares "
                '`"properties": {}`'
            )
        else:
            state = "true" if extra is not None else "missing"
            what = f"free-form object: no `properties` and `additionalProperties` {state}: any keys and values pass"
            fix = (
                "declare its keys in `properties` (typed and described) and `required`; for a real map, type "
                "the values with `additionalProperties: {schema}`"
            )
        return Finding(Rule.FREE_FORM_OBJECT, pointer(where), what, fix, shape, field_label(where) if where else "")

    def _open_properties(self, where: JsonPointer, node: dict[str, Any]) -> list[Finding]:
        out = []
        for key in ("additionalProperties", "unevaluatedProperties"):
            if node.get(key) is True or node.get(key) == {}:
                out.append(
                    Finding(
                        Rule.ADDITIONAL_PROPERTIES_TRUE,
                        pointer((*where, key)),
                        f"`{key}: true` is kept as declared (the lockdown only adds `{key}: false` where the "
                        "schema says nothing): undeclared, invented properties pass here unchecked",
                        "remove it, so undeclared properties are refused",
                        {k: v for k, v in node.items() if k != key},
                        field_label(where),
                    )
                )
        return out

    def _required_count(self, where: JsonPointer, node: dict[str, Any]) -> list[Finding]:
        required = node.get("required")
        props = node.get("properties")
        if not isinstance(required, list) or not isinstance(props, dict):
            return []
        # Nullable required properties are how OpenAI strict mode writes optional ones.
        needed = [r for r in required if isinstance(r, str) and not _nullable(props.get(r), self.resolve)]
        if len(needed) <= self.options.max_required:
            return []
        return [
            Finding(
                Rule.TOO_MANY_REQUIRED,
                pointer((*where, "required")),
                f"{len(needed)} required parameters (more than {self.options.max_required}): " + ", ".join(needed),
                "give the ones with a sensible default a `default` and make them optional, or split the tool",
                field=field_label(where),
            )
        ]

    # -- a named parameter

    def _parameter(self, where: JsonPointer, node: dict[str, Any], name: str) -> list[Finding]:
        out: list[Finding] = []
        label = field_label(where)
        if words.is_positional(name):
            out.append(
                Finding(
                    Rule.POSITIONAL_NAME,
                    pointer(where),
                    f"parameter name {name!r} is positional: it says nothing about what the value is",
                    f"rename {name!r} to what it holds (query, order_id, …) and describe it",
                    {"properties": {"<what_it_holds>": _with(node, description=_DESCRIBE)}},
                    label,
                )
            )
        description = _description(node, self.resolve)
        if description is None:
            bare = f'only "{self.entry.expected_at(where)}"' if self.entry is not None else "only the bare constraint"
            out.append(
                Finding(
                    Rule.NO_DESCRIPTION,
                    pointer(where),
                    f"no description: the model's repair hint for this parameter is {bare}",
                    "describe what the value is, its unit or format, and give an example",
                    _with(node, description=_DESCRIBE),
                    label,
                )
            )
        elif words.restates(name, description):
            out.append(
                Finding(
                    Rule.DESCRIPTION_RESTATES_NAME,
                    pointer((*where, "description")),
                    f"description {msg.render(description)} only restates the name {name!r}",
                    "say what the name does not: unit, format, allowed values, an example",
                    _with(node, description=f"{description.rstrip('.')}: {_DESCRIBE}"),
                    label,
                )
            )
        out += self._choices(where, node, description, label)
        out += self._optional(where, node, description, label)
        out += _unbounded_count(where, node, name, label)
        return out

    def _choices(self, where: JsonPointer, node: dict[str, Any], description: str | None, label: str) -> list[Finding]:
        if description is None or any(k in node for k in ("enum", "const", "anyOf", "oneOf")):
            return []
        types = _types(node)
        if types and "string" not in types:
            return []
        members = words.listed_choices(description)
        if not members:
            return []
        return [
            Finding(
                Rule.CHOICE_NOT_ENUM,
                pointer(where),
                f"the description lists choices ({', '.join(msg.render(m) for m in members)}) but the schema has "
                "no `enum`",
                "list them in `enum`, so a near miss is refused with the choices in the repair hint",
                _with(node, type="string", enum=members),
                label,
            )
        ]

    def _optional(self, where: JsonPointer, node: dict[str, Any], description: str | None, label: str) -> list[Finding]:
        """Optional parameters, and nullable required ones (how OpenAI strict mode writes
        optional): what does leaving it out, or null, do?"""
        parent = pointer_get(self.schema, where[:-2])
        required = parent.get("required") if isinstance(parent, dict) else None
        is_required = isinstance(required, list) and where[-1] in required
        types = set(_types(node))
        if "default" in node or (is_required and "null" not in types):
            return []
        state, absent = ("nullable", "null") if is_required else ("optional", "leaving it out")
        if types and types <= {"boolean", "integer", "null"} and types & {"boolean", "integer"}:
            if words.states_default(description):
                return []
            kind = "boolean" if "boolean" in types else "integer"
            return [
                Finding(
                    Rule.NO_DEFAULT,
                    pointer(where),
                    f"{state} {kind} with no `default`, and the description states none",
                    f"add `default` with the value the tool uses, and say in the description what {absent} does",
                    _with(node, default=False if kind == "boolean" else node.get("minimum", 0)),
                    label,
                )
            ]
        if words.says_what_absence_means(description):
            return []
        return [
            Finding(
                Rule.OPTIONAL_UNDOCUMENTED,
                pointer(where),
                f"{state}, no `default`, and the description does not say what {absent} means",
                f'say what {absent} means ("omit for all statuses"), give a `default`, or require a value',
                _with(node, description=f"{(description or _DESCRIBE).rstrip('.')}. <what {absent} means>"),
                label,
            )
        ]

    # -- a value of a named parameter (the property itself, or its array items)

    def _value(self, where: JsonPointer, node: dict[str, Any], name: str) -> list[Finding]:
        types = _types(node)
        label = field_label(where)
        out: list[Finding] = []
        if "number" in types and "integer" not in types and words.is_money(name):
            description = _text(node.get("description"))
            unit = "in minor units of the currency (cents): 1999 means 19.99"
            out.append(
                Finding(
                    Rule.MONEY_AS_NUMBER,
                    pointer(where),
                    f"{name!r} looks like money but is typed number (a binary float)",
                    "use integer minor units (cents) and say so in the description, or a decimal string with a "
                    'pattern such as "^\\\\d+\\\\.\\\\d{2}$" and say that instead',
                    _with(node, type="integer", description=f"{description.rstrip('.')} {unit}".strip()),
                    label,
                )
            )
        fmt = words.date_format(name)
        if (
            fmt is not None
            and types
            and set(types) <= {"string", "null"}
            and not any(k in node for k in ("format", "pattern", "enum", "const"))
        ):
            shape = "YYYY-MM-DD" if fmt == "date" else "RFC 3339 with a time zone, e.g. 2024-05-17T14:30:00Z"
            out.append(
                Finding(
                    Rule.DATE_WITHOUT_FORMAT,
                    pointer(where),
                    f"{name!r} looks like a {'date' if fmt == 'date' else 'date-time'} but is a plain string "
                    "(no `format`, no `pattern`)",
                    f'add "format": "{fmt}" ({shape}) and say it in the description',
                    _with(node, format=fmt),
                    label,
                )
            )
        return out

    def _depth(self) -> list[Finding]:
        """One finding per object nested deeper than allowed, at its first too-deep field."""
        limit = self.options.max_depth
        out: list[Finding] = []
        seen: set[tuple[Any, ...]] = set()
        for param in _parameters(self.schema, (), (), (), self.resolve, frozenset()):
            named = [p for p in param.path if p is not _ITEMS]
            parent = param.path[:-1]
            if len(named) != limit + 1 or parent in seen:
                continue
            seen.add(parent)
            field = _field_name(param.path)
            out.append(
                Finding(
                    Rule.TOO_DEEP,
                    pointer(param.where),
                    f"{field!r} is nested {len(named)} levels deep (more than {limit})",
                    "flatten: lift the inner fields into the parent with a prefix (address_city), or split the tool",
                    field=field,
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
    if _untyped(node):
        return True  # unconstrained: null passes like any other value
    if "null" in _types(node) or ("const" in node and node["const"] is None):
        return True
    enum = node.get("enum")
    if isinstance(enum, list) and None in enum:
        return True
    if isinstance(node.get("$ref"), str) and _nullable(resolve(node["$ref"]), resolve, depth + 1):
        return True
    return any(_nullable(b, resolve, depth + 1) for key in ("anyOf", "oneOf") for b in _list(node.get(key)))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _unbounded_count(where: JsonPointer, node: dict[str, Any], name: str, label: str) -> list[Finding]:
    types = set(_types(node))
    if not ({"integer", "number"} & types) or any(k in node for k in (*_BOUNDS, "enum", "const")):
        return []
    if not words.COUNT_WORDS & set(words.tokens(name)):
        return []
    return [
        Finding(
            Rule.UNBOUNDED_COUNT,
            pointer(where),
            f"{name!r} looks like a count or limit but has no minimum/maximum: the lockdown accepts 0, negative "
            "and huge values",
            "add `minimum` and `maximum`",
            _with(node, minimum=1, maximum=100),
            label,
        )
    ]


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


def _format_findings(fmt: str, where: JsonPointer, settings: LockdownSettings) -> list[Finding]:
    at, label = pointer((*where, "format")), field_label(where)
    if not settings.assert_formats:
        return [
            Finding(
                Rule.FORMAT_NOT_ASSERTED,
                at,
                f'format "{fmt}" is not checked: assert_formats is off for this tool',
                "turn assert_formats on for this tool, or constrain the value with `pattern`",
                field=label,
            )
        ]
    if not validator_knows_format(fmt):
        return [
            Finding(
                Rule.FORMAT_NOT_ASSERTED,
                at,
                f'format "{fmt}" is unknown to the validator: the lockdown ignores it and any string passes',
                "use a format the validator knows, or constrain the value with `pattern`",
                field=label,
            )
        ]
    if fmt not in msg.FORMATS:
        return [
            Finding(
                Rule.FORMAT_GENERIC_HINT,
                at,
                f'format "{fmt}" is asserted, but the repair hint only says "string in \\"{fmt}\\" format" '
                "(no example)",
                "say what is meant in the description, with an example",
                field=label,
            )
        ]
    return []


def _enum_findings(enum: list[Any], where: JsonPointer, node: dict[str, Any]) -> list[Finding]:
    out = []
    at, label = pointer((*where, "enum")), field_label(where)
    for value in enum:
        meant = msg.suggest(value, enum) if isinstance(value, str) else None
        if meant is not None and meant != value:
            out.append(
                Finding(
                    Rule.ENUM_CASE_VARIANTS,
                    at,
                    f"enum members {msg.render(meant)} and {msg.render(value)} differ only in case, spaces, - or _: "
                    f"each is accepted only exactly as written, and a near miss is always pointed to "
                    f"{msg.render(meant)}",
                    "keep one spelling per value",
                    field=label,
                )
            )
    description = _text(node.get("description"))
    odd = [m for m in enum if isinstance(m, str) and words.unusual_case(m) and m not in description]
    if odd:
        lowered = [words.restyle(m, "snake_case") if isinstance(m, str) else m for m in enum]
        out.append(
            Finding(
                Rule.ENUM_CASE,
                at,
                f"enum members {', '.join(msg.render(m) for m in odd)} are in a case models rarely write "
                "unprompted, and the description does not name them",
                "use lower snake_case members, or name the exact values in the description",
                _with(node, enum=lowered),
                label,
            )
        )
    return out


# --- info: what the model is told ----------------------------------------------------------


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
        out.append(Finding(Rule.EXPECTED, pointer(param.where), f"{need}; expected: {text}", field=name))
    return out
