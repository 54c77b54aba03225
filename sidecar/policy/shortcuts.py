"""The shipped rules' three shortcut decisions, answered in Python when those rules are in force.

The packaged library's `decision` chain (sidecar/policy/library/rules/sidecar.rego) starts with
three branches, one per common answer, for a declared call with valid arguments:

- `read_only`: a listed tool with `side_effects: false`;
- `within_limits`: a listed side-effecting tool, no replay, no approval;
- `unlisted`: a tool without an entry, when `data.sidecar.unlisted_tool` allows it as such.

Each reads a few input fields and the tool's settings, and requires that the settings hold no
key any earlier branch of the chain reads. Through regorus such a decision took 65 us on
`bench/bench_policy.py`'s inputs (the input written as JSON and parsed, the rule evaluated,
its value read back), in Python 8 us (alternated in one process; bench/README.md). So when
the policy in force is the shipped rules unchanged (one module, its text exactly the packaged
file: `builtin`, an `example:NAME`, or a directory that `sidecar policy init` wrote and nobody
edited), the sidecar answers these three here and asks regorus for every other call. Any
other policy (an edited line or comment, one module more) is regorus' alone, since this
module cannot know what the change means. The rules' `visible_tools` (the declared names,
minus those whose entry says `hidden: true`) is answered here too, from the names alone.

What the settings allow is worked out once per policy revision, per listed tool. The answers
are the rules' own: tests/policy/test_python_shortcuts.py compares this module with regorus
evaluating the shipped rules on generated settings and inputs (false, null, strings and odd
types where the rules test a field), and checks that a call it does not answer is one the
rules' shortcuts do not answer either. Where Rego's reading of a value is not Python's (a
count of 0.0, which Rego's `== 0` accepts), this module does not answer: regorus decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Any, Final

from sidecar.policy.sources import LIBRARY


class Shortcut(Enum):
    """Which shortcut a tool's settings allow."""

    READ_ONLY = "read_only"
    WITHIN_LIMITS = "within_limits"
    UNLISTED = "unlisted"
    NONE = "none"  # listed, with settings only the chain reads: regorus decides


# The settings that some branch before the shortcut's own rule in the chain reads: present
# at all (even `false` or null: `max_calls_per_session: false` limits, a number sorts after
# it), they leave the call to the chain. The rules' `object.filter` lists, as sets.
_BEFORE_READ_ONLY: Final = frozenset({"hidden", "schema_hash", "max_calls_per_session", "blocked_recipients"})
_BEFORE_WITHIN_LIMITS: Final = _BEFORE_READ_ONLY | {"approval"}
_ABSENT: Final = object()


@cache
def shipped_rules() -> str:
    """The packaged rules' text, as loaded (the comparison is with the exact text)."""
    return (LIBRARY / "rules" / "sidecar.rego").read_text()


def _listed(settings: Any) -> Shortcut:
    """The shortcut a listed tool's settings allow (`data.sidecar.tools[name]`, not `false`)."""
    if type(settings) is not dict:  # null, true, a list, a string: no shortcut's tests hold
        return Shortcut.NONE
    if settings.get("side_effects") is False:
        return Shortcut.NONE if settings.keys() & _BEFORE_READ_ONLY else Shortcut.READ_ONLY
    return Shortcut.NONE if settings.keys() & _BEFORE_WITHIN_LIMITS else Shortcut.WITHIN_LIMITS


def _unlisted_allowed(settings: Any) -> bool:
    """Whether `data.sidecar.unlisted_tool` allows the unlisted shortcut (absent: it does not)."""
    return (
        type(settings) is dict
        and settings.get("side_effects") is not False
        and settings.get("allow") is not False
        and not settings.keys() & _BEFORE_WITHIN_LIMITS
    )


@dataclass(frozen=True, slots=True)
class LibraryShortcuts:
    """The three shortcuts for one policy revision's data."""

    listed: dict[str, Shortcut]  # every tool with an entry other than `false`
    unlisted: Shortcut  # for a tool without one: UNLISTED or NONE
    hidden: frozenset[str]  # the tools whose entry says `hidden: true` (`visible_tools`)

    @classmethod
    def for_policy(cls, modules: tuple[tuple[str, str], ...], data: dict[str, Any]) -> LibraryShortcuts | None:
        """The shortcuts when `modules` are the shipped rules alone, else None (regorus decides
        every call). `data` is the data document regorus was given."""
        if len(modules) != 1 or modules[0][1] != shipped_rules():
            return None
        sidecar = data.get("sidecar", {})
        tools = sidecar.get("tools", {}) if type(sidecar) is dict else _ABSENT
        if type(tools) is not dict:  # a `sidecar` or `tools` that is not an object: regorus
            return None
        # An entry `false` reads as no entry in the unlisted shortcut (`not data.sidecar.tools[name]`).
        listed = {name: _listed(settings) for name, settings in tools.items() if settings is not False}
        unlisted = Shortcut.UNLISTED if _unlisted_allowed(sidecar.get("unlisted_tool")) else Shortcut.NONE
        hidden = frozenset(name for name, s in tools.items() if type(s) is dict and s.get("hidden") is True)
        return cls(listed, unlisted, hidden)

    def visible_tools(self, names: list[str]) -> list[str]:
        """The rules' `visible_tools` for these declared names: each, unless its entry says
        `hidden: true` (`not data.sidecar.tools[name].hidden == true`). Unordered and without
        repeats, as the rules' set is."""
        hidden = self.hidden
        return list(dict.fromkeys(name for name in names if name not in hidden))

    def decision(self, input: dict[str, Any]) -> dict[str, Any] | None:
        """The rules' decision when a shortcut answers `input`, else None (ask regorus)."""
        tool = input.get("tool")
        if type(tool) is not dict or tool.get("declared") is not True:
            return None
        name = tool.get("name")
        validation = input.get("validation")
        if type(name) is not str or type(validation) is not dict or validation.get("valid") is not True:
            return None
        shortcut = self.listed.get(name, self.unlisted)
        if shortcut is Shortcut.READ_ONLY:
            return _allowed("read_only", [f"{name} is read-only"])
        if shortcut is Shortcut.NONE or not _first_plain_call(input):
            return None
        if shortcut is Shortcut.WITHIN_LIMITS:
            return _allowed("within_limits", [])
        return _allowed("unlisted", [f"{name} has no entry in the policy data; allowed as an unlisted tool"])


def _first_plain_call(input: dict[str, Any]) -> bool:
    """`input.replay.count == 0` and `input.approval.status != "approved"` (a status present),
    as Rego reads them; a count that is not an int (0.0, which Rego takes for 0) says no."""
    replay, approval = input.get("replay"), input.get("approval")
    if type(replay) is not dict or type(approval) is not dict:
        return False
    count, status = replay.get("count"), approval.get("status", _ABSENT)
    return type(count) is int and count == 0 and status is not _ABSENT and status != "approved"


def _allowed(rule: str, reasons: list[str]) -> dict[str, Any]:
    """The value the rules' shortcut branch writes out."""
    return {"allow": True, "reasons": reasons, "require_approval": None, "retryable": False, "rule": rule}
