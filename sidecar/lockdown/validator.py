"""Argument lockdown: a tool call's arguments must match the tool's declared JSON Schema exactly.

The provider's own validation is loose (or absent): models send `"10"` for integers, enum
members in the wrong case, invented properties, dates as prose. Each of those reaches a real
tool and fails there, or worse, does something. Lockdown refuses such a call with a structured
error the model can act on (DESIGN.md "Verdicts and enforcement").

Decisions (documented in the report as well):

* No coercion: `"10"`, `10.5`, `"true"`, a number for a string are errors. `10.0` passes an
  integer field: it is the same JSON number as `10` (JSON Schema agrees). Non-finite floats
  (`1e400` parsed to infinity, NaN) never pass anywhere, not even a nullable or untyped field:
  JSON cannot represent them, so they are reported as errors of their own.
* `pattern` failures are reported with kind "format" (a pattern is a textual format).
* Unknown properties: see `schema_prep` (plain objects get `additionalProperties: false`,
  composition owners `unevaluatedProperties: false`, `allOf` branches are never locked).
* Schemas are compiled once per (schema hash, unknown-property rule, format rule) and kept in a
  bounded LRU; remote `$ref`s are never fetched (offline). A schema that cannot be compiled
  refuses the call with `retryable: false` rather than letting unchecked arguments through.
* With `reject_null_for_non_nullable` off, an explicit null in an object property is treated as
  if the property were omitted (so a null *required* property is reported as missing).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterable, Sized
from dataclasses import dataclass, field
from typing import Any, cast

import jsonschema_rs
import orjson
from cachetools import LRUCache

from sidecar.config import LockdownSettings
from sidecar.lockdown import messages as msg
from sidecar.lockdown.schema_prep import (
    JsonPointer,
    declared_names,
    deep_copy,
    lock_unknown_properties,
    make_resolver,
    pointer_get,
    walk,
)
from sidecar.model import FieldError, ToolCall, ToolDeclaration, Verdict, canonical_json, sha256_hex

MAX_ERRORS = 20

_KIND_LABEL: dict[str, str] = {
    "Type": "type",
    "Required": "required",
    "AdditionalProperties": "unknown_property",
    "UnevaluatedProperties": "unknown_property",
    "Enum": "enum",
    "Constant": "enum",
    "Format": "format",
    "Pattern": "format",
    "BacktrackLimitExceeded": "format",
    "RegexEngineFailure": "format",
    "Minimum": "range",
    "Maximum": "range",
    "ExclusiveMinimum": "range",
    "ExclusiveMaximum": "range",
    "MinLength": "range",
    "MaxLength": "range",
    "MinItems": "range",
    "MaxItems": "range",
    "MinProperties": "range",
    "MaxProperties": "range",
    "MultipleOf": "range",
}

# Keywords of an evaluation path, by how they move through the schema (see _site_description).
_SAME_LIST = frozenset({"allOf", "anyOf", "oneOf"})
_SAME_ONE = frozenset({"if", "then", "else", "not"})
_SAME_MAP = frozenset({"dependentSchemas", "dependencies"})
_CHILD_MAP = frozenset({"properties", "patternProperties"})
_CHILD_ONE = frozenset(
    {
        "additionalProperties",
        "unevaluatedProperties",
        "unevaluatedItems",
        "additionalItems",
        "contains",
        "propertyNames",
    }
)
_MISSING = object()
_ERR = jsonschema_rs.ValidationError


# Size limits: keyword -> (container type, what is counted, comparison, which limit).
_SIZE_LIMITS: dict[str, tuple[type, str, str, str]] = {
    "MinLength": (str, "characters", "fewer", "minimum"),
    "MaxLength": (str, "characters", "more", "maximum"),
    "MinItems": (list, "items", "fewer", "minimum"),
    "MaxItems": (list, "items", "more", "maximum"),
    "MinProperties": (dict, "properties", "fewer", "minimum"),
    "MaxProperties": (dict, "properties", "more", "maximum"),
}
_SINGULAR = {"characters": "character", "items": "item", "properties": "property"}


@dataclass(slots=True)
class CompiledSchema:
    """One compiled validator plus what its error messages need, computed at compile time."""

    validator: jsonschema_rs.Validator | None
    root: Any
    expected: dict[JsonPointer, str]
    compile_error: str = ""
    weight: int = 1  # its estimated memory, for the bounded cache
    _descriptions: dict[tuple[str | int, ...], str | None] = field(default_factory=dict)
    # Error-path wording memoised per schema location (bounded by the schema's size).
    _memo: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    _resolve: Callable[[str], Any] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._resolve = make_resolver(self.root)

    # -- the error path ---------------------------------------------------------------------

    def field_errors(self, args: dict[str, Any]) -> list[FieldError]:
        """All problems of `args`, de-duplicated, in validator order, capped at MAX_ERRORS."""
        assert self.validator is not None
        out: list[FieldError] = []
        weak: list[FieldError] = []
        for error in self.validator.iter_errors(args):
            out.extend(self._convert(error, args, weak))
            if len(out) > 4 * MAX_ERRORS:
                break
        if not out:
            out = weak  # only properties of a shape that did not apply: report them after all
        covered = {e.field for e in out}
        for path, value in _nonfinite_paths(args) if _has_nonfinite(args) else ():
            name = msg.field_path(path)
            if name not in covered:
                out.append(
                    FieldError(
                        name,
                        f"{msg.render(value)} is not a finite number",
                        "a finite number",
                        "type",
                    )
                )
        seen: set[tuple[str, str]] = set()
        unique: list[FieldError] = []
        for error_ in out:
            key = (error_.field, error_.problem)
            if key not in seen:
                seen.add(key)
                unique.append(error_)
        return unique[:MAX_ERRORS]

    def _convert(self, error: jsonschema_rs.ValidationError, args: Any, weak: list[FieldError]) -> list[FieldError]:
        """One validator error as FieldErrors (several for unknown properties).

        `weak` collects unevaluated properties that some branch does declare: when a oneOf
        fails, none of its properties count as evaluated, and listing them as unknown would
        drown the real error; they are reported only if nothing else is wrong.
        """
        kind = error.kind
        name = type(kind).__name__
        path = list(error.instance_path)
        where = msg.field_path(path)
        actual = _lookup(args, path)
        if actual is _MISSING:
            actual = error.instance
        shown = msg.render(actual)
        label = _KIND_LABEL.get(name, "other")
        node_ptr = tuple(error.schema_path[:-1])
        node = pointer_get(self.root, node_ptr)

        if isinstance(kind, jsonschema_rs.ValidationErrorKind.Required):
            prop = kind.property
            props = node.get("properties") if isinstance(node, dict) else None
            sub = props.get(prop) if isinstance(props, dict) else None
            memo_key = ("required", node_ptr, prop)
            expected = self._memo.get(memo_key, "")
            if not expected:
                expected = msg.describe(sub, self._resolve) if sub is not None else "a value"
                self._memo[memo_key] = expected
            return [
                FieldError(
                    msg.field_path([*path, prop]),
                    f'missing required property "{prop}"',
                    expected,
                    label,
                )
            ]
        if isinstance(kind, jsonschema_rs.ValidationErrorKind.AdditionalProperties):
            expected = self._declared(node_ptr, node)
            return [_unknown(path, extra, expected) for extra in kind.unexpected]
        if isinstance(kind, jsonschema_rs.ValidationErrorKind.UnevaluatedProperties):
            expected = self._declared(node_ptr, node)
            known = self._known(node_ptr, node)
            weak.extend(_unknown(path, x, expected) for x in kind.unexpected if x in known)
            return [_unknown(path, x, expected) for x in kind.unexpected if x not in known]
        if isinstance(
            kind,
            (
                jsonschema_rs.ValidationErrorKind.AnyOf,
                jsonschema_rs.ValidationErrorKind.OneOfNotValid,
            ),
        ):
            return self._no_shape(error, kind.context, args, path, actual, weak)

        expected = self._expected(node_ptr, node, tuple(error.evaluation_path))
        problem: str
        if isinstance(kind, jsonschema_rs.ValidationErrorKind.Type):
            problem = _type_problem(kind.types, actual)
        elif isinstance(kind, jsonschema_rs.ValidationErrorKind.Enum):
            problem = f"got {shown}, which is not allowed"
            meant = msg.suggest(actual, list(kind.options))
            if meant is not None:
                problem += f" (did you mean {msg.render(meant)}?)"
        elif isinstance(kind, jsonschema_rs.ValidationErrorKind.Constant):
            problem = f"got {shown}, but only {msg.render(kind.expected_value)} is allowed"
        elif isinstance(kind, jsonschema_rs.ValidationErrorKind.Format):
            noun = msg.FORMATS.get(kind.format, (kind.format, ""))[0]
            problem = f'{shown} is not a valid {noun} (format "{kind.format}")'
        elif isinstance(kind, jsonschema_rs.ValidationErrorKind.Pattern):
            problem = f"{shown} does not match the pattern {kind.pattern}"
        elif isinstance(kind, jsonschema_rs.ValidationErrorKind.Minimum):
            problem = f"{shown} is less than the minimum {kind.limit}"
        elif isinstance(kind, jsonschema_rs.ValidationErrorKind.Maximum):
            problem = f"{shown} is greater than the maximum {kind.limit}"
        elif isinstance(kind, jsonschema_rs.ValidationErrorKind.ExclusiveMinimum):
            problem = f"{shown} is not greater than the exclusive minimum {kind.limit}"
        elif isinstance(kind, jsonschema_rs.ValidationErrorKind.ExclusiveMaximum):
            problem = f"{shown} is not less than the exclusive maximum {kind.limit}"
        elif isinstance(kind, jsonschema_rs.ValidationErrorKind.MultipleOf):
            problem = f"{shown} is not a multiple of {kind.multiple_of}"
        elif name in _SIZE_LIMITS:
            container, counted, side, word = _SIZE_LIMITS[name]
            size = len(cast(Sized, actual)) if isinstance(actual, container) else 0
            noun = counted if size != 1 else _SINGULAR[counted]
            what = f"{shown} has {size} {noun}" if container is str else f"got {size} {noun}"
            problem = f"{what}, {side} than the {word} {getattr(kind, 'limit', '?')}"
        elif isinstance(kind, jsonschema_rs.ValidationErrorKind.UniqueItems):
            problem = f"the items of {shown} are not unique"
        elif isinstance(kind, jsonschema_rs.ValidationErrorKind.OneOfMultipleValid):
            problem = f"{shown} matches more than one of the allowed shapes (exactly one must match)"
        elif isinstance(kind, jsonschema_rs.ValidationErrorKind.FalseSchema):
            if path and isinstance(path[-1], str):
                return [
                    FieldError(
                        where,
                        f'unknown property "{path[-1]}"',
                        "the property must be left out",
                        "unknown_property",
                    )
                ]
            problem, expected = f"{shown} is not allowed here", "no value at this position"
        elif isinstance(kind, jsonschema_rs.ValidationErrorKind.Not):
            problem = f"{shown} matches a shape that is not allowed"
            expected = "a value that is not " + msg.describe(kind.schema, self._resolve)
        elif isinstance(kind, jsonschema_rs.ValidationErrorKind.Contains):
            problem = "none of the items has the required shape"
            contains = node.get("contains") if isinstance(node, dict) else None
            expected = "an array containing at least one " + msg.describe(contains, self._resolve)
        elif isinstance(
            kind,
            (
                jsonschema_rs.ValidationErrorKind.BacktrackLimitExceeded,
                jsonschema_rs.ValidationErrorKind.RegexEngineFailure,
            ),
        ):
            problem = f"{shown} could not be checked against the pattern (too complex)"
        elif isinstance(kind, jsonschema_rs.ValidationErrorKind.UnevaluatedItems):
            return [
                FieldError(msg.field_path([*path, i]), "unexpected extra item", expected, "other")
                for i in kind.unexpected
            ]
        else:
            problem = msg.truncate(error.message, 200)
        return [FieldError(where, problem, expected, label)]

    def _no_shape(
        self,
        error: jsonschema_rs.ValidationError,
        context: list[list[jsonschema_rs.ValidationError]],
        args: Any,
        path: list[str | int],
        actual: Any,
        weak: list[FieldError],
    ) -> list[FieldError]:
        """anyOf/oneOf: a type error if only the type is wrong, else the closest shape's errors."""
        where = msg.field_path(path)
        node_ptr = tuple(error.schema_path[:-1])
        expected = self._expected(node_ptr, pointer_get(self.root, node_ptr), tuple(error.evaluation_path))
        type_kind = jsonschema_rs.ValidationErrorKind.Type
        if context and all(
            len(b) == 1 and isinstance(b[0].kind, type_kind) and list(b[0].instance_path) == path for b in context
        ):
            types: list[str] = []
            for branch in context:
                kind = branch[0].kind
                assert isinstance(kind, type_kind)
                types += [t for t in kind.types if t not in types]
            return [FieldError(where, _type_problem(types, actual), expected, "type")]

        def score(branch: list[jsonschema_rs.ValidationError]) -> tuple[bool, bool, int]:
            wrong_type = any(isinstance(e.kind, type_kind) and list(e.instance_path) == path for e in branch)
            wrong_tag = any(
                isinstance(
                    e.kind,
                    (
                        jsonschema_rs.ValidationErrorKind.Constant,
                        jsonschema_rs.ValidationErrorKind.Enum,
                    ),
                )
                and len(e.instance_path) == len(path) + 1
                for e in branch
            )
            return wrong_type, wrong_tag, len(branch)

        scored = sorted((score(b), i) for i, b in enumerate(context))
        if scored and not scored[0][0][0] and (len(scored) == 1 or scored[0][0] < scored[1][0]):
            best = context[scored[0][1]]
            out: list[FieldError] = []
            for inner in best:
                out.extend(self._convert(inner, args, weak))
            if out:
                return out
        problem = f"{msg.render(actual)} does not match any of the allowed shapes"
        return [FieldError(where, problem, "one of: " + expected, "other")]

    def expected_at(self, pointer: JsonPointer, evaluation: tuple[str | int, ...] | None = None) -> str:
        """The `expected` text the model receives for a value failing at schema location
        `pointer`, reached through `evaluation` (the keyword path, via `$ref`s; default: the
        pointer itself). Public so `sidecar schemas lint` shows the lockdown's own wording."""
        site = pointer if evaluation is None else evaluation
        return self._expected(pointer, pointer_get(self.root, pointer), (*site, "type"))

    # -- compile-time maps, memoised on first use -------------------------------------------

    def _expected(self, pointer: JsonPointer, node: Any, evaluation: tuple[str | int, ...]) -> str:
        base = self.expected.get(pointer)
        if base is None:
            base = msg.describe(node, self._resolve, with_description=False)
        desc = self._site_description(evaluation)
        return f"{base} — {msg.truncate(desc, msg.MAX_DESCRIPTION_CHARS)}" if desc else base

    def _known(self, pointer: JsonPointer, node: Any) -> frozenset[str]:
        key = ("known", pointer)
        known: frozenset[str] | None = self._memo.get(key)
        if known is None:
            names = declared_names(node, self._resolve) if isinstance(node, dict) else []
            known = self._memo[key] = frozenset(names)
        return known

    def _declared(self, pointer: JsonPointer, node: Any) -> str:
        key = ("declared", pointer)
        text: str | None = self._memo.get(key)
        if text is None:
            text = self._memo[key] = self._declared_text(node)
        return text

    def _declared_text(self, node: Any) -> str:
        if not isinstance(node, dict):
            return "no other properties"
        names = declared_names(node, self._resolve)
        patterns = node.get("patternProperties")
        text = "only the declared properties: " + ", ".join(names[: msg.MAX_LISTED]) if names else "no properties"
        if isinstance(patterns, dict) and patterns:
            text += " (or names matching " + msg.join_or(list(patterns)) + ")"
        return text

    def _site_description(self, evaluation: tuple[str | int, ...]) -> str | None:
        """The outermost `description` at the failing value's location, following `$ref`s.

        The parameter's own description usually sits on the `$ref` site
        (`{"$ref": "#/$defs/Customer", "description": "who pays"}`), not on the target.
        """
        if evaluation in self._descriptions:
            return self._descriptions[evaluation]
        node: Any = self.root
        found: str | None = _description_of(node)
        segments = list(evaluation[:-1])
        i = 0
        while i < len(segments) and isinstance(node, dict):
            key = segments[i]
            new_location = False
            if key == "$ref":
                node = self._resolve(str(node.get("$ref")))
            elif (
                key in _SAME_LIST
                or key in _SAME_MAP
                or (key in ("items", "prefixItems") and isinstance(node.get(key), list))
            ):
                new_location = key in ("items", "prefixItems")
                i += 1
                node = pointer_get(node, (key, segments[i])) if i < len(segments) else None
            elif key in _CHILD_MAP:
                new_location = True
                i += 1
                node = pointer_get(node, (key, segments[i])) if i < len(segments) else None
            elif key in _SAME_ONE:
                node = node.get(key)
            elif key in _CHILD_ONE or key == "items":
                new_location = True
                node = node.get(key)
            else:
                node = None
            if new_location:
                found = None
            if found is None:
                found = _description_of(node)
            i += 1
        self._descriptions[evaluation] = found
        return found


def _unknown(path: list[str | int], name: str, expected: str) -> FieldError:
    return FieldError(msg.field_path([*path, name]), f'unknown property "{name}"', expected, "unknown_property")


def _description_of(node: Any) -> str | None:
    desc = node.get("description") if isinstance(node, dict) else None
    return desc.strip() if isinstance(desc, str) and desc.strip() else None


def _type_problem(types: list[str], actual: Any) -> str:
    wanted = msg.join_or(list(types))
    if actual is None:
        return "null is not allowed"
    if isinstance(actual, float) and not math.isfinite(actual):
        return f"expected {wanted}, got a non-finite number ({msg.render(actual)})"
    return f"expected {wanted}, got {msg.json_type(actual)} {msg.render(actual)}"


def _lookup(value: Any, path: list[str | int]) -> Any:
    for part in path:
        if isinstance(value, dict):
            if not isinstance(part, str) or part not in value:
                return _MISSING
            value = value[part]
        elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
            value = value[part]
        else:
            return _MISSING
    return value


def _has_nonfinite(value: Any) -> bool:
    """True if any float in the arguments is inf or NaN (jsonschema-rs cannot represent them).

    Runs on every call, so it is a flat loop: `x - x` is nan exactly for inf and nan.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is float and item - item != 0:
            return True
    return False


def _nonfinite_paths(value: Any, path: tuple[str | int, ...] = ()) -> list[tuple[tuple[str | int, ...], float]]:
    if isinstance(value, float):
        return [] if math.isfinite(value) else [(path, value)]
    out: list[tuple[tuple[str | int, ...], float]] = []
    if isinstance(value, dict):
        for key, sub in value.items():
            out += _nonfinite_paths(sub, (*path, key))
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            out += _nonfinite_paths(sub, (*path, i))
    return out


def _without_nulls(value: Any) -> Any:
    """A copy with null-valued object properties removed (null treated as omitted)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _weight(entry: CompiledSchema) -> int:
    return entry.weight


def compile_schema(schema: dict[str, Any], reject_unknown: bool, assert_formats: bool) -> CompiledSchema:
    """Prepare and compile once; everything the error path needs is derived here."""
    original = deep_copy(schema)
    prepared = lock_unknown_properties(original) if reject_unknown else original
    try:
        validator = _build(prepared, assert_formats)
    except Exception as exc:  # the lockdown rewrite must never make a valid schema unusable
        if prepared is original:
            return CompiledSchema(None, original, {}, compile_error=_first_line(exc))
        try:
            validator, prepared = _build(original, assert_formats), original
        except Exception as exc2:
            return CompiledSchema(None, original, {}, compile_error=_first_line(exc2))
    resolve = make_resolver(prepared)
    expected = {pointer: msg.describe(node, resolve, with_description=False) for pointer, node in walk(prepared)}
    return CompiledSchema(validator, prepared, expected)


def _build(schema: dict[str, Any], assert_formats: bool) -> jsonschema_rs.Validator:
    # offline: a tool schema must never make the sidecar fetch a URL (SSRF, latency).
    return jsonschema_rs.validator_for(schema, validate_formats=assert_formats, offline=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return msg.truncate(text[0] if text else type(exc).__name__, 200)


# A compiled schema costs several times its JSON in memory (validator, prepared copy, the
# expected texts per location): the cache weighs each entry at this multiple of its JSON size.
_WEIGHT_PER_BYTE = 4
# Schemas larger than this are compiled in a worker thread (`prepare`), so the event loop keeps
# serving other requests while the GIL is shared (compiling ~100 KiB takes ~40 ms).
THREADED_COMPILE_BYTES = 16 * 1024
CacheKey = tuple[str, bool, bool]


class Lockdown:
    """Validates tool-call arguments against their declared schemas: compiled once, kept in an
    LRU bounded by (estimated) bytes, and never compiled above `max_schema_bytes`."""

    def __init__(self, cache_bytes: int = 64 * 1024 * 1024, max_schema_bytes: int = 512 * 1024) -> None:
        self.max_schema_bytes = max_schema_bytes
        self.compiled_count = 0
        self._cache: LRUCache[CacheKey, CompiledSchema] = LRUCache(maxsize=cache_bytes, getsizeof=_weight)

    @staticmethod
    def _key(declaration: ToolDeclaration, settings: LockdownSettings) -> CacheKey:
        schema_hash = declaration.schema_hash or sha256_hex(canonical_json(declaration.schema))
        return (schema_hash, settings.reject_unknown_properties, settings.assert_formats)

    def _too_large(self, declaration: ToolDeclaration) -> CompiledSchema | None:
        size = declaration.schema_bytes or len(orjson.dumps(declaration.schema))
        if size <= self.max_schema_bytes:
            return None
        limit = self.max_schema_bytes
        error = f"the schema is {size} bytes, above the sidecar's limit of {limit} (limits.max_schema_bytes)"
        return CompiledSchema(None, {}, {}, compile_error=error)

    def _store(self, key: CacheKey, entry: CompiledSchema, size: int) -> CompiledSchema:
        entry.weight = max(1, size) * _WEIGHT_PER_BYTE
        self.compiled_count += 1
        if entry.weight <= self._cache.maxsize:
            self._cache[key] = entry
        return entry

    def compiled(self, declaration: ToolDeclaration, settings: LockdownSettings) -> CompiledSchema:
        """The compiled schema for a declaration under these settings (cached)."""
        key = self._key(declaration, settings)
        entry = self._cache.get(key)
        if entry is not None:
            return entry
        refused = self._too_large(declaration)
        if refused is not None:
            return refused
        size = declaration.schema_bytes or len(orjson.dumps(declaration.schema))
        return self._store(key, compile_schema(declaration.schema, key[1], key[2]), size)

    async def prepare(self, declaration: ToolDeclaration, settings: LockdownSettings) -> None:
        """Compile a large schema in a worker thread before `check` needs it (then a cache hit)."""
        key = self._key(declaration, settings)
        if key in self._cache or declaration.schema_bytes < THREADED_COMPILE_BYTES:
            return
        if self._too_large(declaration) is not None:
            return
        entry = await asyncio.to_thread(compile_schema, declaration.schema, key[1], key[2])
        self._store(key, entry, declaration.schema_bytes)

    @property
    def cached_bytes(self) -> int:
        return int(self._cache.currsize)

    def check(
        self,
        call: ToolCall,
        declaration: ToolDeclaration | None,
        settings: LockdownSettings,
        declared_names: Iterable[str] = (),
    ) -> Verdict:
        if declaration is None:
            names = ", ".join(sorted(declared_names)[: msg.MAX_LISTED])
            return Verdict.reject(
                "unknown_tool",
                [
                    FieldError(
                        "",
                        f"tool {call.name!r} is not declared in this request",
                        f"one of the declared tools: {names}" if names else "no tools are declared",
                        "other",
                    )
                ],
            )
        args = call.arguments
        if args is None:
            why = call.parse_error or "the arguments are not a JSON object"
            return Verdict.reject(
                "invalid_arguments",
                [
                    FieldError(
                        "",
                        msg.truncate(f"the arguments could not be read: {why}", 200),
                        "a JSON object matching the tool's schema",
                        "type",
                    )
                ],
            )
        if not settings.enabled:
            return Verdict.allow()
        entry = self.compiled(declaration, settings)
        validator = entry.validator
        if validator is None:
            verdict = Verdict.reject(
                "invalid_arguments",
                [
                    FieldError(
                        "",
                        f"the declared schema of tool {declaration.name!r} cannot be used: {entry.compile_error}",
                        "a tool declaration with a valid JSON Schema",
                        "other",
                    )
                ],
            )
            verdict.retryable = False
            return verdict
        # Read by orjson: no NaN or infinity to look for (`ToolCall.read_by_orjson`); nor in
        # the same arguments without their nulls below.
        finite = call.finite_arguments
        if validator.is_valid(args) and (finite or not _has_nonfinite(args)):
            return Verdict.allow()
        if not settings.reject_null_for_non_nullable:
            args = _without_nulls(args)
            if validator.is_valid(args) and (finite or not _has_nonfinite(args)):
                return Verdict.allow()
        errors = entry.field_errors(args)
        if not errors:  # cannot happen, but never let an invalid call through silently
            errors = [
                FieldError(
                    "",
                    "the arguments do not match the schema",
                    "arguments matching the tool's schema",
                    "other",
                )
            ]
        return Verdict.reject("invalid_arguments", errors)
