"""Secrets in a tool result: credentials by their shape, values under credential-named keys,
and long high-entropy tokens.

Three nets, as the redactor has two (sidecar/telemetry/redact.py), each tuned for what a tool
result holds rather than a log line: withholding a result costs the agent more than redacting
a log field does, so each net carries guards against what results are full of.

- **Shapes** (`secret_in_result`): the redactor's credential shapes (`REDACTOR_SHAPES`, in
  RE2 syntax), plus a few more provider token formats. Guards: a bearer token must hold a
  digit and a letter ("bearer instruments" is English), an `sk-` key digits and both cases
  (slugs like `sk-learn-tutorial`).
- **Key names** (`secret_in_result`): `password: …`, `"api_key": "…"`, `token=…` in JSON,
  YAML, env files and query strings, when the key, normalised (lower case, without `-_. `),
  contains one of `secret_keys` or equals one of `secret_keys_exact`, and none of
  `secret_key_exclusions` (`secret_name`, `password_policy`, `token_count`). Pagination tokens
  (`next_page_token`), token counts (`max_tokens`) and bare `key` are not credentials. Values
  that only hold a place are skipped: empty, masks (`********`), `null`/`none`/`true`,
  `[REDACTED]`, `${VAR}`, `{{ var }}`, `<password>`, and unquoted values that are code: a call,
  a subscript, a dotted name of letters, a type name, the variable the key is named after
  (`password: str`, `token = get_token()`, `secret = config.secret`, `self.api_key =
  api_key`). Key and value are on one line, or, for a key alone at the start
  of its line, the value on the next, indented one (YAML): source code's `-> Token:` at a
  line's end is not a key with the next line's first word for its value.
- **Entropy** (`possible_secret`): a run of 20-256 characters of `[A-Za-z0-9+/=_-]` whose
  longest `-_/+`-separated segment (at least 16 characters) holds digits and letters, has a
  Shannon entropy of at least 0.8 x log2(its length, at most 64) bits per character and is
  not word-like (its runs of digits, lower-case words and upper-case letters average at most
  2.5 characters). Never flagged: hexadecimal strings (hashes, UUIDs, hex ids), provider object
  ids with a lower-case prefix (`msg_01…`, `call_…`, `cus_…`, `sha256-…`; prefixed *secrets*
  are shapes), lines of a wrapped base64 block (certificates, MIME), `base64,` data, runs longer
  than 256 characters (images, blobs). What still looks random is flagged: provider keys
  without a known prefix (the point), but also random ids, base64 of short texts, content
  hashes in base58 (IPFS, Bitcoin). Measured on random strings (tests/inspection): about 94%
  of 20-24 character alphanumeric tokens, 97% of 32 and more, 90% of 40-character base64.
  Hence its own anomaly kind: the shipped policies flag it and do not withhold.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sidecar.inspection.findings import AnomalyKind, Span
from sidecar.inspection.regex import compile_pattern, group_index

_DIGITS = b"0123456789"
_LETTERS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _has_digit_and_letter(token: bytes) -> bool:
    return len(token.translate(None, _DIGITS)) < len(token) and len(token.translate(None, _LETTERS)) < len(token)


def _digits_and_both_cases(token: bytes) -> bool:
    return _has_digit_and_letter(token) and token.lower() != token and token.upper() != token


@dataclass(frozen=True, slots=True)
class Shape:
    """A credential format: an RE2 pattern whose group named `name` is the secret itself."""

    name: str
    pattern: str
    guard: Callable[[bytes], bool] | None = None


_PEM = r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
# The redactor's shapes (sidecar/telemetry/redact.py `_CREDENTIAL_SHAPES`), one for one, in
# RE2 syntax: lookbehinds become a consumed context outside the named group.
REDACTOR_SHAPES: tuple[Shape, ...] = (
    # PEM private keys (PKCS#1/#8, OpenSSH, PGP blocks); an unterminated block (a truncated
    # result) runs to the next quote, which base64 never holds (the end of a JSON string).
    Shape(
        "private_key", rf"(?P<private_key>{_PEM}(?s:.*?)-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|{_PEM}[^\"]*)"
    ),
    Shape("bearer_token", r"(?i:\bbearer)\s+(?P<bearer_token>[A-Za-z0-9\-._~+/]{8,}=*)", _has_digit_and_letter),
    Shape("jwt", r"\b(?P<jwt>eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*)"),
    Shape("provider_key", r"(?:^|[^A-Za-z0-9])(?P<provider_key>sk-[A-Za-z0-9_-]{16,})", _digits_and_both_cases),
    Shape("aws_access_key", r"\b(?P<aws_access_key>(?:AKIA|ASIA)[A-Z0-9]{16})\b"),
    Shape("github_token", r"\b(?P<github_token>gh[pousr]_[A-Za-z0-9]{30,})"),
    Shape("slack_token", r"\b(?P<slack_token>xox[abprs]-[A-Za-z0-9-]{10,})"),
    Shape("url_password", r"://[^/\s:@]*:(?P<url_password>[^/\s@]+)@"),
)
EXTRA_SHAPES: tuple[Shape, ...] = (
    Shape("github_pat", r"\b(?P<github_pat>github_pat_[A-Za-z0-9_]{22,})"),
    Shape("stripe_key", r"\b(?P<stripe_key>(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,})"),
    Shape("google_api_key", r"\b(?P<google_api_key>AIza[A-Za-z0-9_-]{35})"),
    Shape("gitlab_token", r"\b(?P<gitlab_token>glpat-[A-Za-z0-9_-]{20,})"),
    Shape("npm_token", r"\b(?P<npm_token>npm_[A-Za-z0-9]{36})\b"),
    Shape("huggingface_token", r"\b(?P<huggingface_token>hf_[A-Za-z0-9]{30,})"),
    Shape("pypi_token", r"\b(?P<pypi_token>pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,})"),
)
SHAPES = REDACTOR_SHAPES + EXTRA_SHAPES

# A credential-looking key, then `:` or `=`, an optional auth scheme word, and the value:
# double-quoted (JSON escapes kept whole), single-quoted, or bare. The key fragments only
# pre-select; `KeyRules` decides. A bare value never starts a JSON object or array (its keys
# are scanned on their own). Key and value share a line (JSON, env files, query strings,
# `key: value` YAML), except for YAML's value on the next line (`wrap`, below): a `-> Token:`
# ending a line of source code does not take the next line's first word for its value.
_KEY = r"(?P<key>[A-Za-z0-9_.\-]{0,40}(?i:pass|secret|key|token|auth|credential|pwd)[A-Za-z0-9_.\-]{0,40})"
_VALUE = r"(?:\"(?P<dq>(?:[^\"\\\n]|\\.)*)\"|'(?P<sq>[^'\n]*)'|(?P<bare>[^\s\"',;&{}\[\]<>\\][^\s\"',;&}<>\\]*))"
# YAML may put a mapping's value on the next, indented line (`wrap`): taken only for a key
# that starts its line (`password:` alone on it), which a line of code does not.
_KEY_VALUE = _KEY + r"[\"']?[ \t]*[:=][ \t]*(?P<wrap>\r?\n[ \t]+)?(?:(?i:basic|bearer|token|digest)[ \t]+)?" + _VALUE


def _starts_line(data: bytes, start: int) -> bool:
    """Only indentation (and a quote) between the start of its line and `start`. (A wrapped
    key ends its line, so each line is searched back once at most.)"""
    line_start = data.rfind(b"\n", 0, start) + 1
    return not data[line_start:start].strip(b" \t\"'")


DEFAULT_SECRET_KEYS: tuple[str, ...] = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "apikey",
    "accesskey",
    "privatekey",
    "signingkey",
    "encryptionkey",
    "authorization",
    "credential",
    "accesstoken",
    "refreshtoken",
    "idtoken",
    "authtoken",
    "sessiontoken",
    "bearertoken",
    "apitoken",
    "oauthtoken",
    "csrftoken",
    "securitytoken",
    "bottoken",
)
DEFAULT_SECRET_KEYS_EXACT: tuple[str, ...] = ("token", "pwd", "pass", "auth")
DEFAULT_SECRET_KEY_EXCLUSIONS: tuple[str, ...] = (
    "name",
    "ref",
    "hint",
    "policy",
    "length",
    "expir",
    "count",
    "type",
    "required",
    "enabled",
    "created",
    "updated",
    "changed",
    "version",
    "path",
    "secretar",
)
_PLACEHOLDERS = frozenset(
    {
        "null",
        "none",
        "nil",
        "true",
        "false",
        "undefined",
        "redacted",
        "[redacted]",
        "<redacted>",
        "hidden",
        "masked",
        "n/a",
        "na",
    }
)
_MASK_CHARS = frozenset("*•xX#.-_ ")


def normalise_key(key: str) -> str:
    """`X-Api-Key`, `api_key`, `apiKey` and `API KEY` all read `apikey` (as the redactor's)."""
    return key.lower().replace("-", "").replace("_", "").replace(" ", "").replace(".", "")


@dataclass(frozen=True, slots=True)
class KeyRules:
    """Which key names hold credentials (see the module docstring)."""

    contains: tuple[str, ...] = DEFAULT_SECRET_KEYS
    exact: tuple[str, ...] = DEFAULT_SECRET_KEYS_EXACT
    exclusions: tuple[str, ...] = DEFAULT_SECRET_KEY_EXCLUSIONS

    def credential(self, key: str) -> bool:
        norm = normalise_key(key)
        if not (norm in self.exact or any(word in norm for word in self.contains)):
            return False
        return not any(word in norm for word in self.exclusions)


# A bare value that is code, not a literal: a call, a subscript or generic, a dotted name of
# letters, a type name (`password: str`, `token = get_token()`, `secret = config.secret`,
# `api_key: Optional[str]`). Literal secrets have none of these (a token's dotted parts hold
# digits: `ya29.a0Af…`); a password with brackets is quoted where it is a literal.
_CODE_VALUE = compile_pattern(r"[()\[]|\A[A-Za-z_]+(?:\.[A-Za-z_]+)+\z")  # RE2, as every net here
_TYPE_NAMES = frozenset(
    b"str int float bool bytes dict list tuple set object any unknown never void "
    b"string number boolean bigint Any String Number Boolean Object".split()
)


def _code_like(value: bytes, key: str) -> bool:
    """A bare value that reads as code (see `_CODE_VALUE`), not a credential; or the variable
    its key is named after (`self.api_key = api_key`, `token=token`)."""
    if value in _TYPE_NAMES or _CODE_VALUE.search(value) is not None:
        return True
    name = normalise_key(key.rsplit(".", 1)[-1])
    return normalise_key(value.decode("utf-8", "replace")) == name


def placeholder(value: bytes) -> bool:
    """A value that only holds a place (nothing to leak)."""
    text = value.decode("utf-8", "replace").strip()
    if not text or set(text) <= _MASK_CHARS:
        return True
    if text.lower() in _PLACEHOLDERS or text.startswith(("[REDACTED", "${", "{{", "%(")):
        return True
    return text.startswith("<") and text.endswith(">")


@dataclass(frozen=True, slots=True)
class EntropyRules:
    enabled: bool = True
    min_length: int = 20
    max_length: int = 256
    # Candidates scored per result at most (the rest are not: a cost bound for hostile input).
    max_candidates: int = 1000


_SEGMENT_MIN = 16
_BITS_FACTOR = 0.8
_MAX_AVERAGE_RUN = 2.5
_HEX = _DIGITS + b"abcdefABCDEF-"
# Separators become spaces (split() then cuts there); every byte becomes its class for runs.
_TO_SPACES = bytes.maketrans(b"-_/+=", b"     ")
_CLASSES = bytes(
    ord("d") if 48 <= b <= 57 else ord("u") if 65 <= b <= 90 else ord("l") if 97 <= b <= 122 else ord("o")
    for b in range(256)
)
# Class pairs that start a new run (an upper-case letter followed by lower case does not: it
# starts its word), and the triple where a run of capitals ends before a word (`HTTPServer`).
# Distinct-letter pairs cannot overlap, nor can `uul`, so bytes.count counts them exactly.
_RUN_STARTS = (b"ud", b"du", b"ld", b"dl", b"lu", b"uo", b"ou", b"lo", b"ol", b"do", b"od")


def _prefixed_id(token: bytes) -> bool:
    """`msg_01…`, `chatcmpl-…`, `sha256-…`: a lower-case prefix of up to 12 (letters first,
    then letters or digits), one `_` or `-`, then letters and digits only."""
    for position, byte in enumerate(token[:13]):
        if byte in (0x5F, 0x2D):  # _ -
            rest = token[position + 1 :]
            return position > 0 and rest.isalnum()
        if not (97 <= byte <= 122 or (position and 48 <= byte <= 57)):
            return False
    return False


def _average_run(segment: bytes) -> float:
    """Mean length of its runs: digits, lower-case words (with their capital: `User`), and
    upper-case letters (`HTTPServer` is `HTTP` + `Server`)."""
    classes = segment.translate(_CLASSES)
    runs = 1 + sum(classes.count(pair) for pair in _RUN_STARTS) + classes.count(b"uul")
    return len(segment) / runs


# c * log2(c) for every count a candidate's byte can have (at most its 4096-byte cap).
_C_LOG_C = [0.0] + [c * math.log2(c) for c in range(1, 4097)]


def _entropy(segment: bytes) -> float:
    """Shannon entropy in bits per byte: log2(n) - sum(c log2 c) / n."""
    n = len(segment)
    return math.log2(n) - sum(map(_C_LOG_C.__getitem__, Counter(segment).values())) / n


def random_looking(token: bytes) -> bool:
    """The entropy net's test for one candidate (see the module docstring)."""
    token = token.rstrip(b"=")
    if not token.translate(None, _HEX) or _prefixed_id(token):
        return False
    segment = max(token.translate(_TO_SPACES).split(), key=len, default=b"")
    if len(segment) < _SEGMENT_MIN or not _has_digit_and_letter(segment):
        return False
    if _average_run(segment) > _MAX_AVERAGE_RUN:  # word-like: cheaper to tell than entropy
        return False
    return _entropy(segment) >= _BITS_FACTOR * math.log2(min(len(segment), 64))


def _disjoint(spans: list[Span]) -> list[tuple[int, int]]:
    """The spans' byte ranges, sorted and merged."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted((s.start, s.end) for s in spans):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


class SecretScanner:
    """Finds secrets in one text part (UTF-8 bytes). Compiled once; safe to share."""

    def __init__(self, keys: KeyRules | None = None, entropy: EntropyRules | None = None) -> None:
        self.keys = keys or KeyRules()
        self.entropy = entropy or EntropyRules()
        self._shapes = compile_pattern("|".join(f"(?:{shape.pattern})" for shape in SHAPES))
        self._shape_groups = [(shape.name, group_index(self._shapes, shape.name), shape.guard) for shape in SHAPES]
        self._key_value = compile_pattern(_KEY_VALUE)
        self._key_group = group_index(self._key_value, "key")
        self._wrap_group = group_index(self._key_value, "wrap")
        self._value_groups = [group_index(self._key_value, name) for name in ("dq", "sq", "bare")]
        self._bare_group = self._value_groups[-1]
        self._candidates = compile_pattern(rf"[A-Za-z0-9+/=_\-]{{{self.entropy.min_length},}}")

    def scan(self, part: int, data: bytes, budget: list[int]) -> list[Span]:
        """Spans of secrets in `data`. `budget[0]`: entropy candidates left for this result."""
        spans = list(self._by_shape(part, data))
        spans += self._by_key(part, data)
        if self.entropy.enabled:
            spans += self._by_entropy(part, data, spans, budget)
        return spans

    def _by_shape(self, part: int, data: bytes) -> Iterable[Span]:
        for match in self._shapes.finditer(data):
            for name, group, guard in self._shape_groups:
                start, end = match.span(group)
                if start < 0:
                    continue
                if guard is None or guard(data[start:end]):
                    yield Span(part, start, end, AnomalyKind.SECRET, name)
                break

    def _by_key(self, part: int, data: bytes) -> Iterable[Span]:
        position = 0
        while (match := self._key_value.search(data, position)) is not None:
            position = max(match.end(), position + 1)
            start, end = match.span(self._key_group)
            wrapped = match.span(self._wrap_group)[1]
            key = data[start:end].decode("utf-8", "replace")
            credential = self.keys.credential(key)
            if wrapped >= 0 and not (credential and _starts_line(data, start)):
                # Not a wrapped YAML value: the next line is searched from its start (it
                # may hold a key of its own, `api_key: ...` under `keys:` or under code).
                position = wrapped
                continue
            if not credential:
                continue
            for group in self._value_groups:
                start, end = match.span(group)
                if start >= 0:
                    value = data[start:end]
                    if not placeholder(value) and not (group == self._bare_group and _code_like(value, key)):
                        yield Span(part, start, end, AnomalyKind.SECRET, "key_name")
                    break

    def _by_entropy(self, part: int, data: bytes, found: list[Span], budget: list[int]) -> Iterable[Span]:
        limit = self.entropy.max_length
        taken = _disjoint(found)  # what the other nets found is not scored again
        index = 0
        for match in self._candidates.finditer(data):
            if budget[0] <= 0:
                return
            start, end = match.span()
            while index < len(taken) and taken[index][1] <= start:
                index += 1
            covered = index < len(taken) and taken[index][0] < end
            if covered or end - start > limit or _skipped_context(data, start, end):
                continue
            budget[0] -= 1
            if random_looking(data[start:end]):
                yield Span(part, start, end, AnomalyKind.POSSIBLE_SECRET, "entropy")


_WRAPPED = 60  # a base64 block wrapped at 64 or 76 characters a line
_BASE64 = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")


def _line_run(data: bytes, position: int, step: int) -> int:
    """Base64 characters in the line next to `position` (step -1: the line above), up to 64."""
    while 0 <= position < len(data) and data[position] in b"\r\n":
        position += step
    run = 0
    while 0 <= position < len(data) and data[position] in _BASE64 and run < 64:
        run, position = run + 1, position + step
    return run


def _skipped_context(data: bytes, start: int, end: int) -> bool:
    """`base64,` data, and the lines of a wrapped base64 block (a line next to a long line)."""
    if data[max(0, start - 7) : start] == b"base64,":
        return True
    if start and data[start - 1] == 0x0A and _line_run(data, start - 1, -1) >= _WRAPPED:
        return True
    return end - start >= _WRAPPED and data[end : end + 1] in (b"\n", b"\r") and _line_run(data, end, 1) >= 4


__all__ = [
    "DEFAULT_SECRET_KEYS",
    "DEFAULT_SECRET_KEYS_EXACT",
    "DEFAULT_SECRET_KEY_EXCLUSIONS",
    "EXTRA_SHAPES",
    "REDACTOR_SHAPES",
    "SHAPES",
    "EntropyRules",
    "KeyRules",
    "SecretScanner",
    "Shape",
    "random_looking",
]
