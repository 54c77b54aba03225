"""`bench/run.py --quick` reports: every scenario and target measured, every issue-16 target
judged met or missed (the table's, the paced streams', the policy and validation loops'), the
pre-flight passed. It never asserts a number's size (the machine is
shared and noisy; the benchmark reports, it does not fail on slowness)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = {"anthropic_whole", "anthropic_streamed", "chat_whole", "chat_streamed"}
TARGETS = {"direct", "forwarder", "sidecar", "sidecar+tracing"}
COLUMNS = (
    "p50_ms",
    "p99_ms",
    "added_p50_ms",
    "added_p99_ms",
    "added_first_byte_p50_ms",
    "rps_c64",
    "cpu_us_per_request_c64",
)


def _numeric(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def test_quick_run_reports_every_row_and_target(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "bench/run.py", "--quick", "--workers", "2", "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = orjson.loads(out.read_bytes())

    assert result["mode"] == "quick"
    assert result["preflight"]["passed"] is True
    checks = result["preflight"]["checks"]
    assert len(checks) == 5 * 4 + 3, checks  # 5 targets x 4 scenarios, and the three sidecars' metrics

    rows = {(r["scenario"], r["target"]): r for r in result["rows"]}
    assert set(rows) == {(s, t) for s in SCENARIOS for t in TARGETS}
    for key, row in rows.items():
        assert row["n_c1"] > 0 and row["n_c64"] > 0, key
        for column in COLUMNS:
            assert _numeric(row[column]), (key, column, row[column])

    judged = result["targets"]
    # 8 table targets and the paced stream's, each for Anthropic and Chat; policy; validation.
    # The RSS after 100,000 sessions is the full run's: quick says it did not measure it.
    assert len(judged) == 16 + 2 + 2
    assert [t["target"] for t in judged[16:]] == [
        "Anthropic, paced stream: each text event forwarded",
        "Chat, paced stream: each text event forwarded",
        "embedded policy, per call decision (p50)",
        "validation, per valid call (median)",
    ]
    assert any("RSS after 100,000 sessions" in item for item in result["not_measured"])
    paced = {p["api"]: p for p in result["components"]["paced"]}
    assert set(paced) == {"anthropic", "chat"}
    assert all(p["events"] > 10 and _numeric(p["worst_text_ms"]) for p in paced.values()), paced
    assert {t["status"] for t in judged} <= {"met", "missed"}
    assert all(_numeric(t["measured"]) for t in judged), judged
    assert {(r["scenario"], r["target"]) for r in result["ratios"]} == {
        (s, t) for s in SCENARIOS for t in ("sidecar", "sidecar+tracing")
    }

    scaling = {q["scenario"]: q for q in result["scaling"]}
    assert set(scaling) == SCENARIOS
    for q in scaling.values():
        assert q["workers"] == 2 and q["errors"] == 0
        assert all(_numeric(q[k]) for k in ("rps_one_process", "rps_workers", "speedup", "cpu_us_per_request_workers"))

    # The printed report carries the same: the table, one met/missed line per target.
    assert "req/s c=64" in done.stdout
    judged_lines = ("c=", "CPU per request", "paced stream:", "policy, per call", "validation, per valid call")
    lines = [
        line.split()[0]
        for line in done.stdout.splitlines()
        if line.startswith("  m") and any(marker in line for marker in judged_lines)
    ]
    assert len(lines) == 20 and set(lines) <= {"met", "missed"}, done.stdout
    assert "`sidecar run --workers 2` (SQLite state) against one process" in done.stdout
