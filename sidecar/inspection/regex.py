"""RE2, the regular expression engine every inspection pattern runs on.

RE2 (Google's, PyPI `google-re2`) matches in time linear in the text whatever the pattern: no
pattern, shipped or written by an operator, can backtrack catastrophically on a hostile tool
result. The price is its syntax: no backreferences and no lookaround (a pattern that uses them
is refused when it is loaded, with RE2's message). Patterns run on UTF-8 bytes, so match
offsets are byte offsets.
"""

from __future__ import annotations

from typing import Any

import re2

# Generous: the shipped patterns need a fraction of it; an operator's huge alternation still
# compiles, and searches that outgrow the DFA cache fall back to RE2's (linear) NFA.
_MAX_MEM = 64 << 20


class PatternError(ValueError):
    """A pattern RE2 cannot compile (its message says why)."""


def compile_pattern(pattern: str) -> Any:
    """A compiled RE2 pattern over bytes. Raises PatternError."""
    options = re2.Options()
    options.log_errors = False
    options.max_mem = _MAX_MEM
    try:
        return re2.compile(pattern.encode("utf-8"), options)
    except re2.error as exc:
        detail = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise PatternError(detail) from None


def escape(text: str) -> str:
    """`text` as a pattern that matches it literally."""
    return str(re2.escape(text))


def group_index(compiled: Any, name: str) -> int:
    """The number of named group `name` (RE2's match objects take numbers only)."""
    return int(compiled.groupindex[name.encode("utf-8")])
