"""Reading names and descriptions the way a model does: the word-level heuristics of the lint.

Each function answers one narrow question (is this name positional, money-like, generic;
does this description restate the name, list choices, say what absence means). They are
deliberately conservative: a rule that cries wolf on good schemas makes `--strict` useless,
so ambiguous cases (an `e.g.` list, a short code like "USD") are not flagged.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

_TOKENS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def tokens(name: str) -> list[str]:
    """`lookupOrders` -> [lookup, orders]; `support_tickets_search` -> [support, tickets, search]."""
    return [t.lower() for t in _TOKENS.findall(name)]


# --- parameter names -----------------------------------------------------------------------

_POSITIONAL = re.compile(
    r"^(?:arg|args|argument|param|parameter|p|input|var|val|value|field|_)?[_-]?\d+$", re.IGNORECASE
)


def is_positional(name: str) -> bool:
    """arg0, p1, param2, input_3, _0: a name that only says where the value sits."""
    return bool(_POSITIONAL.match(name))


_MONEY = frozenset(
    {"amount", "amounts", "price", "prices", "cost", "costs", "total", "totals", "balance", "balances"}
    | {"fee", "fees", "subtotal", "subtotals"}
)
# Words that make a money-ish name a count or a ratio instead ("total_count", "fee_percent").
_NOT_MONEY = frozenset({"count", "pages", "items", "results", "quantity", "qty", "num", "percent", "pct", "rate"})
_NOT_MONEY |= {"ratio", "tokens", "calls"}


def is_money(name: str) -> bool:
    words = set(tokens(name))
    return bool(words & _MONEY) and not words & _NOT_MONEY


_DATE = frozenset({"date", "dates", "time", "datetime", "timestamp", "ts", "since", "until", "deadline", "dob"})
_DATE |= {"birthday", "birthdate", "expiry", "expires", "expiration"}
_DATE_SUFFIX = frozenset({"at"})  # created_at, due_at
# Words that make a date-ish name something else (a zone, a format, a unit, an id to page from).
_NOT_DATE = frozenset({"zone", "tz", "format", "unit", "units", "type", "kind", "field", "name", "column"})
_NOT_DATE |= {"granularity", "window", "range", "limit", "id", "ids", "out", "of", "offset", "spent"}
_TIME_WORDS = frozenset({"time", "datetime", "timestamp", "ts", "at"})


def date_format(name: str) -> str | None:
    """The `format` a date-like name calls for ("date" or "date-time"), or None."""
    words = tokens(name)
    found = set(words) & _DATE or ({words[-1]} & _DATE_SUFFIX if len(words) > 1 else set())
    if not found or set(words) & _NOT_DATE:
        return None
    return "date-time" if found & _TIME_WORDS else "date"


# Words of numeric parameters that usually need bounds.
COUNT_WORDS = frozenset(
    {"count", "limit", "max", "min", "size", "page", "pages", "per", "top", "k", "n", "num", "number", "offset"}
    | {"qty", "quantity", "retries", "attempts", "timeout", "days", "hours", "minutes", "seconds"}
    | {"depth", "results", "items"}
)

# --- tool names ----------------------------------------------------------------------------

_GENERIC = frozenset({"search", "run", "execute", "exec", "process", "handle", "do", "call", "invoke", "perform"})
_GENERIC |= {"tool", "action", "function", "get", "fetch", "find", "lookup", "query", "data", "task", "helper"}


def is_generic(name: str) -> bool:
    """search, run_tool, do_it: every word is one that fits any tool."""
    words = tokens(name)
    return bool(words) and all(w in _GENERIC or w == "it" for w in words)


_VERBS = frozenset(
    {"get", "list", "search", "find", "lookup", "look", "create", "add", "update", "set", "delete", "remove"}
    | {"send", "fetch", "read", "write", "check", "cancel", "close", "open", "refund", "book", "schedule"}
    | {"start", "stop", "submit", "upload", "download", "generate", "calculate", "compute", "convert"}
    | {"translate", "analyze", "summarize", "validate", "assign", "move", "copy", "rename", "save", "load"}
    | {"edit", "modify", "reply", "notify", "approve", "reject", "show", "describe", "retrieve", "escalate"}
    | {"authenticate", "verify", "query", "run", "execute", "process", "tag", "transfer", "pay", "charge"}
)

CASE_STYLES = {
    "snake_case": re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)+$"),
    "kebab-case": re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)+$"),
    "camelCase": re.compile(r"^[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+$"),
    "PascalCase": re.compile(r"^[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)*$"),
    "SCREAMING_CASE": re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$"),
}


def case_style(name: str) -> str | None:
    """None for one lowercase word (fits every style) and for names of no known style."""
    if re.fullmatch(r"[a-z][a-z0-9]*", name):
        return None
    return next((style for style, pattern in CASE_STYLES.items() if pattern.match(name)), None)


def action_position(name: str) -> str | None:
    """ "action first" (search_orders), "action last" (orders_search, domain_resource_action),
    or None when neither or both ends are verbs."""
    words = tokens(name)
    if len(words) < 2:
        return None
    first, last = words[0] in _VERBS, words[-1] in _VERBS
    if first == last:
        return None
    return "action first" if first else "action last"


def majority(values: Sequence[str | None]) -> str | None:
    """The most common non-None value (the first seen on a tie); None when fewer than two kinds."""
    counts = Counter(v for v in values if v is not None)
    if len(counts) < 2:
        return None
    top = max(counts.values())
    return next(v for v in values if v is not None and counts[v] == top)


def restyle(name: str, style: str) -> str:
    words = tokens(name)
    if style == "snake_case":
        return "_".join(words)
    if style == "kebab-case":
        return "-".join(words)
    if style == "camelCase":
        return words[0] + "".join(w.capitalize() for w in words[1:])
    if style == "PascalCase":
        return "".join(w.capitalize() for w in words)
    return "_".join(words).upper()


# --- descriptions ------------------------------------------------------------------------

_WORDS = re.compile(r"[a-z0-9]+")
_FILLER = frozenset(
    {"the", "a", "an", "of", "to", "for", "this", "that", "is", "it", "its", "and", "or", "in", "on", "by"}
    | {"with", "from", "be", "me", "my", "our", "your", "get", "gets", "return", "returns", "retrieve"}
    | {"retrieves", "fetch", "fetches", "value", "given", "specified", "provided", "parameter", "param"}
    | {"argument", "field", "function", "tool", "name", "which", "will", "s"}
)
_SYNONYMS = {"id": {"identifier"}, "ids": {"identifiers"}, "num": {"number"}, "qty": {"quantity"}}
_SYNONYMS |= {"desc": {"description"}, "info": {"information"}, "msg": {"message"}, "addr": {"address"}}


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") else word


def restates(name: str, description: str) -> bool:
    """True when every content word of the description is already in the name ("The city"
    for `city`, "Send an email" for `send_email`)."""
    named = set(tokens(name))
    for word in list(named):
        named |= _SYNONYMS.get(word, set())
    named = {_stem(w) for w in named}
    content = [w for w in _WORDS.findall(description.lower()) if w not in _FILLER]
    return bool(content) and all(_stem(w) in named for w in content)


_QUOTED = r"""(?:'[^'\s][^']{0,40}'|"[^"\s][^"]{0,40}"|`[^`\s][^`]{0,40}`)"""
_SEP = r"\s*(?:,\s*or\b|,|/|\||\bor\b)\s*"
_QUOTED_LIST = re.compile(rf"{_QUOTED}(?:{_SEP}{_QUOTED})+")
_INTRO_LIST = re.compile(
    r"\b(?:one of(?: the following)?|(?:possible|valid|allowed|accepted|supported) values|options|choices)"
    rf"\s*(?:are|is|include)?\s*[:=]?\s*\(?([\w.-]+(?:{_SEP}[\w.-]+)+)",
    re.IGNORECASE,
)
_PIPE_LIST = re.compile(r"(?<![\w|])([A-Za-z][\w-]*(?:\|[A-Za-z][\w-]*)+)(?![\w|])")
_EXAMPLE_BEFORE = re.compile(r"(?:e\.g\.|for example|such as|like|i\.e\.|example:?)[\s,:(]*$", re.IGNORECASE)


def listed_choices(description: str) -> list[str]:
    """Choices a description lists in prose ('asc' or 'desc'; one of: a, b, c; a|b); [] when
    it lists none, or only examples (`e.g. 'shoes', 'boots'`)."""
    for pattern in (_QUOTED_LIST, _INTRO_LIST, _PIPE_LIST):
        for match in pattern.finditer(description):
            if _EXAMPLE_BEFORE.search(description[max(0, match.start() - 24) : match.start()]):
                continue
            text = match.group(1) if pattern.groups else match.group(0)
            members = [m.strip("'\"` ") for m in re.split(_SEP, text)]
            members = list(dict.fromkeys(m for m in members if m))
            if len(members) >= 2:
                return members
    return []


_ABSENCE = re.compile(
    r"\b(?:defaults?|by default|omit|omits|omitted|omitting|optional|optionally|unless|otherwise|leave|left out"
    r"|blank|falls? back|if (?:not|no|none|empty|absent|missing|unset|omitted|null)"
    r"|when (?:not|absent|omitted|missing|unset|empty)|not (?:provided|given|set|specified))\b",
    re.IGNORECASE,
)
_DEFAULT = re.compile(r"\b(?:defaults?|by default)\b", re.IGNORECASE)


def says_what_absence_means(description: str | None) -> bool:
    return description is not None and bool(_ABSENCE.search(description))


def states_default(description: str | None) -> bool:
    return description is not None and bool(_DEFAULT.search(description))


def unusual_case(member: str) -> bool:
    """ACCEPTED, REMIND_LATER, InProgress, "In progress": not how a sentence writes a value.
    Short codes (USD, GET, C, F) are how everyone writes them, and are not flagged."""
    if " " in member.strip():
        return True
    if not any(c.isupper() for c in member):
        return False
    return not (member.isupper() and member.isalnum() and len(member) <= 4)
