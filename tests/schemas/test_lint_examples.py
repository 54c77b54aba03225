"""The rule set on whole declaration sets: the issue's classic mistakes, a well-written set,
and the tool declarations of public agent frameworks' examples (findings reviewed, pinned)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.schemas.conftest import Run, as_json

EXAMPLES = Path(__file__).parents[1] / "fixtures" / "schemas"
FRAMEWORKS = EXAMPLES / "frameworks"


def lint_json(run: Run, path: Path, *flags: str) -> tuple[int, dict[str, object]]:
    code, out, _ = run("lint", str(path), "--json", *flags)
    return code, as_json(out)


def pinned(report: dict[str, object]) -> set[tuple[str, str, str, str]]:
    return {
        (t["tool"], f["severity"], f["rule"], f["pointer"])  # type: ignore[index]
        for t in report["tools"]  # type: ignore[attr-defined]
        for f in t["findings"]
        if f["severity"] != "info"
    }


def test_the_classic_mistakes_fail(run: Run) -> None:
    """Issue 17: `search` with arg0, arg1 (a free-form object), amount as a float and date as
    a plain string used to exit 0 with warnings only."""
    code, out, _ = run("lint", str(EXAMPLES / "classic_mistakes.json"))
    assert code == 1
    code, report = lint_json(run, EXAMPLES / "classic_mistakes.json")
    errors = {(f[1], f[2], f[3]) for f in pinned(report) if f[1] == "error"}
    assert errors == {
        ("error", "positional-name", "/properties/arg0"),
        ("error", "positional-name", "/properties/arg1"),
        ("error", "free-form-object", "/properties/arg1"),
        ("error", "money-as-number", "/properties/amount"),
        ("error", "date-without-format", "/properties/date"),
    }
    assert ("search", "warning", "generic-name", "") in pinned(report)
    for name in ("arg0", "arg1", "amount", "date", "'search' is generic"):
        assert name in out


def test_strict_passes_on_a_well_written_set(run: Run) -> None:
    code, out, _ = run("lint", "--strict", str(EXAMPLES / "well_written.json"))
    assert code == 0, out
    assert out.rstrip().endswith("4 tool(s): 0 error(s), 0 warning(s), 14 info")


# Reviewed: each finding below is true of the published declaration (see SOURCES.md).
FRAMEWORK_FINDINGS: dict[str, tuple[set[tuple[str, str, str, str]], int]] = {
    # Clean: every parameter typed, described and required; names consistent (action first).
    "anthropic_cookbook_customer_service.json": (set(), 3),
    "openai_agents_python_tools_doc.json": (
        {
            # Location's lat/long carry only a pydantic `title`, no description.
            ("fetch_weather", "warning", "no-description", "/$defs/Location/properties/lat"),
            ("fetch_weather", "warning", "no-description", "/$defs/Location/properties/long"),
            # `name_override="fetch_data"` for a function that reads a file: says nothing of files.
            ("fetch_data", "warning", "generic-name", ""),
        },
        5,
    ),
    # Clean: camelCase throughout, every parameter required and described, strict mode.
    "openai_realtime_agents_returns.json": (set(), 5),
    "openai_realtime_agents_authentication.json": (
        {
            # The nested address object has no description of its own.
            ("save_or_update_address", "warning", "no-description", "/properties/new_address"),
            # ACCEPTED / DECLINED / REMIND_LATER, not named in the description.
            ("update_user_offer_response", "warning", "enum-case", "/properties/user_response/enum"),
        },
        13,
    ),
    "pydantic_ai_tools_doc.json": (
        {
            ("foobar", "warning", "description-restates-name", ""),  # "Get me foobar."
            ("greet", "warning", "no-description", ""),  # the ToolDefinition has none
        },
        6,
    ),
}


@pytest.mark.parametrize("name", sorted(FRAMEWORK_FINDINGS))
def test_framework_examples(run: Run, name: str) -> None:
    expected, infos = FRAMEWORK_FINDINGS[name]
    code, report = lint_json(run, FRAMEWORKS / name)
    assert pinned(report) == expected
    assert report["summary"]["info"] == infos  # type: ignore[index]
    assert code == 0  # no errors in any of them
    strict, _ = lint_json(run, FRAMEWORKS / name, "--strict")
    assert strict == (1 if expected else 0)


def test_every_framework_file_is_pinned_and_sourced() -> None:
    files = {p.name for p in FRAMEWORKS.glob("*.json")}
    assert files == set(FRAMEWORK_FINDINGS)
    sources = (FRAMEWORKS / "SOURCES.md").read_text()
    assert all(f"`{name}`" in sources for name in files)
    assert len({line.split("|")[3].strip() for line in sources.splitlines() if line.startswith("| `")}) >= 3
