"""The report's component targets: a value not measured, or not a number, is never a target met."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from proxybench.report import component_targets, not_measured


def _components(**changes: object) -> dict[str, object]:
    found: dict[str, object] = {
        "paced": [{"label": "Anthropic", "worst_text_ms": 0.12}, {"label": "Chat", "worst_text_ms": math.nan}],
        "policy_p50_us": 50.0,
        "validation_median_us": 5.4,
    }
    return found | changes


def test_limits_are_inclusive_and_nan_is_missed() -> None:
    judged = {t["target"]: (t["status"], t["measured"]) for t in component_targets(_components())}
    assert judged == {
        "Anthropic, paced stream: each text event forwarded": ("met", 0.12),
        "Chat, paced stream: each text event forwarded": ("missed", None),
        "embedded policy, per call decision (p50)": ("met", 50.0),
        "validation, per valid call (median)": ("missed", 5.4),
    }


def test_rss_is_judged_only_when_measured_and_errors_fail_it() -> None:
    assert not any("RSS" in t["target"] for t in component_targets(_components()))
    measured = component_targets(_components(rss_mb_after_100k_sessions=140.2, rss_errors=0))
    assert measured[-1]["status"] == "met" and measured[-1]["measured"] == 140.2
    failed = component_targets(_components(rss_mb_after_100k_sessions=140.2, rss_errors=3))
    assert failed[-1]["status"] == "missed" and failed[-1]["measured"] is None
    assert len(not_measured(rss_measured=False)) == 2 and len(not_measured(rss_measured=True)) == 1
