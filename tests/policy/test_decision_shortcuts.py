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
from hypothesis import strategies as st

from sidecar.policy._regorus import Engine
from sidecar.policy.loader import DECISION, PolicyBundle
from sidecar.policy.sources import LIBRARY
from tests.helpers.opa_go import OpaGoEngine

SHIPPED = (LIBRARY / "rules" / "sidecar.rego").read_text()
# The shortcuts are the chain's first three branches; the chain proper starts at `undeclared`
# and ends with `within_limits`.
FIRST = 'decision := {"allow": true, "reasons": [sprintf("%s is read-only"'
CHAIN = '} else := deny("undeclared",'
LAST = '} else := allowed("within_limits", [])\n'


def without_shortcuts(text: str) -> str:
    start, chain = text.index(FIRST), text.index(CHAIN)
    return text[:start] + "decision := " + text[chain + len("} else := ") :]


def shortcuts_only(text: str) -> str:
    """The shortcuts, then "chain" where the chain proper would decide."""
    chain, last = text.index(CHAIN), text.index(LAST)
    return text[:chain] + '} else := "chain"\n' + text[last + len(LAST) :]


REFERENCE = without_shortcuts(SHIPPED)
SHORTCUTS = shortcuts_only(SHIPPED)

# Tool settings: up to three keys, each with the values that trip a careless test (false, null,
# a string for a flag, 0 for a limit); often none, which is where the shortcuts answer.
SETTING_VALUES: dict[str, list[Any]] = {
    "side_effects": [True, False, None, "false"],
    "repeatable": [True, False, None],
    "hidden": [True, False, None, "true"],
    "allow": [True, False],
    "schema_hash": [None, False, "h", "other"],
    "schema_pin": ["deny", "approval"],
    "max_calls_per_session": [None, False, 0, 1, 3],
    "blocked_recipients": [None, False, {}, {"recipient_arg": "to", "domains": ["bad.example"]}],
    "approval": [
        None,
        False,
        {},
        {"always": True},
        {"amount_arg": "amount", "max_amount": 100},
        {"recipient_arg": "to", "allowed_domains": ["example.com"]},
    ],
    "max_result_bytes": [10],
}
SETTINGS = st.lists(st.sampled_from(sorted(SETTING_VALUES)), max_size=3, unique=True).flatmap(
    lambda keys: st.fixed_dictionaries({key: st.sampled_from(SETTING_VALUES[key]) for key in keys})
)
# The shortcuts' own cases, half the time: read-only or side-effecting, maybe with one more key.
COMMON = st.builds(lambda side_effects, more: {**more, "side_effects": side_effects}, st.booleans(), SETTINGS)
ENTRY = COMMON | SETTINGS | st.none() | st.sampled_from([False, [], "t"])  # None: the tool has no entry
UNLISTED_DEFAULT = {"side_effects": True, "repeatable": False, "allow": True}  # as `builtin` ships it
NO_TOOLS = object()  # data without a `tools` object at all
DATA = st.builds(
    lambda entry, unlisted: {
        "sidecar": {
            **({} if entry is NO_TOOLS else {"tools": {} if entry is None else {"t": entry}}),
            **({} if unlisted is None else {"unlisted_tool": unlisted}),
        }
    },
    ENTRY | st.just(NO_TOOLS),
    # None: the rules' own default; else as shipped, maybe with a few settings changed
    st.none() | st.builds(lambda more: {**UNLISTED_DEFAULT, **more}, SETTINGS) | SETTINGS,
)
ABSENT = object()  # a field left out of the input


def _present(**fields: Any) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not ABSENT}


# The input a call decision reads, each field usually as the sidecar writes it for a plain call.
INPUT = st.builds(
    lambda declared, schema_hash, count, valid, replay, status, args: _present(
        tool=_present(name="t", declared=declared, schema_hash=schema_hash),
        session={"calls_by_tool": {"t": count}},
        call={"args": args},
        validation=_present(valid=valid, errors=[]),
        replay=_present(count=replay),
        approval=_present(status=status, approved_by="ops", id="ap_1"),
    ),
    st.sampled_from([True, True, False, "yes", ABSENT]),
    st.sampled_from(["h", "x", ABSENT]),
    st.integers(0, 4),
    st.sampled_from([True, True, False, ABSENT]),
    st.sampled_from([0, 0, 1, "0", ABSENT]),
    st.sampled_from(["none", "approved", "pending", ABSENT]),
    st.fixed_dictionaries(
        {},
        optional={
            "amount": st.sampled_from([50, 500, "x"]),
            "to": st.sampled_from(["u@example.com", "u@bad.example", "not an address"]),
        },
    ),
)


class Library:
    """One library text compiled once, each question asked of a copy with its own data and
    input (the sidecar's regorus wrapper: undefined is `UNDEFINED`)."""

    def __init__(self, text: str) -> None:
        self.compiled = Engine()
        self.compiled.add_policy("sidecar.rego", text)

    def decide(self, data: dict[str, Any], document: dict[str, Any]) -> Any:
        engine = self.compiled.clone()
        engine.add_data(data)
        engine.set_input(document)
        return engine.eval_rule(DECISION)


SHIPPED_ENGINE, REFERENCE_ENGINE, SHORTCUTS_ENGINE = Library(SHIPPED), Library(REFERENCE), Library(SHORTCUTS)


def test_the_reference_is_the_chain_without_its_shortcuts() -> None:
    assert FIRST not in REFERENCE and CHAIN not in REFERENCE
    assert 'decision := deny("undeclared",' in REFERENCE
    assert REFERENCE.count("\ndecision :=") == 1 and SHIPPED.count("\ndecision :=") == 1
    assert len(SHIPPED) - len(REFERENCE) > 1000  # the three shortcuts went


PLAIN_INPUT = {
    "tool": {"name": "t", "declared": True, "schema_hash": "h"},
    "session": {"calls_by_tool": {"t": 0}},
    "call": {"args": {}},
    "validation": {"valid": True, "errors": []},
    "replay": {"count": 0},
    "approval": {"status": "none", "approved_by": None, "id": None},
}


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
