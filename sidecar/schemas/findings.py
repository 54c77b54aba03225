"""The lint rules: each one's id, severity and why it makes the model call the tool badly.

Severities say what to do. An error is a declaration the model cannot call reliably or the
lockdown cannot check at all (exit 1). A warning is a declaration the model will often call
wrongly, costing repair rounds (exit 1 with `--strict`). Info is what the model will be
told about each parameter, for review.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


SEVERITIES = tuple(Severity)
_RANK = {s: i for i, s in enumerate(SEVERITIES)}


class Rule(StrEnum):
    # errors
    POSITIONAL_NAME = "positional-name"
    FREE_FORM_OBJECT = "free-form-object"
    UNTYPED = "untyped"
    MONEY_AS_NUMBER = "money-as-number"
    DATE_WITHOUT_FORMAT = "date-without-format"
    DOES_NOT_COMPILE = "does-not-compile"
    UNRESOLVED_REF = "unresolved-ref"
    ROOT_NOT_OBJECT = "root-not-object"
    # warnings: the description
    NO_DESCRIPTION = "no-description"
    DESCRIPTION_RESTATES_NAME = "description-restates-name"
    CHOICE_NOT_ENUM = "choice-not-enum"
    ENUM_CASE = "enum-case"
    ENUM_CASE_VARIANTS = "enum-case-variants"
    # warnings: the shape
    TOO_DEEP = "too-deep"
    TOO_MANY_REQUIRED = "too-many-required"
    NO_DEFAULT = "no-default"
    OPTIONAL_UNDOCUMENTED = "optional-undocumented"
    # warnings: names
    GENERIC_NAME = "generic-name"
    INCONSISTENT_NAMING = "inconsistent-naming"
    DUPLICATE_TOOL = "duplicate-tool"
    # warnings: what the lockdown can check
    ADDITIONAL_PROPERTIES_TRUE = "additional-properties-true"
    FORMAT_NOT_ASSERTED = "format-not-asserted"
    OPENAPI_NULLABLE = "openapi-nullable"
    LOCK_FALLBACK = "lock-fallback"
    LOCKDOWN_OFF = "lockdown-off"
    UNKNOWN_PROPERTIES_ALLOWED = "unknown-properties-allowed"
    # info
    EXPECTED = "expected"
    FORMAT_GENERIC_HINT = "format-generic-hint"
    UNBOUNDED_COUNT = "unbounded-count"


_UNCHECKED = "and the lockdown cannot refuse what it sends, so the tool receives it"
_REFUSED = "every call of this tool is refused, whatever the model sends (retryable: false)"

RULES: dict[Rule, tuple[Severity, str]] = {
    Rule.POSITIONAL_NAME: (
        Severity.ERROR,
        "the model fills arguments by name; a positional name leaves it only the order and the description, "
        "so values land in the wrong parameter",
    ),
    Rule.FREE_FORM_OBJECT: (
        Severity.ERROR,
        f"the model has to guess which keys exist and what they hold; it invents plausible ones {_UNCHECKED}",
    ),
    Rule.UNTYPED: (
        Severity.ERROR,
        f'the model picks the type itself ("10" for a number, an object for a string) {_UNCHECKED}',
    ),
    Rule.MONEY_AS_NUMBER: (
        Severity.ERROR,
        "a JSON number is read as a binary float, which cannot hold most decimal amounts exactly, and the model "
        "is not told the unit or scale: 19.99, 1999 and 19.989999 all look right to it",
    ),
    Rule.DATE_WITHOUT_FORMAT: (
        Severity.ERROR,
        'the model writes dates the way the conversation does ("next Friday", "05/06/2024", a time without a '
        f"zone) {_UNCHECKED}",
    ),
    Rule.DOES_NOT_COMPILE: (Severity.ERROR, _REFUSED),
    Rule.UNRESOLVED_REF: (Severity.ERROR, _REFUSED),
    Rule.ROOT_NOT_OBJECT: (Severity.ERROR, "tool arguments are always a JSON object: " + _REFUSED),
    Rule.NO_DESCRIPTION: (
        Severity.WARNING,
        "the name and type are all the model knows: it guesses what the value means, its unit and its format "
        "(for a tool: when to call it at all), and a refused call's repair hint is only the bare constraint",
    ),
    Rule.DESCRIPTION_RESTATES_NAME: (
        Severity.WARNING,
        "a description that repeats the name tells the model nothing new: it still guesses the meaning, unit "
        "and format",
    ),
    Rule.CHOICE_NOT_ENUM: (
        Severity.WARNING,
        "prose choices are only a suggestion: the model sends near misses (another case, a synonym) and the "
        "lockdown cannot refuse them without an `enum`",
    ),
    Rule.ENUM_CASE: (
        Severity.WARNING,
        "models write values in the case of the sentence (accepted, in_progress); each near miss is refused and "
        "costs a repair round",
    ),
    Rule.ENUM_CASE_VARIANTS: (
        Severity.WARNING,
        "members that differ only in case or separators look alike to the model: it picks one at random",
    ),
    Rule.TOO_DEEP: (
        Severity.WARNING,
        "every level is one more object the model must build exactly right; missing and invented keys "
        "concentrate in deep nesting",
    ),
    Rule.TOO_MANY_REQUIRED: (
        Severity.WARNING,
        "each required parameter is one more value the model must find; with many, it fills the gaps with "
        "plausible inventions instead of asking",
    ),
    Rule.NO_DEFAULT: (
        Severity.WARNING,
        "the model cannot tell what leaving it out does, so it either always sends a value or assumes the "
        "opposite of the tool's behaviour",
    ),
    Rule.OPTIONAL_UNDOCUMENTED: (
        Severity.WARNING,
        "the model cannot tell whether leaving it out means all, none or an error, so it invents a value",
    ),
    Rule.GENERIC_NAME: (
        Severity.WARNING,
        "the model chooses tools by name first; a generic name says nothing about what it acts on, collides "
        "with other tools and is chosen for requests it cannot serve",
    ),
    Rule.INCONSISTENT_NAMING: (
        Severity.WARNING,
        "one naming scheme lets the model infer a tool's name from its neighbours; mixed schemes produce calls "
        "to names that do not exist",
    ),
    Rule.DUPLICATE_TOOL: (Severity.WARNING, "the model sees two tools with one name and cannot tell them apart"),
    Rule.ADDITIONAL_PROPERTIES_TRUE: (
        Severity.WARNING,
        "invented properties (a frequent model mistake) reach the tool unchecked",
    ),
    Rule.FORMAT_NOT_ASSERTED: (Severity.WARNING, "values in the wrong format reach the tool unchecked"),
    Rule.OPENAPI_NULLABLE: (
        Severity.WARNING,
        "the model may send null, as the schema seems to allow, and each such call is refused",
    ),
    Rule.LOCK_FALLBACK: (Severity.WARNING, "invented properties reach the tool unchecked"),
    Rule.LOCKDOWN_OFF: (Severity.WARNING, "nothing the model sends to this tool is checked"),
    Rule.UNKNOWN_PROPERTIES_ALLOWED: (Severity.WARNING, "invented properties reach the tool unchecked"),
    Rule.EXPECTED: (Severity.INFO, ""),
    Rule.FORMAT_GENERIC_HINT: (Severity.INFO, "a repair hint without an example is harder to act on"),
    Rule.UNBOUNDED_COUNT: (Severity.INFO, "0, negative and huge values reach the tool"),
}


@dataclass(frozen=True, slots=True)
class Finding:
    """One observation about a tool declaration.

    `pointer` is RFC 6901, relative to the tool's schema ("" is the root, and the tool itself
    for tool-level rules). `fix_schema` is the corrected fragment where one can be given:
    the node at `pointer` as it should read, unless `fix` says where it goes."""

    rule: Rule
    pointer: str
    message: str
    fix: str = ""
    fix_schema: Any = None
    field: str = ""

    @property
    def severity(self) -> Severity:
        return RULES[self.rule][0]

    @property
    def why(self) -> str:
        return RULES[self.rule][1]

    def to_json(self, tool: str) -> dict[str, Any]:
        return {
            "severity": self.severity.value,
            "rule": self.rule.value,
            "tool": tool,
            "pointer": self.pointer,
            "field": self.field,
            "message": self.message,
            "why": self.why,
            "fix": self.fix,
            "fix_schema": self.fix_schema,
        }


def by_severity(findings: list[Finding]) -> list[Finding]:
    """Errors first, then warnings, then info; schema order within a severity (stable)."""
    return sorted(findings, key=lambda f: _RANK[f.severity])


@dataclass(slots=True)
class ToolReport:
    file: str
    tool: str
    dialect: str
    location: str
    schema_hash: str
    findings: list[Finding] = field(default_factory=list)

    def count(self, severity: Severity | str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "tool": self.tool,
            "dialect": self.dialect,
            "location": self.location,
            "schema_hash": self.schema_hash,
            "findings": [f.to_json(self.tool) for f in self.findings],
        }
