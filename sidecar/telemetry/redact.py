"""Credential redaction for everything the sidecar writes down (logs, rejection log, approvals).

Two independent nets, because either alone leaks: a secret under an innocuous key
(`{"cmd": "curl -H 'Authorization: Bearer …'"}`) is caught by its shape, and a secret with no
recognisable shape (`{"password": "hunter2"}`) is caught by its key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from sidecar.memo import ShortMemo

REDACTED = "[REDACTED]"

# Same list as RejectionLogSettings.redact_keys' default, for callers without settings.
DEFAULT_KEY_PATTERNS: tuple[str, ...] = (
    "password",
    "secret",
    "token",
    "api_key",
    "authorization",
    "credential",
)

# Deeper than this is not a real payload; redact the rest rather than recurse unboundedly.
_MAX_DEPTH = 64

_CREDENTIAL_SHAPES = [
    # PEM private keys; an unterminated block (truncated payload) is redacted to the end.
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----|.*\Z)",
    # HTTP bearer tokens, with the scheme word so the result reads "Authorization: [REDACTED]".
    r"(?i:\bbearer)\s+[A-Za-z0-9\-._~+/]{8,}=*",
    # JWTs (header.payload.signature, the signature may be empty for alg=none).
    r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*",
    # OpenAI / Anthropic keys: sk-…, sk-proj-…, sk-ant-api03-…
    r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{16,}",
    # AWS access key ids (long-lived and STS).
    r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b",
    # GitHub and Slack tokens: cheap to add, common in agent tool arguments.
    r"\bgh[pousr]_[A-Za-z0-9]{30,}",
    r"\bxox[abprs]-[A-Za-z0-9-]{10,}",
    # user:password@ in URLs, the user possibly empty (redis://:PASSWORD@host).
    r"(?<=://)[^/\s:@]*:[^/\s@]+(?=@)",
]
_CREDENTIAL_RE = re.compile("|".join(f"(?:{p})" for p in _CREDENTIAL_SHAPES), re.DOTALL)
# key = value / "key": "value" / key: value in raw text (unparseable arguments, error bodies,
# query strings): the value after a credential-named key (not an auth scheme word: the bearer
# shape takes those). A colon needs a space or a quote after it: `token:1a2b3c4d` is the
# fingerprint the admin API names a token by, not a token.
_KEY_VALUE_RE = re.compile(
    r"""(?i)((?:password|passwd|secret|token|api[_-]?key|authorization|credentials?)["']?\s*"""
    r"""(?:=\s*|:\s+|:(?=["']))["']?)"""
    r"""(?!(?:bearer|basic)\b)(?!\[REDACTED\])([^\s"',;&}]{3,})"""
)


# Short strings recur on every log line (session ids, model and tool names, outcomes): their
# redacted form is remembered, bounded by count and length (at most ~1 MiB of text).
_SHORT = 256
_SHORT_MAX = 4096
_short_texts: ShortMemo[str, str] = ShortMemo(_SHORT_MAX, _SHORT)


def redact_text(text: str) -> str:
    """Replace every credential-shaped substring of `text` by [REDACTED]."""
    if len(text) < 8:
        return text
    if len(text) > _SHORT:
        return _redact_text(text)
    done = _short_texts.get(text)
    if done is None:
        done = _short_texts.keep(text, _redact_text(text), len(text))
    return done


def _redact_text(text: str) -> str:
    return _KEY_VALUE_RE.sub(lambda m: m.group(1) + REDACTED, _CREDENTIAL_RE.sub(REDACTED, text))


def _norm_key(key: str) -> str:
    # "X-Api-Key", "api_key", "apiKey" and "API KEY" must all match the pattern "api_key".
    return key.lower().replace("-", "").replace("_", "").replace(" ", "").replace(".", "")


class KeyMatcher:
    """Case-insensitive substring match of a key against patterns, ignoring - _ . and spaces."""

    __slots__ = ("_answers", "_patterns")

    # Keys seen are remembered (a log line's keys are the same every time), up to this many.
    MAX_REMEMBERED = 4096

    def __init__(self, patterns: Iterable[str]) -> None:
        self._patterns = tuple(p for p in (_norm_key(x) for x in patterns) if p)
        # key -> (the key as written out, whether it names a credential)
        self._answers: ShortMemo[str, tuple[str, bool]] = ShortMemo(self.MAX_REMEMBERED, _SHORT)

    def __call__(self, key: str) -> bool:
        return self.plan(key)[1]

    def plan(self, key: str) -> tuple[str, bool]:
        """The key redacted (`redact_text`), and whether it names a credential: both remembered
        for short keys, so a log line's known keys cost one lookup each. A longer key (the
        arguments a model wrote may have any) is worked out every time: the memory is bounded
        by count and length."""
        answer = self._answers.get(key)
        if answer is None:
            norm = _norm_key(key)
            answer = self._answers.keep(key, (redact_text(key), any(p in norm for p in self._patterns)), len(key))
        return answer


_matchers: dict[tuple[str, ...], KeyMatcher] = {}


def key_matcher(patterns: Iterable[str]) -> KeyMatcher:
    """A cached matcher: redaction runs per log line, the pattern list almost never changes."""
    key = tuple(patterns)
    matcher = _matchers.get(key)
    if matcher is None:
        if len(_matchers) > 64:
            _matchers.clear()
        matcher = _matchers[key] = KeyMatcher(key)
    return matcher


def _sensitive_value(key: str, value: Any) -> bool:
    # Nothing to hide in null/bool, and token *counts* (max_tokens, input_tokens) are not tokens.
    if value is None or isinstance(value, bool):
        return False
    return not (isinstance(value, int) and key.lower().endswith("tokens"))


def redact(value: Any, key_patterns: Iterable[str] | KeyMatcher = DEFAULT_KEY_PATTERNS) -> Any:
    """A redacted copy of a JSON-like value (the input is never mutated).

    Values under matching keys become [REDACTED] whole, whatever their type; credential-shaped
    substrings of any string (keys included) are replaced wherever they are.
    """
    matcher = key_patterns if isinstance(key_patterns, KeyMatcher) else key_matcher(key_patterns)
    return _redact(value, matcher, 0)


# Values with nothing in them to redact; checked first, before the Mapping ABC (a slower
# check), because most values of a log line are numbers, flags and nulls.
_SCALARS = (bool, int, float, type(None))
# The same, by exact type: a mapping's values of these types are written out without a call
# (subclasses, such as enum members, take the general path).
_PLAIN_SCALARS = frozenset({bool, int, float, type(None)})


def _redact(value: Any, matcher: KeyMatcher, depth: int) -> Any:
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, _SCALARS):
        return value
    if depth >= _MAX_DEPTH and isinstance(value, (Mapping, list, tuple)):
        return REDACTED
    if type(value) is dict or isinstance(value, Mapping):
        return _redact_mapping(value, matcher, depth)
    if isinstance(value, (list, tuple)):
        return [_redact(v, matcher, depth + 1) for v in value]
    return value


def _redact_mapping(value: Mapping[Any, Any], matcher: KeyMatcher, depth: int) -> dict[Any, Any]:
    """A log line is one mapping of mostly short strings and numbers: each key is one lookup
    (`KeyMatcher.plan`), and a plain string or number value is handled here, without a call."""
    out: dict[Any, Any] = {}
    for k, v in value.items():
        if type(k) is str:
            skey = k
            written, named = matcher.plan(k)
        else:  # a str subclass is written redacted, any other key as it is (matched as text)
            skey = k if isinstance(k, str) else str(k)
            written, named = (redact_text(skey) if isinstance(k, str) else k), matcher(skey)
        if named and _sensitive_value(skey, v):
            out[written] = REDACTED
        elif type(v) is str:
            out[written] = redact_text(v)
        elif type(v) in _PLAIN_SCALARS:
            out[written] = v
        else:
            out[written] = _redact(v, matcher, depth + 1)
    return out
