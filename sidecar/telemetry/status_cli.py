"""`sidecar status`: the admin port's /v1/status as a readable table (or JSON).

A plain HTTP client of the admin API, so it works against a pod through
`kubectl port-forward`. Exit codes: 0 ready, 1 not ready or unreachable.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from typing import Any, TextIO

from sidecar.cli_output import Align, add_admin_url_argument, table
from sidecar.timefmt import duration

# The verdicts a call can get; `replay` = answered from the ledger instead of reaching the agent.
VERDICTS = ("allow", "reject", "deny", "approval", "replay")
# `tokens` directions (sidecar_tool_tokens_total), in the order the table shows them.
TOKEN_COLUMNS = (
    ("output", "output"),
    ("input", "input"),
    ("input_cached", "input cached"),
    ("input_cache_write", "input cache write"),
)
SHORT_HASH = 12


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
    if not isinstance(seconds, (int, float)):
        return "-"
    return f"{seconds * 1000:.0f}ms" if seconds >= 0.01 else f"{seconds * 1000:.1f}ms"


def _rate(value: Any) -> str:
    return "-" if not isinstance(value, (int, float)) else f"{value * 100:.1f}%"


def _headline(status: dict[str, Any]) -> str:
    line = f"sidecar: {'ready' if status.get('ready') else 'NOT READY'}"
    if isinstance(status.get("uptime_seconds"), (int, float)):
        line += f", up {duration(status['uptime_seconds'])}"
    if status.get("started_at"):
        line += f" (since {status['started_at']})"
    return line + "\n\n"


def render(status: dict[str, Any], out: TextIO) -> None:
    """Per tool: calls by verdict, p50/p95 latency, error rate, repairs; tokens; declarations
    (drift, lint); then health."""
    found = status.get("tools")
    tools: dict[str, Any] = found if isinstance(found, dict) else {}
    out.write(_headline(status))
    if tools:
        header = ["tool", "calls", *VERDICTS, "p50", "p95", "errors", "repairs"]
        rows = []
        for name, stats in sorted(tools.items()):
            verdicts = stats.get("calls_by_verdict") or {}
            latency = stats.get("latency_seconds") or {}
            rows.append(
                [
                    name,
                    stats.get("calls", 0),
                    *(verdicts.get(v, 0) for v in VERDICTS),
                    _ms(latency.get("p50")),
                    _ms(latency.get("p95")),
                    _rate(stats.get("error_rate")),
                    stats.get("repairs", 0),
                ]
            )
        out.write(table(header, rows, [Align.LEFT] + [Align.RIGHT] * (len(header) - 1), rule=True))
        out.write("(replay: answered from the ledger; p50/p95: tool latency, call delivered to result)\n")
    else:
        out.write("no tool calls seen yet\n")
    _tokens(tools, out)
    _declarations(tools, out)
    repairs = status.get("repair_rounds") or {}
    labels = status.get("tool_labels") or {}
    out.write(
        f"\nrepair rounds: {repairs.get('corrected', 0)} corrected, {repairs.get('exhausted', 0)} exhausted"
        f"; approvals pending: {status.get('approvals_pending', 0)}"
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


def _tokens(tools: dict[str, Any], out: TextIO) -> None:
    """Tokens per tool, estimated (docs/cost.md): only tools with some."""
    rows = []
    for name, stats in sorted(tools.items()):
        tokens = stats.get("tokens") or {}
        if any(tokens.get(key) for key, _ in TOKEN_COLUMNS):
            rows.append([name, *(tokens.get(key, 0) for key, _ in TOKEN_COLUMNS)])
    if rows:
        header = ["tool", *(title for _, title in TOKEN_COLUMNS)]
        out.write("\ntokens per tool (estimated: each reply's usage shared out by size, docs/cost.md)\n")
        out.write(table(header, rows, [Align.LEFT] + [Align.RIGHT] * len(TOKEN_COLUMNS), rule=True))


def _short(digest: Any) -> str:
    return str(digest)[:SHORT_HASH] if digest else "-"


def _declarations(tools: dict[str, Any], out: TextIO) -> None:
    """Each tool's current declaration per agent and provider: schema hash, drift, lint."""
    rows = []
    for name, stats in sorted(tools.items()):
        for decl in stats.get("declarations") or []:
            lint = decl.get("lint")
            if lint is None:
                findings = ["(not linted yet)", "", ""]
            elif not lint.get("ok", True):
                findings = ["(lint failed)", "", ""]
            else:
                findings = [lint.get("error", 0), lint.get("warning", 0), ", ".join(lint.get("rules") or []) or "-"]
            rows.append(
                [
                    name,
                    decl.get("provider", ""),
                    _short(decl.get("schema_hash")),
                    decl.get("changes", 0),
                    _short(decl.get("previous_schema_hash")),
                    *findings,
                ]
            )
    if rows:
        header = ["tool", "provider", "schema", "changes", "previous", "errors", "warnings", "rules"]
        align = [Align.LEFT, Align.LEFT, Align.LEFT, Align.RIGHT, Align.LEFT, Align.RIGHT, Align.RIGHT, Align.LEFT]
        out.write("\ndeclarations (latest seen; changes: drift; errors/warnings: sidecar schemas lint)\n")
        out.write(table(header, rows, align, rule=True))


def _status(args: argparse.Namespace) -> int:
    try:
        status = fetch_status(args.admin_url)
    except RuntimeError as exc:
        print(f"sidecar status: {exc}", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(json.dumps(status, indent=2, ensure_ascii=False) + "\n")
    else:
        render(status, sys.stdout)
    return 0 if status.get("ready", True) else 1


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "status",
        help="per-tool summary and component health from the admin port",
        description="The admin port's /v1/status as a table: calls per tool by verdict, tool latency, error rate, "
        "repair rounds, tokens per tool (estimated), each tool's current declaration (schema hash, changes, lint "
        "findings), and the health of each component. Exit 0 when ready, 1 when not ready or unreachable.",
    )
    add_admin_url_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the /v1/status JSON as the API returns it")
    parser.set_defaults(func=_status)
