"""The shipped `decision` chain starts with three shortcuts (a read-only tool; a side-effecting
tool without thresholds; an unlisted tool allowed as such), each one branch where the chain
would try a dozen or more. A shortcut may only match where the chain itself gives the same
value: these compare the shipped library with the same library without its shortcuts, on
generated tool settings and inputs (odd values included: `false`, `null` and strings where the
chain reads a setting), on regorus (through the sidecar's own wrapper) and on OPA's own
evaluator."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings

from sidecar.policy.loader import DECISION, PolicyBundle
from tests.helpers.decision_cases import (
    CHAIN,
    DATA,
    FIRST,
    INPUT,
    PLAIN_INPUT,
    REFERENCE,
    REFERENCE_ENGINE,
    SHIPPED,
    SHIPPED_ENGINE,
    SHORTCUTS_ENGINE,
    UNLISTED_DEFAULT,
)
from tests.helpers.opa_go import OpaGoEngine


def test_the_reference_is_the_chain_without_its_shortcuts() -> None:
    assert FIRST not in REFERENCE and CHAIN not in REFERENCE
    assert 'decision := deny("undeclared",' in REFERENCE
    assert REFERENCE.count("\ndecision :=") == 1 and SHIPPED.count("\ndecision :=") == 1
    assert len(SHIPPED) - len(REFERENCE) > 1000  # the three shortcuts went


@pytest.mark.parametrize(
    ("data", "rule"),
    [
        ({"sidecar": {"tools": {"t": {"side_effects": False}}}}, "read_only"),
        (
            {"sidecar": {"tools": {"t": {"side_effects": False, "repeatable": True, "max_result_bytes": 9}}}},
            "read_only",
        ),
        ({"sidecar": {"tools": {"t": {"side_effects": True}}}}, "within_limits"),
        ({"sidecar": {"tools": {"t": {}}}}, "within_limits"),
        ({"sidecar": {"tools": {"t": {"side_effects": True, "repeatable": True}}}}, "within_limits"),
        ({"sidecar": {"tools": {}, "unlisted_tool": UNLISTED_DEFAULT}}, "unlisted"),
        ({"sidecar": {"tools": {"other": {}}, "unlisted_tool": {"side_effects": True}}}, "unlisted"),
        ({"sidecar": {"unlisted_tool": {}}}, "unlisted"),
    ],
)
def test_the_shortcuts_decide_the_common_cases(data: dict[str, Any], rule: str) -> None:
    """Not only equal: the shortcut itself answers these (the chain proper is never tried)."""
    answer = SHORTCUTS_ENGINE.decide(data, PLAIN_INPUT)
    assert answer != "chain" and answer["rule"] == rule
    assert answer == REFERENCE_ENGINE.decide(data, PLAIN_INPUT)


@pytest.mark.parametrize(
    "entry",
    [
        {"side_effects": False, "max_calls_per_session": False},
        {"side_effects": False, "max_calls_per_session": None},
        {"side_effects": False, "schema_hash": False},
        {"side_effects": False, "hidden": False},
        {"side_effects": True, "approval": None},
        {"side_effects": True, "blocked_recipients": {}},
        {"side_effects": True, "max_calls_per_session": 0},
        {"side_effects": True, "hidden": True},
    ],
)
def test_a_setting_the_chain_reads_sends_the_call_down_the_chain(entry: dict[str, Any]) -> None:
    """A setting present, even false or null, is left to the chain: `max_calls_per_session:
    false` limits there (a number sorts after false). The same for the unlisted-tool settings."""
    assert SHORTCUTS_ENGINE.decide({"sidecar": {"tools": {"t": entry}}}, PLAIN_INPUT) == "chain"
    unlisted = {"sidecar": {"tools": {}, "unlisted_tool": {**UNLISTED_DEFAULT, **entry}}}
    assert SHORTCUTS_ENGINE.decide(unlisted, PLAIN_INPUT) == "chain"


def test_without_unlisted_tool_settings_the_chain_decides() -> None:
    """The shortcut reads data.sidecar.unlisted_tool itself; the rules' own default is the chain's."""
    data: dict[str, Any] = {"sidecar": {"tools": {}}}
    assert SHORTCUTS_ENGINE.decide(data, PLAIN_INPUT) == "chain"
    assert SHIPPED_ENGINE.decide(data, PLAIN_INPUT)["rule"] == "unlisted"


def test_unlisted_tools_denied_by_their_settings_go_down_the_chain() -> None:
    data = {"sidecar": {"tools": {}, "unlisted_tool": {**UNLISTED_DEFAULT, "allow": False}}}
    assert SHORTCUTS_ENGINE.decide(data, PLAIN_INPUT) == "chain"
    assert REFERENCE_ENGINE.decide(data, PLAIN_INPUT)["rule"] == "unlisted_denied"


@settings(max_examples=1500, deadline=None)  # equivalence, not timing
@given(DATA, INPUT)
def test_regorus_decides_as_the_chain_without_shortcuts(data: dict[str, Any], document: dict[str, Any]) -> None:
    assert SHIPPED_ENGINE.decide(data, document) == REFERENCE_ENGINE.decide(data, document)


def _opa_decide(bindings: ModuleType, text: str, data: dict[str, Any], document: dict[str, Any]) -> Any:
    """A fresh engine per question: OPA's `add_data` merges into what is there."""
    engine = OpaGoEngine(bindings, PolicyBundle(None, (("sidecar.rego", text),), data, "test"))
    try:
        return engine.value(DECISION, document)
    finally:
        engine.opa.close()


@settings(max_examples=200, deadline=None)  # equivalence, not timing
@given(DATA, INPUT)
def test_opa_decides_as_the_chain_without_shortcuts(
    opa_bindings: ModuleType, data: dict[str, Any], document: dict[str, Any]
) -> None:
    shipped = _opa_decide(opa_bindings, SHIPPED, data, document)
    assert shipped == _opa_decide(opa_bindings, REFERENCE, data, document)
