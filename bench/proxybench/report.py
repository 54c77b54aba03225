"""From measured series to the report: one row per scenario and target, the issue-16 targets
(met / missed), and the ratios sidecar ÷ forwarder and sidecar ÷ direct, as text and JSON."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from proxybench.bodies import Api
from proxybench.load import Series, quantile_ms

DIRECT, FORWARDER, SIDECAR, TRACED = "direct", "forwarder", "sidecar", "sidecar+tracing"
TARGET_NAMES = (DIRECT, FORWARDER, SIDECAR, TRACED)
CONCURRENCY = 64


@dataclass(frozen=True, slots=True)
class Scenario:
    api: Api
    stream: bool

    @property
    def key(self) -> str:
        return f"{self.api.name.lower()}_{'streamed' if self.stream else 'whole'}"

    @property
    def label(self) -> str:
        return f"{self.api.label} {'streamed' if self.stream else 'whole'}"


SCENARIOS = tuple(Scenario(api, stream) for api in Api for stream in (False, True))


@dataclass(slots=True)
class Measured:
    """One scenario's series: c=1 interleaved over the targets, and c=64 per target."""

    scenario: Scenario
    c1: dict[str, Series]
    c64: dict[str, Series]


def _number(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)


def row(measured: Measured, target: str) -> dict[str, Any]:
    one, many, direct = measured.c1[target], measured.c64[target], measured.c1[DIRECT]
    p50, p99 = quantile_ms(one.total_s, 0.5), quantile_ms(one.total_s, 0.99)
    first = quantile_ms(one.first_byte_s, 0.5)
    values = {
        "p50_ms": p50,
        "p99_ms": p99,
        "first_byte_p50_ms": first,
        "added_p50_ms": p50 - quantile_ms(direct.total_s, 0.5),
        "added_p99_ms": p99 - quantile_ms(direct.total_s, 0.99),
        "added_first_byte_p50_ms": first - quantile_ms(direct.first_byte_s, 0.5),
        "rps_c64": many.rps,
        "cpu_us_per_request_c64": many.cpu_us_per_request,
        "cpu_us_per_request_c1": one.cpu_us_per_request,
    }
    return {
        "scenario": measured.scenario.key,
        "label": measured.scenario.label,
        "target": target,
        "n_c1": one.completed,
        "n_c64": many.completed,
        "errors": one.errors + many.errors,
        **{key: _number(value) for key, value in values.items()},
    }


class Status(StrEnum):
    MET = "met"
    MISSED = "missed"


@dataclass(frozen=True, slots=True)
class Target:
    """One issue-16 target for the sidecar (tracing off): `column` of `stream` rows vs `limit`."""

    description: str
    stream: bool
    column: str
    limit: float
    unit: str
    at_least: bool = False


TARGETS = (
    Target("c=1 whole reply: added p50", False, "added_p50_ms", 0.8, "ms"),
    Target("c=1 whole reply: added p99", False, "added_p99_ms", 2.0, "ms"),
    Target("c=1 streamed: added time to first byte", True, "added_first_byte_p50_ms", 0.5, "ms"),
    Target("c=1 streamed: added p50 to the end", True, "added_p50_ms", 1.2, "ms"),
    Target("c=64 whole reply: throughput", False, "rps_c64", 1500, "req/s", at_least=True),
    Target("c=64 streamed: throughput", True, "rps_c64", 1000, "req/s", at_least=True),
    Target("CPU per request, whole reply (c=64)", False, "cpu_us_per_request_c64", 500, "µs"),
    Target("CPU per request, streamed (c=64)", True, "cpu_us_per_request_c64", 700, "µs"),
)
FLAT_FOR_10_MINUTES = "RSS flat over 10 minutes of new sessions (bench/bench_sessions.py --minutes 10 judges it)"
RSS_IN_FULL_MODE_ONLY = "RSS after 100,000 sessions (the full run measures it: about 2 more minutes)"
PACED_MS, POLICY_US, VALIDATION_US, RSS_MB = 0.3, 50.0, 5.0, 150.0


def _judged(target: str, measured: float | None, limit: float, unit: str, at_least: bool = False) -> dict[str, Any]:
    """One target's report entry; nothing measured (None, NaN) is never a target met."""
    value = None if measured is None or math.isnan(measured) else round(measured, 4)
    met = value is not None and (value >= limit if at_least else value <= limit)
    return {
        "target": target,
        "measured": value,
        "limit": limit,
        "unit": unit,
        "comparison": ">=" if at_least else "<=",
        "status": (Status.MET if met else Status.MISSED).value,
    }


def component_targets(components: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue-16 targets not read off the scenario table, from `run.py`'s component runs:
    the paced streams' per-event forwarding, the policy and validation loops, and (full mode)
    the RSS after 100,000 sessions."""
    out = [
        _judged(f"{p['label']}, paced stream: each text event forwarded", p["worst_text_ms"], PACED_MS, "ms")
        for p in components["paced"]
    ]
    out.append(_judged("embedded policy, per call decision (p50)", components["policy_p50_us"], POLICY_US, "µs"))
    out.append(_judged("validation, per valid call (median)", components["validation_median_us"], VALIDATION_US, "µs"))
    if "rss_errors" in components:  # measured (full mode); a run with failed requests proves nothing
        out.append(
            _judged(
                "RSS after 100,000 sessions (default ledger limits)",
                None if components.get("rss_errors") else components["rss_mb_after_100k_sessions"],
                RSS_MB,
                "MB",
            )
        )
    return out


def not_measured(rss_measured: bool) -> list[str]:
    return [FLAT_FOR_10_MINUTES] if rss_measured else [RSS_IN_FULL_MODE_ONLY, FLAT_FOR_10_MINUTES]


def scaled_name(workers: int) -> str:
    return f"sidecar-w{workers}"


def scaling(measured: list[Measured], workers: int) -> list[dict[str, Any]]:
    """c=64 throughput and CPU of `--workers N` against one process, per scenario."""
    name = scaled_name(workers)
    out: list[dict[str, Any]] = []
    for m in measured:
        one, many = m.c64[SIDECAR], m.c64[name]
        out.append(
            {
                "scenario": m.scenario.key,
                "label": m.scenario.label,
                "workers": workers,
                "rps_one_process": _number(one.rps),
                "rps_workers": _number(many.rps),
                "speedup": _ratio(many.rps, one.rps),
                "cpu_us_per_request_workers": _number(many.cpu_us_per_request),
                "errors": many.errors,
            }
        )
    return out


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for target in TARGETS:
        for scenario in SCENARIOS:
            if scenario.stream != target.stream:
                continue
            found = next(r for r in rows if r["scenario"] == scenario.key and r["target"] == SIDECAR)
            judged = _judged(
                f"{scenario.api.label}, {target.description}",
                found[target.column],
                target.limit,
                target.unit,
                target.at_least,
            )
            out.append({**judged, "scenario": scenario.key})
    return out


def _ratio(top: float | None, bottom: float | None, floor: float = 0.0) -> float | None:
    if top is None or bottom is None or bottom <= floor:
        return None
    return round(top / bottom, 3)


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per scenario and sidecar variant: its cost relative to the forwarder and to direct.

    Added latency is divided only when the forwarder's own addition is above 5 µs (below that
    it is noise and the ratio meaningless)."""
    by = {(r["scenario"], r["target"]): r for r in rows}
    out: list[dict[str, Any]] = []
    for scenario in SCENARIOS:
        forwarder, direct = by[scenario.key, FORWARDER], by[scenario.key, DIRECT]
        for name in (SIDECAR, TRACED):
            mine = by[scenario.key, name]
            out.append(
                {
                    "scenario": scenario.key,
                    "target": name,
                    "added_p50_vs_forwarder": _ratio(mine["added_p50_ms"], forwarder["added_p50_ms"], 0.005),
                    "rps_vs_forwarder": _ratio(mine["rps_c64"], forwarder["rps_c64"]),
                    "cpu_vs_forwarder": _ratio(mine["cpu_us_per_request_c64"], forwarder["cpu_us_per_request_c64"]),
                    "p50_vs_direct": _ratio(mine["p50_ms"], direct["p50_ms"]),
                    "rps_vs_direct": _ratio(mine["rps_c64"], direct["rps_c64"]),
                }
            )
    return out


def _digits(unit: str, value: float | None) -> int:
    """ms to the hundredth, MB to a tenth, µs to a tenth below 100 (a loop's figure), else whole."""
    if unit == "ms":
        return 2
    if unit == "MB" or (unit == "µs" and value is not None and value < 100):
        return 1
    return 0


def _cell(value: float | None, digits: int = 2, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def text(report: dict[str, Any]) -> str:
    lines = [f"bench/run.py ({report['mode']}): {report['machine']}", ""]
    lines.append(
        f"{'scenario':<19}{'target':<17}{'p50':>8}{'+p50':>8}{'+p99':>8}{'+1st byte':>10}"
        f"{'req/s c=64':>12}{'CPU µs/req':>12}{'n c=1':>7}{'err':>5}"
    )
    for r in report["rows"]:
        direct = r["target"] == DIRECT
        lines.append(
            f"{r['label']:<19}{r['target']:<17}{_cell(r['p50_ms']):>8}"
            f"{'' if direct else _cell(r['added_p50_ms'], signed=True):>8}"
            f"{'' if direct else _cell(r['added_p99_ms'], signed=True):>8}"
            f"{'' if direct else _cell(r['added_first_byte_p50_ms'], signed=True):>10}"
            f"{_cell(r['rps_c64'], 0):>12}{_cell(r['cpu_us_per_request_c64'], 0):>12}{r['n_c1']:>7}{r['errors']:>5}"
        )
    lines += [
        "  latencies in ms at c=1 (targets interleaved request by request), + = minus direct, same run;",
        "  CPU = the target process's user+sys time over the c=64 run ÷ requests (direct: the mock's own CPU)",
        "",
        f"{'ratios':<19}{'target':<17}{'+p50÷fwd':>10}{'req/s÷fwd':>11}{'CPU÷fwd':>9}{'p50÷direct':>12}"
        f"{'req/s÷direct':>14}",
    ]
    labels = {s.key: s.label for s in SCENARIOS}
    for q in report["ratios"]:
        lines.append(
            f"{labels[q['scenario']]:<19}{q['target']:<17}{_cell(q['added_p50_vs_forwarder']):>10}"
            f"{_cell(q['rps_vs_forwarder']):>11}{_cell(q['cpu_vs_forwarder']):>9}"
            f"{_cell(q['p50_vs_direct']):>12}{_cell(q['rps_vs_direct']):>14}"
        )
    lines += ["", "issue 16 targets (sidecar, tracing off):"]
    for t in report["targets"]:
        digits = _digits(t["unit"], t["measured"])
        measured = _cell(t["measured"], digits)
        lines.append(
            f"  {t['status']:<7}{t['target']:<55}{measured:>9} {t['unit']:<6}(target {t['comparison']} {t['limit']:g})"
        )
    lines.append(
        "  paced: the worst per-event median added latency of the text events (after the response head, before "
        "the first call); policy and validation: bench_policy.py's and bench_validation.py's loops (validation: "
        "a call whose arguments orjson read, as from every reply orjson reads wholly)"
    )
    for p in report.get("components", {}).get("paced", []):
        lines.append(f"  {p['line']}")
    if report.get("scaling"):
        workers = report["scaling"][0]["workers"]
        lines += [
            "",
            f"scaling at c={CONCURRENCY}: `sidecar run --workers {workers}` (SQLite state) against one process",
            f"{'scenario':<19}{'1 process req/s':>16}{f'{workers} workers req/s':>18}{'speed-up':>10}"
            f"{'CPU µs/req':>12}{'err':>5}",
        ]
        for q in report["scaling"]:
            lines.append(
                f"{q['label']:<19}{_cell(q['rps_one_process'], 0):>16}{_cell(q['rps_workers'], 0):>18}"
                f"{_cell(q['speedup']):>10}{_cell(q['cpu_us_per_request_workers'], 0):>12}{q['errors']:>5}"
            )
        lines.append(
            "  the driver and the mock share the same cores: on a 2-core machine the speed-up is bounded by them"
        )
    lines.append("  not measured here: " + "; ".join(report["not_measured"]))
    return "\n".join(lines)
