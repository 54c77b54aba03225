"""Prompt-injection markers: text that tries to speak to the model as its operator.

Applied only to results of tools marked `untrusted` in the policy data
(`data.sidecar.tools.<name>.untrusted: true`): web pages, e-mails, tickets written by
strangers. A marker is a string or an object:

- `"ignore previous instructions"` (or `{"text": …}`): plain text, matched case-insensitively,
  any run of whitespace matching where the marker has a space;
- `{"regex": "…"}`: an RE2 regular expression (no lookaround, no backreferences; case-sensitive
  unless it starts with `(?i)`), matched on the UTF-8 text.

Either may carry a `"name"` (shown in logs instead of `marker_<n>`). `DEFAULT_MARKERS` is the
shipped list: `data.sidecar.results.injection_markers` replaces it, `extra_injection_markers`
adds to it. No list of markers catches every injection: this finds the common, verbatim
attempts, cheaply, so that a policy can withhold them and an operator can see them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sidecar.inspection.findings import AnomalyKind, Span
from sidecar.inspection.regex import PatternError, compile_pattern, escape

DEFAULT_MARKERS: tuple[Any, ...] = (
    {
        "name": "ignore_previous_instructions",
        "regex": r"(?i)\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+)?(?:of\s+)?(?:the\s+|your\s+|my\s+)?"
        r"(?:previous|prior|above|earlier|preceding|original)\s+(?:instructions|prompts?|messages|directions|rules)",
    },
    {
        "name": "reveal_system_prompt",
        "regex": r"(?i)\b(?:reveal|print|show|repeat|output)\s+(?:your|the)\s+"
        r"(?:system\s+prompt|hidden\s+instructions)",
    },
    {
        "name": "role_override",
        "regex": r"(?i)\byou\s+are\s+now\s+(?:DAN\b|in\s+developer\s+mode|an?\s+unrestricted)",
    },
    {
        "name": "hide_from_user",
        "regex": r"(?i)\b(?:do\s+not|don't|never)\s+(?:tell|inform|alert|notify)\s+the\s+user",
    },
    {"name": "new_instructions", "regex": r"(?i)\bnew\s+(?:system\s+)?instructions\s*:"},
    {"name": "chat_template_token", "regex": r"<\|(?:im_start|im_end|endoftext|system|user|assistant)\|>"},
    {"name": "llama_template_token", "regex": r"\[/?INST\]|<</?SYS>>"},
    {"name": "tool_boundary", "regex": r"(?i)</?(?:tool_result|function_results|system-reminder)>"},
)


class MarkerError(ValueError):
    """A marker list that cannot be used (names the entry and why)."""


@dataclass(frozen=True, slots=True)
class Marker:
    name: str
    pattern: str  # RE2


def parse_markers(entries: Any, where: str = "injection_markers", start: int = 0) -> list[Marker]:
    """Marker entries (see the module docstring) as RE2 patterns; raises MarkerError."""
    if not isinstance(entries, list):
        raise MarkerError(f"{where} must be a list of strings or objects, got {type(entries).__name__}")
    out: list[Marker] = []
    for index, entry in enumerate(entries):
        out.append(_marker(entry, f"{where}[{index}]", start + index))
    return out


def _marker(entry: Any, where: str, index: int) -> Marker:
    if isinstance(entry, str):
        entry = {"text": entry}
    if not isinstance(entry, dict):
        raise MarkerError(f"{where} must be a string or an object with `text` or `regex`")
    name = entry.get("name", f"marker_{index}")
    if not isinstance(name, str) or not name:
        raise MarkerError(f"{where}.name must be a non-empty string")
    text, regex = entry.get("text"), entry.get("regex")
    if (text is None) == (regex is None):
        raise MarkerError(f"{where} needs exactly one of `text` and `regex`")
    if text is not None:
        if not isinstance(text, str) or not text.split():
            raise MarkerError(f"{where}.text must be a non-empty string")
        pattern = "(?i)" + r"\s+".join(escape(word) for word in text.split())
    else:
        if not isinstance(regex, str) or not regex:
            raise MarkerError(f"{where}.regex must be a non-empty string")
        pattern = regex
    try:
        compile_pattern(pattern)
    except PatternError as exc:
        raise MarkerError(f"{where}: not an RE2 regular expression: {exc}") from None
    return Marker(name, pattern)


class MarkerSet:
    """The markers in force, compiled: one scan finds whether any matches (RE2, linear time);
    only then is each marker searched for its spans."""

    def __init__(self, markers: Iterable[Marker]) -> None:
        self.markers = list(markers)
        self._each = [compile_pattern(m.pattern) for m in self.markers]
        self._any = compile_pattern("|".join(f"(?:{m.pattern})" for m in self.markers)) if self.markers else None

    @classmethod
    def from_data(cls, results: Any) -> MarkerSet:
        """From `data.sidecar.results` (a mapping or None). Raises MarkerError."""
        section = results if isinstance(results, dict) else {}
        base = section.get("injection_markers")
        markers = parse_markers(list(DEFAULT_MARKERS) if base is None else base)
        extra = section.get("extra_injection_markers")
        if extra is not None:
            markers += parse_markers(extra, "extra_injection_markers", len(markers))
        return cls(markers)

    def scan(self, part: int, data: bytes) -> list[Span]:
        if self._any is None or self._any.search(data) is None:
            return []
        spans: list[Span] = []
        for marker, compiled in zip(self.markers, self._each, strict=True):
            for match in compiled.finditer(data):
                start, end = match.span()
                if end > start:
                    spans.append(Span(part, start, end, AnomalyKind.INJECTION, marker.name))
        return spans
