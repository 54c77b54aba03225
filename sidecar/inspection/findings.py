"""What an inspection of one tool result found: anomaly kinds and the spans that carry them.

A span points into one text part of the result (see `parts.py`) by UTF-8 byte offsets, so a
`redact` decision can replace exactly what was matched. Spans never hold the matched text:
logs, metrics and the policy input get kinds, detector names and counts only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class AnomalyKind(StrEnum):
    """The anomalies inspection adds to `input.result.anomalies` (the metric's `kind` label)."""

    SECRET = "secret_in_result"  # a credential by its shape (keys, tokens, private keys) or its key name
    POSSIBLE_SECRET = "possible_secret"  # a long high-entropy token: a heuristic, see secrets.py
    OVERSIZED = "oversized_result"  # above the tool's `max_result_bytes`
    INJECTION = "injection_marker"  # a prompt-injection marker in the result of an `untrusted` tool
    PARTIAL = "partially_inspected"  # larger than `results.max_inspect_bytes`: the rest was not read
    FAILED = "inspection_failed"  # inspection raised: the result is withheld (fail closed)


# Kinds whose findings are located (spans): only these can be redacted.
LOCATED = frozenset({AnomalyKind.SECRET, AnomalyKind.POSSIBLE_SECRET, AnomalyKind.INJECTION})


@dataclass(frozen=True, slots=True)
class Span:
    """Bytes [start, end) of text part `part` matched detector `detector` (a name, never text)."""

    part: int
    start: int
    end: int
    kind: AnomalyKind
    detector: str


@dataclass(slots=True)
class Inspection:
    """The findings for one result. `spans_capped`: more spans were found than are kept, so a
    redaction could not remove them all (the filter withholds instead)."""

    anomalies: list[AnomalyKind] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    inspected_bytes: int = 0
    text_bytes: int = 0
    spans_capped: bool = False

    def add(self, kind: AnomalyKind) -> None:
        if kind not in self.anomalies:
            self.anomalies.append(kind)

    def detectors(self) -> list[dict[str, Any]]:
        """Which detectors fired: one `{"kind", "names"}` per kind (for logs: names only, never
        the matched text). A list, not a dict by kind: a kind is a key the log redactor would
        match (`secret_in_result` holds "secret") and the line would say [REDACTED]."""
        by_kind: dict[str, list[str]] = {}
        for span in self.spans:
            names = by_kind.setdefault(span.kind.value, [])
            if span.detector not in names:
                names.append(span.detector)
        return [{"kind": kind, "names": names} for kind, names in by_kind.items()]

    def spans_of(self, kinds: frozenset[AnomalyKind]) -> list[Span]:
        return [span for span in self.spans if span.kind in kinds]
