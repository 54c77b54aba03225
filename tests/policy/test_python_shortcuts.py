"""The shipped rules' three shortcut decisions, answered in Python (sidecar/policy/shortcuts.py)
when those rules are in force unchanged: the same answers as regorus evaluating the rules, on
generated settings and inputs; every call the rules' shortcuts answer, and no other; and any
other policy left to regorus alone."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict
from yarl import URL

from sidecar.config import PolicySettings, load_settings
from sidecar.dialects import ANTHROPIC
from sidecar.exchange.state import Exchange
from sidecar.filters.tool_list import ToolListFilter
from sidecar.model import Provider, RequestView, ToolDeclaration
from sidecar.policy import build_engine
from sidecar.policy.engine import EmbeddedEngine
from sidecar.policy.loader import VISIBLE_TOOLS
from sidecar.policy.shortcuts import LibraryShortcuts, Shortcut
from sidecar.policy.sources import LIBRARY, init_directory
from sidecar.telemetry.metrics import Metrics
from tests.helpers.decision_cases import (
    DATA,
    INPUT,
    PLAIN_INPUT,
    SHIPPED,
    SHIPPED_ENGINE,
    SHORTCUTS_ENGINE,
    UNLISTED_DEFAULT,
)

RULES = (("sidecar.rego", SHIPPED),)
# The settings some branch of the chain before a shortcut reads.
BEFORE = ("hidden", "schema_hash", "max_calls_per_session", "blocked_recipients", "approval")


def python_decision(data: dict[str, Any], document: dict[str, Any]) -> dict[str, Any] | None:
    shortcuts = LibraryShortcuts.for_policy(RULES, data)
    assert shortcuts is not None
    return shortcuts.decision(document)


@settings(max_examples=1500, deadline=None)  # equivalence, not timing
@given(DATA, INPUT)
def test_python_answers_what_the_rules_shortcuts_answer_and_nothing_else(
    data: dict[str, Any], document: dict[str, Any]
) -> None:
    answer = python_decision(data, document)
    if SHORTCUTS_ENGINE.decide(data, document) == "chain":
        assert answer is None  # left to regorus: the chain decides
    else:
        assert answer is not None
        assert answer == SHIPPED_ENGINE.decide(data, document)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=30), st.sampled_from(["read_only", "within_limits", "unlisted"]))
def test_reasons_name_the_tool_as_the_rules_write_it(name: str, rule: str) -> None:
    """`sprintf("%s ...", [input.tool.name])` in the rules; an f-string here."""
    tools = {} if rule == "unlisted" else {name: {"side_effects": rule != "read_only"}}
    data = {"sidecar": {"tools": tools, "unlisted_tool": UNLISTED_DEFAULT}}
    document = {**PLAIN_INPUT, "tool": {**PLAIN_INPUT["tool"], "name": name}}
    answer = python_decision(data, document)
    assert answer is not None and answer["rule"] == rule
    assert answer == SHIPPED_ENGINE.decide(data, document)


@pytest.mark.parametrize(
    "entry",
    [
        {"side_effects": False},
        {"side_effects": True},
        {"allow": False},
        {"side_effects": False, "approval": {}},
        *({"side_effects": flag, key: value} for flag in (False, True) for key in BEFORE for value in (None, False)),
    ],
)
def test_each_setting_as_the_rules_read_it(entry: dict[str, Any]) -> None:
    """The same settings as a listed tool's and as `unlisted_tool`'s: answered in Python
    exactly where the rules' shortcuts answer, with their value."""
    listed = {"sidecar": {"tools": {"t": entry}, "unlisted_tool": UNLISTED_DEFAULT}}
    unlisted = {"sidecar": {"tools": {}, "unlisted_tool": {**UNLISTED_DEFAULT, **entry}}}
    for data in (listed, unlisted):
        expected = SHORTCUTS_ENGINE.decide(data, PLAIN_INPUT)
        answer = python_decision(data, PLAIN_INPUT)
        assert answer == (None if expected == "chain" else expected)


@pytest.mark.parametrize(
    ("field", "value", "answered"),
    [
        ("replay", {"count": 0.0}, False),  # Rego's `== 0` takes 0.0; Python leaves it to regorus
        ("replay", {"count": False}, False),
        ("replay", [], False),
        ("approval", {"status": None}, True),  # null is not "approved": the rules answer too
        ("approval", {}, False),
        ("tool", {"name": 7, "declared": True}, False),
        ("validation", {"valid": 1}, False),
    ],
)
def test_values_python_might_read_otherwise(field: str, value: Any, answered: bool) -> None:
    data = {"sidecar": {"tools": {"t": {"side_effects": True}}}}
    document = {**PLAIN_INPUT, field: value}
    answer = python_decision(data, document)
    assert (answer is not None) is answered
    if answer is not None:
        assert answer == SHIPPED_ENGINE.decide(data, document)


def test_settings_are_read_once_per_revision() -> None:
    data = {
        "sidecar": {
            "tools": {
                "read": {"side_effects": False, "approval": {"always": True}},  # approval: not before read_only
                "write": {"side_effects": True, "repeatable": True},
                "limited": {"side_effects": True, "max_calls_per_session": 3},
                "pinned": {"side_effects": False, "schema_hash": None},
                "off": False,  # reads as no entry: unlisted
                "odd": None,
            },
            "unlisted_tool": UNLISTED_DEFAULT,
        }
    }
    shortcuts = LibraryShortcuts.for_policy(RULES, data)
    assert shortcuts is not None
    assert shortcuts.listed == {
        "read": Shortcut.READ_ONLY,
        "write": Shortcut.WITHIN_LIMITS,
        "limited": Shortcut.NONE,
        "pinned": Shortcut.NONE,
        "odd": Shortcut.NONE,
    }
    assert shortcuts.unlisted is Shortcut.UNLISTED


@pytest.mark.parametrize(
    "modules",
    [
        (("sidecar.rego", SHIPPED + "\n# edited\n"),),  # any edit, even a comment
        (("sidecar.rego", SHIPPED), ("extra.rego", "package sidecar.tools\n\nimport rego.v1\n\nx := 1\n")),
        (),
    ],
)
def test_any_other_policy_is_left_to_regorus(modules: tuple[tuple[str, str], ...]) -> None:
    assert LibraryShortcuts.for_policy(modules, {"sidecar": {"tools": {"t": {"side_effects": False}}}}) is None


@pytest.mark.parametrize("data", [{"sidecar": []}, {"sidecar": {"tools": []}}, {"sidecar": {"tools": "t"}}])
def test_data_of_another_shape_is_left_to_regorus(data: dict[str, Any]) -> None:
    assert LibraryShortcuts.for_policy(RULES, data) is None


class _RegorusAsked(AssertionError):
    pass


def _engine(directory: Path) -> EmbeddedEngine:
    return EmbeddedEngine(PolicySettings.model_validate({}), str(directory))


def _policy(directory: Path, rules: str, tools: dict[str, Any]) -> Path:
    directory.mkdir()
    (directory / "sidecar.rego").write_text(rules)
    shutil.copy(LIBRARY / "default" / "data.json", directory / "data.json")
    data = orjson.loads((directory / "data.json").read_bytes())
    data["sidecar"]["tools"] = tools
    (directory / "data.json").write_bytes(orjson.dumps(data))
    return directory


def _refuse_regorus(engine: EmbeddedEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = engine._current()
    assert compiled is not None

    def asked(text: bytes) -> None:
        raise _RegorusAsked(text)

    monkeypatch.setattr(compiled.engine, "set_input_json", asked)


def test_the_engine_answers_the_shortcuts_without_regorus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _engine(
        _policy(tmp_path / "p", SHIPPED, {"t": {"side_effects": False}, "w": {"max_calls_per_session": 2}})
    )
    _refuse_regorus(engine, monkeypatch)
    decision = engine.decide_sync(PLAIN_INPUT)
    assert decision.allow and decision.rule == "read_only" and decision.reasons == ["t is read-only"]
    # A call the shortcuts do not answer goes to regorus (here refused, so the error shows it).
    limited = {**PLAIN_INPUT, "tool": {**PLAIN_INPUT["tool"], "name": "w"}}
    assert engine.decide_sync(limited).error is not None


def test_edited_rules_are_regorus_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _engine(_policy(tmp_path / "p", SHIPPED + "\n# ours now\n", {"t": {"side_effects": False}}))
    assert engine.decide_sync(PLAIN_INPUT).rule == "read_only"  # regorus, the same rules
    _refuse_regorus(engine, monkeypatch)
    assert engine.decide_sync(PLAIN_INPUT).error is not None


def test_builtin_answers_every_plain_call_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """`builtin` lists no tool and allows unlisted ones: every declared, valid, first call."""
    engine = EmbeddedEngine(PolicySettings.model_validate({}), None)
    _refuse_regorus(engine, monkeypatch)
    decision = engine.decide_sync(PLAIN_INPUT)
    assert decision.allow and decision.rule == "unlisted"
    replay = {**PLAIN_INPUT, "replay": {"count": 1}}
    assert engine.decide_sync(replay).error is not None  # a replay: the chain, in regorus


@pytest.mark.parametrize("example", [None, "support"])
def test_a_directory_policy_init_wrote_gets_the_shortcuts(tmp_path: Path, example: str | None) -> None:
    """Its rules are the packaged text (its tests are not loaded): as fast as `builtin`."""
    init_directory(tmp_path, example)
    compiled = _engine(tmp_path)._current()
    assert compiled is not None and compiled.shortcuts is not None


@pytest.mark.parametrize("name", ["builtin", "support"])
def test_the_charts_policies_get_the_shortcuts(name: str) -> None:
    chart = Path(__file__).resolve().parents[2] / "helm" / "agent-sidecar" / "files" / "policies" / name
    compiled = _engine(chart)._current()
    assert compiled is not None and compiled.shortcuts is not None


def regorus_visible_tools(data: dict[str, Any], names: list[str]) -> Any:
    """The shipped rules' `visible_tools` for these names, as regorus gives it (sorted)."""
    engine = SHIPPED_ENGINE.compiled.clone()
    engine.add_data(data)
    engine.set_input({"tools": names})
    return engine.eval_rule(VISIBLE_TOOLS)


@settings(max_examples=600, deadline=None)  # equivalence, not timing
@given(DATA, st.lists(st.sampled_from(["t", "u"]), max_size=4))
def test_visible_tools_as_the_rules_give_them(data: dict[str, Any], names: list[str]) -> None:
    shortcuts = LibraryShortcuts.for_policy(RULES, data)
    assert shortcuts is not None
    assert sorted(shortcuts.visible_tools(names)) == regorus_visible_tools(data, names)


def _exchange_declaring(*names: str) -> Exchange:
    tools = [{"name": name, "input_schema": {"type": "object"}} for name in names]
    view = RequestView(model="m", declarations={n: ToolDeclaration.create(n, {"type": "object"}) for n in names})
    body = {"model": "m", "tools": tools, "messages": []}
    return Exchange("x1", Provider.ANTHROPIC, ANTHROPIC, "sess-1", view, body, URL("http://u"), CIMultiDict())


@pytest.mark.parametrize("entry", [{"hidden": True}, {"hidden": "true"}, {"hidden": 1}, {"hidden": None}, None, False])
def test_only_hidden_true_hides(entry: Any) -> None:
    data = {"sidecar": {"tools": {"t": entry}}}
    shortcuts = LibraryShortcuts.for_policy(RULES, data)
    assert shortcuts is not None
    assert sorted(shortcuts.visible_tools(["t", "u"])) == regorus_visible_tools(data, ["t", "u"])


async def test_the_tool_list_is_answered_from_the_names_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the shipped rules the tool-list filter builds no input document (session counts,
    agent, time) and asks no engine: the hidden tool goes all the same."""
    settings = load_settings(flags={"policies": str(_policy(tmp_path / "p", SHIPPED, {"secret": {"hidden": True}}))})
    tool_list = ToolListFilter(settings, build_engine(settings.policy, settings.policies), Metrics())

    def no_input(*args: Any) -> dict[str, Any]:
        raise AssertionError("the input was built")

    monkeypatch.setattr(tool_list, "input_base", no_input)
    ex = _exchange_declaring("read", "secret")
    await tool_list.on_request(ex)
    assert list(ex.view.declarations) == ["read"] and ex.hidden_tools == ["secret"]
    assert [tool["name"] for tool in ex.request["tools"]] == ["read"]
