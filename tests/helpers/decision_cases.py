"""Generated policy data and call-decision inputs for comparing decisions of the shipped rules
(tests/policy/test_decision_shortcuts.py, test_python_shortcuts.py): tool settings with the
values that trip a careless test, inputs with fields missing or odd."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from sidecar.policy._regorus import Engine
from sidecar.policy.loader import DECISION
from sidecar.policy.sources import LIBRARY

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


PLAIN_INPUT: dict[str, Any] = {
    "tool": {"name": "t", "declared": True, "schema_hash": "h"},
    "session": {"calls_by_tool": {"t": 0}},
    "call": {"args": {}},
    "validation": {"valid": True, "errors": []},
    "replay": {"count": 0},
    "approval": {"status": "none", "approved_by": None, "id": None},
}


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

SHIPPED_ENGINE, REFERENCE_ENGINE, SHORTCUTS_ENGINE = Library(SHIPPED), Library(REFERENCE), Library(SHORTCUTS)
