"""`sidecar status`: the admin port's /v1/status as a readable table (or JSON).

A plain HTTP client of the admin API, so it works against a pod through
`kubectl port-forward`. Exit codes: 0 ready, 1 not ready or unreachable.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any, TextIO

DEFAULT_ADMIN_URL = "http://127.0.0.1:9477"
VERDICTS = ("allow", "reject", "deny", "approval", "replay")


def fetch_status(admin_url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    return fetch_admin_json(admin_url, "/v1/status", timeout_s)


def fetch_admin_json(admin_url: str, path: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """GET one admin endpoint's JSON object; RuntimeError says what went wrong, with the URL."""
    url = admin_url.rstrip("/") + path
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            data = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"{url} answered {exc.code}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RuntimeError(f"cannot reach {url}: {reason}") from exc
    except ValueError as exc:
        raise RuntimeError(f"{url} did not return JSON") from exc
    if not isinstance(data, dict):
        raise RuntimeError(f"{url} did not return a JSON object")
    return data


def _ms(seconds: Any) -> str:
    return (
        "-"
        if not isinstance(seconds, (int, float))
        else f"{seconds * 1000:.0f}ms"
        if seconds >= 0.01
        else f"{seconds * 1000:.1f}ms"
    )


def _rate(value: Any) -> str:
    return "-" if not isinstance(value, (int, float)) else f"{value * 100:.1f}%"


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for n, row in enumerate(rows):
        pairs = enumerate(zip(row, widths, strict=True))
        cells = [cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in pairs]
        out.write("  ".join(cells).rstrip() + "\n")
        if n == 0:
            out.write("  ".join("-" * w for w in widths) + "\n")


def render(status: dict[str, Any], out: TextIO) -> None:
    """Per tool: calls by verdict, p50/p95 latency, error rate, replays, repairs; then health."""
    summary = status.get("tools") or {}
    tools = summary.get("tools") if isinstance(summary.get("tools"), dict) else {}
    ready = status.get("ready")
    out.write(f"sidecar: {'ready' if ready else 'NOT READY'}")
    if isinstance(summary.get("uptime_seconds"), (int, float)):
        out.write(f", up {summary['uptime_seconds']:.0f}s")
    out.write("\n\n")
    if tools:
        rows = [["tool", "calls", *VERDICTS, "p50", "p95", "errors", "replays", "repairs"]]
        for name, stats in sorted(tools.items()):
            verdicts = stats.get("calls_by_verdict") or {}
            latency = stats.get("latency_seconds") or {}
            rows.append(
                [
                    name,
                    str(stats.get("calls", 0)),
                    *(str(verdicts.get(v, 0)) for v in VERDICTS),
                    _ms(latency.get("p50")),
                    _ms(latency.get("p95")),
                    _rate(stats.get("error_rate")),
                    str(stats.get("replays", 0)),
                    str(stats.get("repairs", 0)),
                ]
            )
        _table(rows, out)
    else:
        out.write("no tool calls seen yet\n")
    repairs = summary.get("repair_rounds") or {}
    labels = summary.get("tool_labels") or {}
    out.write(
        f"\nrepair rounds: {repairs.get('corrected', 0)} corrected, {repairs.get('exhausted', 0)} exhausted"
        f"; approvals pending: {summary.get('approvals_pending', 0)}"
        f"; tool labels: {labels.get('declared', 0)}/{labels.get('cap', '?')}\n"
    )
    components = status.get("components") or {}
    if components:
        out.write("\ncomponents:\n")
        for name, health in sorted(components.items()):
            health = health if isinstance(health, dict) else {"ok": bool(health)}
            details = ", ".join(f"{k}={v}" for k, v in sorted(health.items()) if k != "ok" and v not in (None, ""))
            state = "ok" if health.get("ok", True) else "FAILING"
            out.write(f"  {name:<16} {state}" + (f"  ({details})" if details else "") + "\n")


def _status(args: argparse.Namespace) -> int:
    try:
        status = fetch_status(args.admin_url)
    except RuntimeError as exc:
        print(f"sidecar status: {exc}", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(json.dumps(status, indent=2, sort_keys=True) + "\n")
    else:
        render(status, sys.stdout)
    return 0 if status.get("ready", True) else 1


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("status", help="per-tool summary and component health from the admin port")
    parser.add_argument(
        "--admin-url",
        default=os.environ.get("SIDECAR_ADMIN_URL", DEFAULT_ADMIN_URL),
        help=f"admin port URL (default $SIDECAR_ADMIN_URL or {DEFAULT_ADMIN_URL})",
    )
    parser.add_argument("--json", action="store_true", help="print the raw /v1/status JSON")
    parser.set_defaults(func=_status)
