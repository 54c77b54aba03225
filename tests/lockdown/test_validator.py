"""Argument lockdown: the ugly-argument set from the tool-design literature, one case each."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.config import LockdownSettings
from sidecar.lockdown.schema_prep import lock_unknown_properties
from sidecar.lockdown.validator import Lockdown
from sidecar.model import FieldError, ToolCall, ToolDeclaration, Verdict

ON = LockdownSettings()

SEARCH = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 10},
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 100,
            "description": "Max results per page",
        },
        "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "status": {"type": "string", "enum": ["OPEN", "CLOSED"]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "exact": {"type": "boolean"},
        "since": {"type": "string", "format": "date"},
        "note": {"type": ["string", "null"]},
    },
    "required": ["query"],
}
ORDER = {
    "type": "object",
    "properties": {
        "customer": {
            "type": "object",
            "properties": {"email": {"type": "string", "format": "email"}},
            "required": ["email"],
        },
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                "required": ["sku"],
            },
        },
    },
}


@pytest.fixture
def lockdown() -> Lockdown:
    return Lockdown()


def check(
    lockdown: Lockdown,
    schema: dict[str, Any],
    args: dict[str, Any] | None,
    cfg: LockdownSettings = ON,
    name: str = "tool",
) -> Verdict:
    call = ToolCall("call_1", name, args, orjson.dumps(args).decode())
    return lockdown.check(call, ToolDeclaration.create(name, schema), cfg)


def only_error(verdict: Verdict) -> FieldError:
    assert not verdict.allowed
    assert verdict.status == "invalid_arguments"
    assert len(verdict.errors) == 1, verdict.errors
    return verdict.errors[0]


def search(lockdown: Lockdown, **args: Any) -> Verdict:
    return check(lockdown, SEARCH, {"query": "shoes", **args})


# -- types: no coercion ------------------------------------------------------------------------


def test_number_as_quoted_string(lockdown: Lockdown) -> None:
    err = only_error(search(lockdown, limit="10"))
    assert (err.field, err.kind) == ("limit", "type")
    assert err.problem == 'expected integer, got string "10"'
    assert err.expected == "integer between 1 and 100 — Max results per page"
    assert err.to_json() == {"field": "limit", "problem": err.problem, "expected": err.expected}


@pytest.mark.parametrize("value", [10.5, math.inf, -math.inf, math.nan])
def test_non_integers_for_integer(lockdown: Lockdown, value: float) -> None:
    err = only_error(search(lockdown, limit=value))
    assert (err.field, err.kind) == ("limit", "type")
    assert "expected integer" in err.problem


def test_1e400_never_passes(lockdown: Lockdown) -> None:
    args = orjson.loads(b'{"query": "x"}') | {"limit": float("1e400"), "ratio": float("1e400")}
    verdict = search(lockdown, **args)
    assert {e.field for e in verdict.errors} == {"limit", "ratio"}
    assert all("non-finite" in e.problem for e in verdict.errors)
    # Not even where null or anything is accepted: JSON has no infinity.
    err = only_error(search(lockdown, note=math.inf))
    assert (err.field, err.kind) == ("note", "type")
    assert "non-finite number (Infinity)" in err.problem
    err = only_error(check(lockdown, {"type": "object"}, {"x": [1, {"y": -math.inf}]}))
    assert (err.field, err.problem) == ("x[1].y", "-Infinity is not a finite number")


def test_integral_float_is_an_integer(lockdown: Lockdown) -> None:
    assert search(lockdown, limit=10.0).allowed


def test_true_as_string_for_boolean(lockdown: Lockdown) -> None:
    err = only_error(search(lockdown, exact="true"))
    assert (err.field, err.kind) == ("exact", "type")
    assert err.problem == 'expected boolean, got string "true"'
    assert "boolean" in err.expected


def test_boolean_is_not_an_integer(lockdown: Lockdown) -> None:
    err = only_error(search(lockdown, limit=True))
    assert err.problem == "expected integer, got boolean true"


def test_number_for_string(lockdown: Lockdown) -> None:
    err = only_error(search(lockdown, query=42))
    assert (err.field, err.kind) == ("query", "type")
    assert err.problem == "expected string, got integer 42"
    assert err.expected == "string of 1 to 10 characters"


# -- enums, nulls, omissions -------------------------------------------------------------------


def test_enum_wrong_case_names_the_member(lockdown: Lockdown) -> None:
    err = only_error(search(lockdown, status="open"))
    assert (err.field, err.kind) == ("status", "enum")
    assert err.problem == 'got "open", which is not allowed (did you mean "OPEN"?)'
    assert err.expected == 'one of "OPEN", "CLOSED"'


def test_enum_unrelated_value_has_no_suggestion(lockdown: Lockdown) -> None:
    err = only_error(search(lockdown, status="pending"))
    assert err.problem == 'got "pending", which is not allowed'


def test_optional_omitted_ok_but_explicit_null_refused(lockdown: Lockdown) -> None:
    assert search(lockdown).allowed
    err = only_error(search(lockdown, limit=None))
    assert (err.field, err.kind) == ("limit", "type")
    assert err.problem == "null is not allowed"
    assert "integer between 1 and 100" in err.expected
    assert search(lockdown, note=None).allowed  # nullable by its type


def test_null_tolerated_when_switched_off(lockdown: Lockdown) -> None:
    lax = LockdownSettings(reject_null_for_non_nullable=False)
    assert check(lockdown, SEARCH, {"query": "x", "limit": None}, lax).allowed
    err = only_error(check(lockdown, SEARCH, {"query": None}, lax))
    assert (err.field, err.kind) == ("query", "required")


def test_missing_required(lockdown: Lockdown) -> None:
    err = only_error(check(lockdown, SEARCH, {}))
    assert (err.field, err.kind) == ("query", "required")
    assert err.problem == 'missing required property "query"'
    assert err.expected == "string of 1 to 10 characters"


# -- boundaries --------------------------------------------------------------------------------

BOUNDARIES = [
    # field, just past, exactly at, problem words, expected words
    ("limit", 0, 1, "0 is less than the minimum 1", "between 1 and 100"),
    ("limit", 101, 100, "101 is greater than the maximum 100", "between 1 and 100"),
    ("ratio", 0, 0.000001, "not greater than the exclusive minimum 0", "greater than 0"),
    ("ratio", 1, 0.999999, "not less than the exclusive maximum 1", "less than 1"),
    ("query", "", "a", "has 0 characters, fewer than the minimum 1", "of 1 to 10 characters"),
    ("query", "a" * 11, "a" * 10, "has 11 characters, more than the maximum 10", "1 to 10"),
    ("tags", [], ["a"], "got 0 items, fewer than the minimum 1", "with 1 to 3 items"),
    ("tags", ["a"] * 4, ["a"] * 3, "got 4 items, more than the maximum 3", "with 1 to 3 items"),
]


@pytest.mark.parametrize(("field", "past", "at", "problem", "expected"), BOUNDARIES)
def test_boundaries(lockdown: Lockdown, field: str, past: Any, at: Any, problem: str, expected: str) -> None:
    args = {"query": "shoes", field: past}
    err = only_error(check(lockdown, SEARCH, args))
    assert (err.field, err.kind) == (field, "range")
    assert problem in err.problem
    assert expected in err.expected
    assert check(lockdown, SEARCH, {"query": "shoes", field: at}).allowed


def test_pattern(lockdown: Lockdown) -> None:
    err = only_error(search(lockdown, code="abc"))
    assert (err.field, err.kind) == ("code", "format")
    assert err.problem == '"abc" does not match the pattern ^[A-Z]{3}$'
    assert err.expected == "string matching the pattern ^[A-Z]{3}$"
    assert search(lockdown, code="ABC").allowed


def test_multiple_of(lockdown: Lockdown) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 5}}}
    err = only_error(check(lockdown, schema, {"n": 7}))
    assert (err.kind, err.problem) == ("range", "7 is not a multiple of 5")
    assert err.expected == "integer a multiple of 5"


# -- unknown properties ------------------------------------------------------------------------


def test_unknown_property_without_additional_properties(lockdown: Lockdown) -> None:
    err = only_error(search(lockdown, colour="red"))
    assert (err.field, err.kind) == ("colour", "unknown_property")
    assert err.problem == 'unknown property "colour"'
    assert err.expected.startswith("only the declared properties: query, limit, ratio")


def test_unknown_property_with_additional_properties_false(lockdown: Lockdown) -> None:
    schema = SEARCH | {"additionalProperties": False}
    lax = LockdownSettings(reject_unknown_properties=False)
    for cfg in (ON, lax):
        err = only_error(check(lockdown, schema, {"query": "x", "colour": "red"}, cfg))
        assert (err.field, err.kind) == ("colour", "unknown_property")


def test_unknown_property_allowed_when_switched_off(lockdown: Lockdown) -> None:
    lax = LockdownSettings(reject_unknown_properties=False)
    assert check(lockdown, SEARCH, {"query": "x", "colour": "red"}, lax).allowed


def test_explicit_open_schemas_are_respected(lockdown: Lockdown) -> None:
    mapping = {
        "type": "object",
        "properties": {"id": {"type": "string"}},
        "additionalProperties": {"type": "integer"},
    }
    assert check(lockdown, mapping, {"id": "a", "extra": 1}).allowed
    err = only_error(check(lockdown, mapping, {"id": "a", "extra": "x"}))
    assert (err.field, err.kind) == ("extra", "type")
    patterned = {
        "type": "object",
        "properties": {"id": {"type": "string"}},
        "patternProperties": {"^x-": {"type": "string"}},
    }
    assert check(lockdown, patterned, {"id": "a", "x-trace": "t"}).allowed
    err = only_error(check(lockdown, patterned, {"id": "a", "other": "t"}))
    assert (err.field, err.kind) == ("other", "unknown_property")
    assert check(lockdown, {"type": "object"}, {"anything": 1}).allowed  # free-form object


def test_allof_branches_are_not_locked_individually(lockdown: Lockdown) -> None:
    schema = {
        "type": "object",
        "allOf": [
            {"properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"$ref": "#/$defs/B"},
        ],
        "$defs": {"B": {"properties": {"b": {"type": "integer"}}}},
    }
    assert check(lockdown, schema, {"a": "x", "b": 1}).allowed
    err = only_error(check(lockdown, schema, {"a": "x", "b": 1, "c": 2}))
    assert (err.field, err.kind) == ("c", "unknown_property")
    assert "a, b" in err.expected


def test_allof_in_draft7_merges_property_names(lockdown: Lockdown) -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "allOf": [{"properties": {"a": {"type": "string"}}}, {"properties": {"b": {}}}],
    }
    prepared = lock_unknown_properties(schema)
    assert prepared["additionalProperties"] is False
    assert set(prepared["properties"]) == {"a", "b"}
    assert "additionalProperties" not in schema  # the declaration itself is never mutated
    assert check(lockdown, schema, {"a": "x", "b": 1}).allowed
    err = only_error(check(lockdown, schema, {"a": "x", "c": 1}))
    assert (err.field, err.kind) == ("c", "unknown_property")


def test_one_of_reports_the_closest_shape(lockdown: Lockdown) -> None:
    schema = {
        "type": "object",
        "properties": {
            "shape": {
                "oneOf": [
                    {
                        "type": "object",
                        "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
                        "required": ["kind", "r"],
                    },
                    {
                        "type": "object",
                        "properties": {"kind": {"const": "square"}, "side": {"type": "number"}},
                        "required": ["kind", "side"],
                    },
                ]
            }
        },
    }
    assert check(lockdown, schema, {"shape": {"kind": "circle", "r": 1}}).allowed
    err = only_error(check(lockdown, schema, {"shape": {"kind": "circle", "r": "big"}}))
    assert (err.field, err.kind) == ("shape.r", "type")
    err = only_error(check(lockdown, schema, {"shape": {"kind": "circle", "r": 1, "z": 0}}))
    assert (err.field, err.kind) == ("shape.z", "unknown_property")
    err = only_error(check(lockdown, schema, {"shape": {"kind": "hexagon"}}))
    assert (err.field, err.kind) == ("shape", "other")
    assert "does not match any of the allowed shapes" in err.problem
    assert "side" in err.expected and "r" in err.expected


def test_nullable_any_of_is_a_type_error(lockdown: Lockdown) -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
    }
    assert check(lockdown, schema, {"n": None}).allowed
    err = only_error(check(lockdown, schema, {"n": 5}))
    assert (err.kind, err.problem) == ("type", "expected string or null, got integer 5")


# -- formats -----------------------------------------------------------------------------------

FORMATS = [
    ("date", "2024-05-17", "next Tuesday", "YYYY-MM-DD"),
    ("date-time", "2024-05-17T14:30:00Z", "2024-05-17 at 2pm", "RFC 3339"),
    ("time", "14:30:00Z", "half past two", "HH:MM:SS"),
    ("email", "ann@example.com", "ann at example", "email address"),
    ("uuid", "123e4567-e89b-12d3-a456-426614174000", "123e4567", "UUID"),
    ("uri", "https://example.com/a", "example.com/a", "URI"),
    ("ipv4", "192.0.2.1", "192.0.2.256", "IPv4"),
    ("ipv6", "2001:db8::1", "2001:db8:::1:", "IPv6"),
]


@pytest.mark.parametrize(("fmt", "good", "bad", "expected"), FORMATS)
def test_formats(lockdown: Lockdown, fmt: str, good: str, bad: str, expected: str) -> None:
    schema = {"type": "object", "properties": {"v": {"type": "string", "format": fmt}}}
    assert check(lockdown, schema, {"v": good}).allowed
    err = only_error(check(lockdown, schema, {"v": bad}))
    assert (err.field, err.kind) == ("v", "format")
    assert f'(format "{fmt}")' in err.problem and err.problem.startswith(f'"{bad}" is not a valid')
    assert expected in err.expected
    lax = LockdownSettings(assert_formats=False)
    assert check(lockdown, schema, {"v": bad}, lax).allowed


def test_date_as_free_text(lockdown: Lockdown) -> None:
    err = only_error(search(lockdown, since="next Tuesday"))
    assert err.problem == '"next Tuesday" is not a valid date (format "date")'
    assert err.expected == "a date in YYYY-MM-DD form, e.g. 2024-05-17"


# -- nesting, $ref, several errors ---------------------------------------------------------------


def test_errors_inside_nested_objects_and_arrays(lockdown: Lockdown) -> None:
    args = {
        "customer": {"email": "nope", "vip": True},
        "items": [{"sku": "a"}, {"sku": "b", "qty": 1}, {"qty": "2"}],
    }
    verdict = check(lockdown, ORDER, args)
    got = {(e.field, e.kind) for e in verdict.errors}
    assert got == {
        ("customer.email", "format"),
        ("customer.vip", "unknown_property"),
        ("items[2].sku", "required"),
        ("items[2].qty", "type"),
    }
    sku = next(e for e in verdict.errors if e.field == "items[2].sku")
    assert sku.problem == 'missing required property "sku"'


def test_errors_are_stable_deduplicated_and_capped(lockdown: Lockdown) -> None:
    args = {"items": [{"qty": "x"} for _ in range(30)]}
    first = check(lockdown, ORDER, args).errors
    assert len(first) == 20
    assert first == check(lockdown, ORDER, args).errors
    assert len({(e.field, e.problem) for e in first}) == 20


def test_long_values_are_truncated(lockdown: Lockdown) -> None:
    err = only_error(search(lockdown, limit="9" * 500))
    assert len(err.problem) < 130 and err.problem.endswith("…")


def test_ref_and_defs(lockdown: Lockdown) -> None:
    schema = {
        "type": "object",
        "properties": {
            "customer": {"$ref": "#/$defs/Customer", "description": "Who pays"},
            "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}},
        },
        "$defs": {
            "Customer": {
                "type": "object",
                "properties": {"email": {"type": "string", "format": "email"}},
            },
            "Line": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "description": "Stock keeping unit"},
                    "qty": {"type": "integer", "minimum": 1},
                },
                "required": ["sku"],
            },
        },
    }
    ok = {"customer": {"email": "a@example.com"}, "lines": [{"sku": "A", "qty": 1}]}
    assert check(lockdown, schema, ok).allowed
    bad = {"customer": "ann", "lines": [{"sku": "A", "qty": 0}, {"qty": 1, "price": 3}]}
    verdict = check(lockdown, schema, bad)
    by_field = {e.field: e for e in verdict.errors}
    assert set(by_field) == {"customer", "lines[0].qty", "lines[1].sku", "lines[1].price"}
    assert by_field["customer"].expected.endswith("— Who pays")
    assert by_field["lines[0].qty"].problem == "0 is less than the minimum 1"
    assert by_field["lines[1].sku"].expected == "string — Stock keeping unit"
    assert by_field["lines[1].price"].kind == "unknown_property"


# -- unknown tool, unparseable arguments, switched off -------------------------------------------


def test_unknown_tool(lockdown: Lockdown) -> None:
    call = ToolCall("c", "delete_all", {}, "{}")
    verdict = lockdown.check(call, None, ON, declared_names=["search", "order"])
    assert verdict.status == "unknown_tool"
    (err,) = verdict.errors
    assert err.field == "" and "'delete_all' is not declared" in err.problem
    assert err.expected == "one of the declared tools: order, search"


def test_unparseable_arguments(lockdown: Lockdown) -> None:
    call = ToolCall("c", "search", None, '{"query": "x",', parse_error="invalid JSON at line 1 column 15")
    verdict = lockdown.check(call, ToolDeclaration.create("search", SEARCH), ON)
    err = only_error(verdict)
    assert (err.field, err.kind) == ("", "type")
    assert "line 1 column 15" in err.problem
    assert err.expected == "a JSON object matching the tool's schema"


def test_switched_off_allows_bad_arguments_but_not_unknown_tools(lockdown: Lockdown) -> None:
    off = LockdownSettings(enabled=False)
    assert check(lockdown, SEARCH, {"limit": "ten", "colour": 1}, off).allowed
    assert lockdown.compiled_count == 0
    assert not lockdown.check(ToolCall("c", "x", {}, "{}"), None, off).allowed
    assert not lockdown.check(
        ToolCall("c", "search", None, "{", parse_error="invalid JSON"),
        ToolDeclaration.create("search", SEARCH),
        off,
    ).allowed


def test_broken_schema_fails_closed(lockdown: Lockdown) -> None:
    verdict = check(lockdown, {"type": "object", "properties": {"a": {"type": "integr"}}}, {})
    err = only_error(verdict)
    assert verdict.retryable is False and "cannot be used" in err.problem
    remote = {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}
    assert not check(lockdown, remote, {"a": 1}).allowed  # never fetched, never trusted


# -- caching -----------------------------------------------------------------------------------


def test_compiled_once_per_schema(lockdown: Lockdown) -> None:
    decl = ToolDeclaration.create("search", SEARCH)
    for i in range(1000):
        args = {"query": "x", "limit": i % 150}
        lockdown.check(ToolCall(str(i), "search", args, ""), decl, ON)
    assert lockdown.compiled_count == 1
    check(lockdown, ORDER, {})
    assert lockdown.compiled_count == 2
    check(lockdown, SEARCH, {"query": "x"}, LockdownSettings(assert_formats=False))
    assert lockdown.compiled_count == 3  # the settings change what is compiled


def test_cache_is_bounded_by_bytes() -> None:
    schemas = [{"type": "object", "properties": {f"p{i}": {"type": "string"}}} for i in range(3)]
    weight = 4 * len(orjson.dumps(schemas[0]))  # each entry weighs its JSON size times four
    lockdown = Lockdown(cache_bytes=2 * weight)
    for schema in [*schemas, schemas[2], schemas[0]]:
        check(lockdown, schema, {})
    assert lockdown.compiled_count == 4  # schemas[0] was evicted, compiled again
    assert lockdown.cached_bytes <= 2 * weight


def test_twenty_big_schemas_never_hold_more_than_the_cache_bound() -> None:
    """The observed failure: 20 distinct 5 MB schemas kept +99 MB. Now each is refused above the
    size limit without compiling, and compiled ones stay within the byte bound."""
    big = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 200} for i in range(300)}}
    lockdown = Lockdown(cache_bytes=1024 * 1024, max_schema_bytes=32 * 1024)
    for i in range(20):
        schema = {**big, "title": str(i)}
        decl = ToolDeclaration.create("big", schema)
        verdict = lockdown.check(ToolCall(str(i), "big", {}, ""), decl, ON)
        assert not verdict.allowed and "above the sidecar's limit" in verdict.errors[0].problem
    assert lockdown.compiled_count == 0 and lockdown.cached_bytes == 0


# -- properties --------------------------------------------------------------------------------

SIMPLE = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "minimum": -5, "maximum": 5},
        "s": {"type": "string", "maxLength": 8},
        "b": {"type": "boolean"},
        "e": {"enum": ["red", "green"]},
    },
    "required": ["n"],
}
VALID = st.fixed_dictionaries(
    {"n": st.integers(-5, 5)},
    optional={
        "s": st.text(max_size=8),
        "b": st.booleans(),
        "e": st.sampled_from(["red", "green"]),
    },
)


@settings(max_examples=150, deadline=None)
@given(VALID)
def test_any_valid_instance_passes(args: dict[str, Any]) -> None:
    assert check(SHARED, SIMPLE, args).allowed


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_any_string_for_an_integer_fails(text: str) -> None:
    err = only_error(check(SHARED, SIMPLE, {"n": text}))
    assert (err.field, err.kind) == ("n", "type")
    assert err.problem.startswith("expected integer, got string")


SHARED = Lockdown()
