"""The inspector: one tool result's content in, its anomalies and their spans out.

Pure: no I/O, no wire format, no policy. The model path (sidecar/filters/result_policy.py)
and the MCP path call it the same way, with the content as the wire carries it.

Bounded: at most `max_inspect_bytes` of text are read per result (the parts in document
order; the rest is not, and the result gets `partially_inspected`); every pattern is RE2
(linear time, regex.py); the entropy net scores a bounded number of candidates; at most
`max_spans` spans are kept (more: `spans_capped`, which a redaction cannot honour). JSON in
a result is never parsed: the key-name net reads `"password": "…"` as text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sidecar.inspection.findings import LOCATED, AnomalyKind, Inspection, Span
from sidecar.inspection.markers import MarkerSet
from sidecar.inspection.parts import Path, replace_parts, text_parts
from sidecar.inspection.rules import ToolProfile
from sidecar.inspection.secrets import EntropyRules, KeyRules, SecretScanner


@dataclass(frozen=True, slots=True)
class InspectorLimits:
    max_inspect_bytes: int = 1024 * 1024
    max_spans: int = 256
    keys: KeyRules = field(default_factory=KeyRules)
    entropy: EntropyRules = field(default_factory=EntropyRules)


def redaction_mark(kind: AnomalyKind) -> str:
    """What a redacted span reads as (`[REDACTED: secret_in_result]`)."""
    return f"[REDACTED: {kind.value}]"


class ResultInspector:
    def __init__(self, limits: InspectorLimits | None = None) -> None:
        self.limits = limits or InspectorLimits()
        self.secrets = SecretScanner(self.limits.keys, self.limits.entropy)

    def inspect(self, content: Any, size: int, profile: ToolProfile, markers: MarkerSet | None) -> Inspection:
        """Findings for one result. `size`: its size as the wire counts it (the oversize
        check); `markers`: looked for only when the tool is untrusted. Raises on content it
        cannot walk (ContentTooDeep): the caller fails closed."""
        found = Inspection()
        if size > profile.max_result_bytes:
            found.add(AnomalyKind.OVERSIZED)
        budget = self.limits.max_inspect_bytes
        candidates = [self.limits.entropy.max_candidates]
        spans: list[Span] = []
        for index, part in enumerate(text_parts(content)):
            data = part.text.encode("utf-8", "surrogatepass")
            found.text_bytes += len(data)
            if budget <= 0:
                found.add(AnomalyKind.PARTIAL)
                continue
            if len(data) > budget:
                data = data[:budget]
                found.add(AnomalyKind.PARTIAL)
            budget -= len(data)
            found.inspected_bytes += len(data)
            spans += self.secrets.scan(index, data, candidates)
            if profile.untrusted and markers is not None:
                spans += markers.scan(index, data)
        for span in spans:
            found.add(span.kind)
        found.spans = spans[: self.limits.max_spans]
        found.spans_capped = len(spans) > self.limits.max_spans
        # Inspection kinds first, in a stable order (the policy input and the metric labels).
        order = list(AnomalyKind)
        found.anomalies.sort(key=order.index)
        return found

    def redact(self, content: Any, inspection: Inspection, kinds: frozenset[AnomalyKind] = LOCATED) -> Any:
        """`content` with the spans of `kinds` replaced by `[REDACTED: kind]` (overlapping spans
        merged; the input is never mutated)."""
        chosen = inspection.spans_of(kinds)
        if not chosen:
            return content
        parts = text_parts(content)
        by_part: dict[int, list[Span]] = {}
        for span in chosen:
            by_part.setdefault(span.part, []).append(span)
        replacements: dict[Path, str] = {}
        for index, spans in by_part.items():
            part = parts[index]
            replacements[part.path] = _replace(part.text.encode("utf-8", "surrogatepass"), spans)
        return replace_parts(content, replacements)


def _replace(data: bytes, spans: list[Span]) -> str:
    merged: list[tuple[int, int, AnomalyKind]] = []
    for span in sorted(spans, key=lambda s: (s.start, -s.end)):
        if merged and span.start < merged[-1][1]:
            start, end, kind = merged[-1]
            merged[-1] = (start, max(end, span.end), kind)
        else:
            merged.append((span.start, span.end, span.kind))
    out: list[bytes] = []
    position = 0
    for start, end, kind in merged:
        out += [data[position:start], redaction_mark(kind).encode()]
        position = end
    out.append(data[position:])
    return b"".join(out).decode("utf-8", "surrogatepass")
