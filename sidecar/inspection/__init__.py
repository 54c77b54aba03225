"""Tool-result inspection: secrets, oversized results and prompt-injection markers.

A pure inspector over a result's content (text or JSON, as any wire carries it): the model
path (sidecar/filters/result_policy.py) and the MCP path use the same one. It finds; the
policy decides (`data.sidecar.result_decision`); the caller applies (a dialect rewrites the
request). See docs/policies.md "Results".
"""

from sidecar.inspection.findings import LOCATED, AnomalyKind, Inspection, Span
from sidecar.inspection.inspector import InspectorLimits, ResultInspector, redaction_mark
from sidecar.inspection.markers import DEFAULT_MARKERS, MarkerError, MarkerSet
from sidecar.inspection.parts import ContentTooDeep, text_parts
from sidecar.inspection.regex import PatternError
from sidecar.inspection.rules import DEFAULT_MAX_RESULT_BYTES, ResultRules, ToolProfile
from sidecar.inspection.secrets import EntropyRules, KeyRules, SecretScanner

__all__ = [
    "DEFAULT_MARKERS",
    "DEFAULT_MAX_RESULT_BYTES",
    "LOCATED",
    "AnomalyKind",
    "ContentTooDeep",
    "EntropyRules",
    "Inspection",
    "InspectorLimits",
    "KeyRules",
    "MarkerError",
    "MarkerSet",
    "PatternError",
    "ResultInspector",
    "ResultRules",
    "SecretScanner",
    "Span",
    "ToolProfile",
    "redaction_mark",
    "text_parts",
]
