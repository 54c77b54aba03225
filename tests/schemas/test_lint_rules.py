"""Every lint rule: an example that triggers it (at the pointer named) and one that does not."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sidecar.config import Settings
from sidecar.lockdown import validator as lockdown_module
from sidecar.lockdown.validator import Lockdown
from sidecar.schemas import Rule, Severity, lint_file
from sidecar.schemas.findings import RULES
from sidecar.schemas.load import load_document

GOOD = "Find orders by text. Returns at most 20 orders, newest first."
TEXT = {"type": "string", "description": 'Words to look for, e.g. "blue shoes".'}


def tool(
    props: dict[str, Any],
    required: list[str] | None = None,
    name: str = "orders_search",
    description: str = GOOD,
    **extra: Any,
) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": props,
        "required": list(props) if required is None else required,
        "additionalProperties": False,
        **extra,
    }
    return {"name": name, "description": description, "input_schema": schema}


def obj(props: dict[str, Any], description: str = "A part of the order.") -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }


@dataclass
class Case:
    rule: Rule
    doc: Any
    pointer: str | None  # where the rule fires; None: it must not fire
    tool: str = "orders_search"
    settings: dict[str, Any] = field(default_factory=dict)


def fires(rule: Rule, doc: Any, pointer: str, **kw: Any) -> Case:
    return Case(rule, doc, pointer, **kw)


def quiet(rule: Rule, doc: Any, **kw: Any) -> Case:
    return Case(rule, doc, None, **kw)


CITY = {"type": "string", "description": "City in English, e.g. Paris."}
STATE = {"type": "string", "enum": ["open", "closed"], "description": "Order state; omit for every state."}
NAMES_MIXED = [tool({"query": TEXT}), tool({"query": TEXT}, name="tickets_search"), tool({}, name="searchInvoices")]
ORDER_MIXED = [tool({}, name="support_tickets_search"), tool({}, name="payments_refund"), tool({}, name="send_message")]
SIX = {f"field_{n}": {"type": "string", "description": f"Part {n} of the address, e.g. x{n}."} for n in "abcdef"}
NULLABLE = {"type": ["string", "null"], "description": "Part f of the address; null when there is none."}
CASES = [
    fires(Rule.POSITIONAL_NAME, tool({"arg0": TEXT}), "/properties/arg0"),
    fires(Rule.POSITIONAL_NAME, tool({"p1": TEXT}), "/properties/p1"),
    quiet(Rule.POSITIONAL_NAME, tool({"query": TEXT})),
    fires(
        Rule.FREE_FORM_OBJECT, tool({"filters": {"type": "object", "description": "Filters."}}), "/properties/filters"
    ),
    fires(
        Rule.FREE_FORM_OBJECT, {"name": "orders_search", "description": GOOD, "input_schema": {"type": "object"}}, ""
    ),
    fires(Rule.FREE_FORM_OBJECT, {"name": "orders_search", "description": GOOD}, ""),
    fires(
        Rule.FREE_FORM_OBJECT,
        tool({"f": {"type": "object", "additionalProperties": True, "description": "Filters."}}),
        "/properties/f",
    ),
    quiet(
        Rule.FREE_FORM_OBJECT,
        tool({"labels": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Tag map."}}),
    ),
    quiet(
        Rule.FREE_FORM_OBJECT,
        {"name": "orders_list", "description": GOOD, "input_schema": {"type": "object", "properties": {}}},
        tool="orders_list",
    ),
    fires(Rule.UNTYPED, tool({"payload": {"description": "Raw payload."}}), "/properties/payload"),
    fires(Rule.UNTYPED, tool({"payload": {}}), "/properties/payload"),
    quiet(Rule.UNTYPED, tool({"payload": {"type": "string", "description": "Raw payload."}})),
    fires(
        Rule.MONEY_AS_NUMBER,
        tool({"amount": {"type": "number", "description": "Refund, in EUR."}}),
        "/properties/amount",
    ),
    fires(
        Rule.MONEY_AS_NUMBER,
        tool({"prices": {"type": "array", "items": {"type": "number"}, "description": "Line prices in EUR."}}),
        "/properties/prices/items",
    ),
    quiet(
        Rule.MONEY_AS_NUMBER,
        tool({"amount_cents": {"type": "integer", "description": "In euro cents: 1999 is 19.99."}}),
    ),
    quiet(Rule.MONEY_AS_NUMBER, tool({"total_count": {"type": "number", "description": "How many orders in all."}})),
    fires(
        Rule.DATE_WITHOUT_FORMAT,
        tool({"date": {"type": "string", "description": "Day of the order."}}),
        "/properties/date",
    ),
    fires(
        Rule.DATE_WITHOUT_FORMAT,
        tool({"created_at": {"type": "string", "description": "When."}}),
        "/properties/created_at",
    ),
    quiet(
        Rule.DATE_WITHOUT_FORMAT,
        tool({"date": {"type": "string", "format": "date", "description": "Day (YYYY-MM-DD)."}}),
    ),
    quiet(
        Rule.DATE_WITHOUT_FORMAT,
        tool({"dob": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$", "description": "Born on."}}),
    ),
    quiet(
        Rule.DATE_WITHOUT_FORMAT,
        tool({"time_zone": {"type": "string", "description": "IANA zone, e.g. Europe/Paris."}}),
    ),
    fires(Rule.DOES_NOT_COMPILE, tool({"z": {"type": "integr", "description": "How many."}}), "/properties/z/type"),
    fires(
        Rule.DOES_NOT_COMPILE,
        tool({"z": {"type": "string", "pattern": "([", "description": "Code."}}),
        "/properties/z/pattern",
    ),
    quiet(Rule.DOES_NOT_COMPILE, tool({"z": {"type": "integer", "description": "How many."}})),
    fires(Rule.UNRESOLVED_REF, tool({"x": {"$ref": "#/$defs/Missing", "description": "Who."}}), "/properties/x/$ref"),
    fires(
        Rule.UNRESOLVED_REF,
        tool({"x": {"$ref": "https://example.com/x.json", "description": "Who."}}),
        "/properties/x/$ref",
    ),
    quiet(Rule.UNRESOLVED_REF, tool({"x": {"$ref": "#/$defs/Who", "description": "Who."}}, **{"$defs": {"Who": TEXT}})),
    fires(
        Rule.ROOT_NOT_OBJECT,
        {"name": "orders_search", "description": GOOD, "input_schema": {"type": "string"}},
        "/type",
    ),
    quiet(Rule.ROOT_NOT_OBJECT, tool({"query": TEXT})),
    fires(Rule.NO_DESCRIPTION, tool({"query": {"type": "string"}}), "/properties/query"),
    fires(Rule.NO_DESCRIPTION, tool({"query": TEXT}, description=""), ""),
    quiet(Rule.NO_DESCRIPTION, tool({"query": TEXT})),
    fires(
        Rule.DESCRIPTION_RESTATES_NAME,
        tool({"city": {"type": "string", "description": "The city."}}),
        "/properties/city/description",
    ),
    fires(
        Rule.DESCRIPTION_RESTATES_NAME,
        tool({"to": TEXT}, name="send_email", description="Send an email."),
        "",
        tool="send_email",
    ),
    quiet(Rule.DESCRIPTION_RESTATES_NAME, tool({"city": CITY})),
    fires(
        Rule.CHOICE_NOT_ENUM,
        tool({"order": {"type": "string", "description": "Sort order: 'asc' or 'desc'."}}),
        "/properties/order",
    ),
    fires(
        Rule.CHOICE_NOT_ENUM,
        tool({"unit": {"type": "string", "description": "One of: celsius, fahrenheit."}}),
        "/properties/unit",
    ),
    fires(
        Rule.CHOICE_NOT_ENUM,
        tool({"mode": {"type": "string", "description": "Transport (tcp|udp)."}}),
        "/properties/mode",
    ),
    quiet(
        Rule.CHOICE_NOT_ENUM,
        tool({"order": {"type": "string", "enum": ["asc", "desc"], "description": "'asc' or 'desc'."}}),
    ),
    quiet(Rule.CHOICE_NOT_ENUM, tool({"kind": {"type": "string", "description": "Category, e.g. 'shoes', 'boots'."}})),
    fires(
        Rule.ENUM_CASE,
        tool({"answer": {"type": "string", "enum": ["ACCEPTED", "REMIND_LATER"], "description": "The answer."}}),
        "/properties/answer/enum",
    ),
    quiet(
        Rule.ENUM_CASE,
        tool({"answer": {"type": "string", "enum": ["accepted", "remind_later"], "description": "The answer."}}),
    ),
    quiet(
        Rule.ENUM_CASE, tool({"currency": {"type": "string", "enum": ["USD", "EUR"], "description": "ISO 4217 code."}})
    ),
    quiet(
        Rule.ENUM_CASE,
        tool({"answer": {"type": "string", "enum": ["ACCEPTED", "DECLINED"], "description": "ACCEPTED or DECLINED."}}),
    ),
    fires(
        Rule.ENUM_CASE_VARIANTS,
        tool({"s": {"type": "string", "enum": ["open", "OPEN"], "description": "State."}}),
        "/properties/s/enum",
    ),
    quiet(Rule.ENUM_CASE_VARIANTS, tool({"state": STATE}, required=[])),
    fires(
        Rule.TOO_DEEP,
        tool({"customer": obj({"address": obj({"city": CITY})})}),
        "/properties/customer/properties/address/properties/city",
    ),
    quiet(Rule.TOO_DEEP, tool({"customer": obj({"city": CITY})})),
    fires(Rule.TOO_MANY_REQUIRED, tool(SIX), "/required"),
    quiet(Rule.TOO_MANY_REQUIRED, tool({k: v for k, v in SIX.items() if k != "field_f"})),
    quiet(Rule.TOO_MANY_REQUIRED, tool({**SIX, "field_f": NULLABLE})),
    fires(
        Rule.NO_DEFAULT,
        tool({"query": TEXT, "include_closed": {"type": "boolean", "description": "Also closed orders."}}, ["query"]),
        "/properties/include_closed",
    ),
    fires(
        Rule.NO_DEFAULT,
        tool({"page": {"type": ["integer", "null"], "minimum": 1, "description": "Result page."}}),
        "/properties/page",
    ),
    quiet(
        Rule.NO_DEFAULT,
        tool(
            {"query": TEXT, "closed": {"type": "boolean", "default": False, "description": "Also closed."}}, ["query"]
        ),
    ),
    quiet(
        Rule.NO_DEFAULT,
        tool({"query": TEXT, "closed": {"type": "boolean", "description": "Also closed (default false)."}}, ["query"]),
    ),
    fires(
        Rule.OPTIONAL_UNDOCUMENTED,
        tool({"query": TEXT, "state": {**STATE, "description": "Order state."}}, ["query"]),
        "/properties/state",
    ),
    quiet(Rule.OPTIONAL_UNDOCUMENTED, tool({"query": TEXT, "state": STATE}, ["query"])),
    fires(Rule.GENERIC_NAME, tool({"query": TEXT}, name="search"), "", tool="search"),
    fires(Rule.GENERIC_NAME, tool({"query": TEXT}, name="run_tool"), "", tool="run_tool"),
    quiet(Rule.GENERIC_NAME, tool({"query": TEXT})),
    fires(Rule.INCONSISTENT_NAMING, NAMES_MIXED, "", tool="searchInvoices"),
    fires(Rule.INCONSISTENT_NAMING, ORDER_MIXED, "", tool="send_message"),
    quiet(Rule.INCONSISTENT_NAMING, NAMES_MIXED[:2]),
    quiet(Rule.INCONSISTENT_NAMING, ORDER_MIXED[:2], tool="payments_refund"),
    fires(Rule.DUPLICATE_TOOL, [tool({"query": TEXT}), tool({"query": TEXT})], ""),
    quiet(Rule.DUPLICATE_TOOL, [tool({"query": TEXT}), tool({"query": TEXT}, name="tickets_search")]),
    fires(Rule.ADDITIONAL_PROPERTIES_TRUE, tool({"query": TEXT}, additionalProperties=True), "/additionalProperties"),
    quiet(Rule.ADDITIONAL_PROPERTIES_TRUE, tool({"query": TEXT})),
    fires(
        Rule.FORMAT_NOT_ASSERTED,
        tool({"tel": {"type": "string", "format": "phone", "description": "E.164."}}),
        "/properties/tel/format",
    ),
    fires(
        Rule.FORMAT_NOT_ASSERTED,
        tool({"to": {"type": "string", "format": "email", "description": "Who, e.g. a@b.co."}}),
        "/properties/to/format",
        settings={"lockdown": {"assert_formats": False}},
    ),
    quiet(
        Rule.FORMAT_NOT_ASSERTED,
        tool({"to": {"type": "string", "format": "email", "description": "Who, e.g. a@b.co."}}),
    ),
    fires(
        Rule.OPENAPI_NULLABLE,
        tool({"note": {"type": "string", "nullable": True, "description": "Free text for the courier."}}),
        "/properties/note/nullable",
    ),
    quiet(
        Rule.OPENAPI_NULLABLE, tool({"note": {"type": ["string", "null"], "description": "Free text for the courier."}})
    ),
    fires(
        Rule.LOCKDOWN_OFF,
        tool({"query": TEXT}),
        "",
        settings={"tools": {"orders_search": {"lockdown": {"enabled": False}}}},
    ),
    quiet(Rule.LOCKDOWN_OFF, tool({"query": TEXT})),
    fires(
        Rule.UNKNOWN_PROPERTIES_ALLOWED,
        tool({"query": TEXT}),
        "",
        settings={"lockdown": {"reject_unknown_properties": False}},
    ),
    quiet(Rule.UNKNOWN_PROPERTIES_ALLOWED, tool({"query": TEXT})),
    fires(Rule.EXPECTED, tool({"query": TEXT}), "/properties/query"),
    quiet(Rule.EXPECTED, tool({})),
    fires(
        Rule.FORMAT_GENERIC_HINT,
        tool({"link": {"type": "string", "format": "iri", "description": "Where, e.g. https://é.fr."}}),
        "/properties/link/format",
    ),
    quiet(Rule.FORMAT_GENERIC_HINT, tool({"link": {"type": "string", "format": "uri", "description": "Where."}})),
    fires(
        Rule.UNBOUNDED_COUNT,
        tool({"limit": {"type": "integer", "description": "How many, at most."}}),
        "/properties/limit",
    ),
    quiet(
        Rule.UNBOUNDED_COUNT,
        tool({"limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "At most."}}),
    ),
]


def lint(case: Case) -> list[tuple[str, str]]:
    """(rule, pointer) of every finding for the case's tool."""
    loaded = load_document(case.doc, "case.json")
    settings = Settings.model_validate(case.settings)
    reports = [r for r in lint_file(loaded, settings, Lockdown()) if r.tool == case.tool]
    assert reports, f"no tool {case.tool!r} in the case"
    return [(f.rule.value, f.pointer) for r in reports for f in r.findings]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.rule.value}-{'fires' if c.pointer is not None else 'quiet'}")
def test_rule(case: Case) -> None:
    found = lint(case)
    if case.pointer is None:
        assert case.rule.value not in {rule for rule, _ in found}, found
    else:
        assert (case.rule.value, case.pointer) in found, found


def test_every_rule_has_a_failing_and_a_passing_example() -> None:
    firing = {c.rule for c in CASES if c.pointer is not None}
    passing = {c.rule for c in CASES if c.pointer is None}
    missing = {r for r in Rule if r is not Rule.LOCK_FALLBACK} - (firing & passing)
    assert not missing, missing  # LOCK_FALLBACK: test_lock_fallback below


def test_lock_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """The defensive path: when the lockdown's rewrite of a schema does not compile, it
    validates the schema as declared, and lint says undeclared properties then pass."""
    doc = tool({"query": TEXT})
    del doc["input_schema"]["additionalProperties"]  # the lockdown adds it: a rewrite happens
    case = Case(Rule.LOCK_FALLBACK, doc, "")
    assert (Rule.LOCK_FALLBACK.value, "") not in lint(case)
    monkeypatch.setattr(lockdown_module, "lock_unknown_properties", lambda schema: {**schema, "type": "nonsense"})
    assert (Rule.LOCK_FALLBACK.value, "") in lint(case)


def test_severities_are_the_issues() -> None:
    errors = {r for r, (severity, _) in RULES.items() if severity is Severity.ERROR}
    assert {
        Rule.POSITIONAL_NAME,
        Rule.FREE_FORM_OBJECT,
        Rule.UNTYPED,
        Rule.MONEY_AS_NUMBER,
        Rule.DATE_WITHOUT_FORMAT,
        Rule.DOES_NOT_COMPILE,
    } <= errors
    warnings = {r for r, (severity, _) in RULES.items() if severity is Severity.WARNING}
    assert {
        Rule.NO_DESCRIPTION,
        Rule.DESCRIPTION_RESTATES_NAME,
        Rule.CHOICE_NOT_ENUM,
        Rule.ENUM_CASE,
        Rule.TOO_DEEP,
        Rule.TOO_MANY_REQUIRED,
        Rule.GENERIC_NAME,
        Rule.INCONSISTENT_NAMING,
        Rule.NO_DEFAULT,
        Rule.OPTIONAL_UNDOCUMENTED,
    } <= warnings
    assert RULES[Rule.EXPECTED][0] is Severity.INFO
    assert all(why for rule, (severity, why) in RULES.items() if severity is not Severity.INFO)


def test_every_finding_says_what_why_and_how_to_fix() -> None:
    for case in CASES:
        loaded = load_document(case.doc, "case.json")
        for report in lint_file(loaded, Settings.model_validate(case.settings), Lockdown()):
            for finding in report.findings:
                if finding.severity is Severity.INFO:
                    continue
                assert finding.message and finding.why and finding.fix, (case.rule, finding)
                assert finding.to_json(report.tool)["tool"] == report.tool


def _finding(doc: Any, rule: Rule) -> Any:
    [report] = lint_file(load_document(doc, "case.json"), Settings(), Lockdown())
    [found] = [f for f in report.findings if f.rule is rule]
    return found


def test_fix_fragments_are_the_corrected_schema() -> None:
    money = _finding(tool({"amount": {"type": "number", "description": "Refund, in EUR"}}), Rule.MONEY_AS_NUMBER)
    assert money.fix_schema["type"] == "integer" and "cents" in money.fix_schema["description"]
    assert "decimal string" in money.fix
    stamp = _finding(tool({"created_at": {"type": "string", "description": "When."}}), Rule.DATE_WITHOUT_FORMAT)
    assert stamp.fix_schema == {"type": "string", "description": "When.", "format": "date-time"}
    day = _finding(tool({"due_date": {"type": "string", "description": "Due."}}), Rule.DATE_WITHOUT_FORMAT)
    assert day.fix_schema["format"] == "date"
    typo = _finding(tool({"z": {"type": "integr", "description": "How many."}}), Rule.DOES_NOT_COMPILE)
    assert typo.pointer == "/properties/z/type"
    assert typo.fix_schema == {"type": "integer", "description": "How many."}
    assert '"integr" is not a JSON Schema type' in typo.message
    choice = _finding(tool({"order": {"type": "string", "description": "'asc' or 'desc'."}}), Rule.CHOICE_NOT_ENUM)
    assert choice.fix_schema["enum"] == ["asc", "desc"]
    case = _finding(
        tool({"a": {"type": "string", "enum": ["ACCEPTED", "REMIND_LATER"], "description": "The answer."}}),
        Rule.ENUM_CASE,
    )
    assert case.fix_schema["enum"] == ["accepted", "remind_later"]
    naming = lint_file(load_document(NAMES_MIXED, "case.json"), Settings(), Lockdown())[2]
    assert any("'search_invoices'" in f.fix for f in naming.findings if f.rule is Rule.INCONSISTENT_NAMING)


def test_docs_list_every_rule_with_its_severity() -> None:
    text = (Path(__file__).parents[2] / "docs" / "schemas.md").read_text()
    rows = {
        cells[1].strip("` "): cells[2].strip()
        for line in text.splitlines()
        if line.startswith("| `") and len(cells := line.split("|")) > 3
    }
    assert {rule: rows.get(rule.value) for rule in Rule} == {rule: RULES[rule][0].value for rule in Rule}
