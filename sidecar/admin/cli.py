"""`sidecar approvals list | show ID | approve ID | deny ID`: a client of the admin API.

It only talks HTTP to the admin port (never to the store directly), so it works against a
pod through `kubectl port-forward` and goes through the same token check, conflict handling
and audit as any other client. Exit codes: 0 ok, 1 error (the message says which).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

DEFAULT_ADMIN_URL = "http://127.0.0.1:9477"


class CliError(Exception):
    pass


def _token(args: argparse.Namespace) -> str | None:
    if args.token:
        return str(args.token)
    path = args.token_file or os.environ.get("SIDECAR_ADMIN_TOKEN_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                lines = [line.strip() for line in handle if line.strip()]
        except OSError as exc:
            raise CliError(f"cannot read token file {path}: {exc.strerror}") from exc
        if not lines:
            raise CliError(f"token file {path} is empty")
        return lines[0]
    return os.environ.get("SIDECAR_ADMIN_TOKEN") or None


def _call(args: argparse.Namespace, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    url = args.admin_url.rstrip("/") + path
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Accept", "application/json")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    token = _token(args)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=args.timeout) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        raise CliError(_explain(exc)) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CliError(f"cannot reach the admin API at {args.admin_url}: {reason}") from None


def _explain(exc: urllib.error.HTTPError) -> str:
    try:
        message = json.loads(exc.read() or b"{}").get("message") or exc.reason
    except (ValueError, AttributeError):
        message = exc.reason
    hint = {
        401: "unauthorized (check --token / --token-file / SIDECAR_ADMIN_TOKEN)",
        403: "forbidden",
        404: "not found",
        409: "conflict",
    }.get(exc.code, f"HTTP {exc.code}")
    return f"{hint}: {message}"


def _when(t: float | None, now: float) -> str:
    if t is None:
        return "-"
    delta = int(t - now)
    span = abs(delta)
    text = f"{span // 3600}h{span % 3600 // 60:02d}m" if span >= 3600 else f"{span // 60}m{span % 60:02d}s"
    return f"in {text}" if delta >= 0 else f"{text} ago"


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in [header, *rows]]
    return "\n".join(lines)


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _list(args: argparse.Namespace) -> int:
    query = {
        k: v
        for k, v in (("status", args.status), ("group", args.group), ("tool", args.tool), ("session", args.session))
        if v
    }
    path = "/approvals" + ("?" + urllib.parse.urlencode(query) if query else "")
    approvals = _call(args, "GET", path)["approvals"]
    if args.json:
        print(json.dumps(approvals, indent=2))
        return 0
    if not approvals:
        print(f"no {args.status or 'pending'} approvals")
        return 0
    now = time.time()
    rows = [
        [
            a["id"],
            a["status"],
            a["tool"],
            a["group"],
            _short(a["session"], 24),
            _when(a["expires"], now),
            _short("; ".join(a["reasons"]), 60),
        ]
        for a in approvals
    ]
    print(_table(rows, ["ID", "STATUS", "TOOL", "GROUP", "SESSION", "EXPIRES", "REASONS"]))
    return 0


def _show_one(a: dict[str, Any]) -> str:
    now = time.time()
    fields = [
        ("id", a["id"]),
        ("status", a["status"]),
        ("tool", a["tool"]),
        ("session", a["session"]),
        ("group", a["group"]),
        ("reasons", "; ".join(a["reasons"]) or "-"),
        ("created", f"{a.get('created_at')} ({_when(a['created'], now)})"),
        ("expires", f"{a.get('expires_at')} ({_when(a['expires'], now)})"),
        ("decided by", a.get("decided_by") or "-"),
        ("comment", a.get("comment") or "-"),
        ("args hash", a["args_hash"]),
    ]
    width = max(len(k) for k, _ in fields)
    lines = [f"{k.ljust(width)}  {v}" for k, v in fields]
    lines.append("arguments:")
    lines += ["  " + line for line in json.dumps(a["arguments"], indent=2, ensure_ascii=False).splitlines()]
    return "\n".join(lines)


def _show(args: argparse.Namespace) -> int:
    a = _call(args, "GET", f"/approvals/{urllib.parse.quote(args.id, safe='')}")
    print(json.dumps(a, indent=2) if args.json else _show_one(a))
    return 0


def _decide(args: argparse.Namespace, action: str) -> int:
    body: dict[str, Any] = {}
    if args.by:
        body["by"] = args.by
    if args.comment:
        body["comment"] = args.comment
    a = _call(args, "POST", f"/approvals/{urllib.parse.quote(args.id, safe='')}/{action}", body)
    if args.json:
        print(json.dumps(a, indent=2))
    else:
        comment = f" ({a['comment']})" if a.get("comment") else ""
        print(f"{a['id']}: {a['status']} by {a['decided_by']}{comment} — {a['tool']} in session {a['session']}")
    return 0


def _run(args: argparse.Namespace) -> int:
    try:
        if args.action == "list":
            return _list(args)
        if args.action == "show":
            return _show(args)
        return _decide(args, "approve" if args.action == "approve" else "deny")
    except CliError as exc:
        print(f"sidecar approvals: {exc}", file=sys.stderr)
        return 1


def register(subparsers: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--admin-url",
        default=os.environ.get("SIDECAR_ADMIN_URL", DEFAULT_ADMIN_URL),
        help=f"admin API base URL (env SIDECAR_ADMIN_URL, default {DEFAULT_ADMIN_URL})",
    )
    common.add_argument("--token", help="admin bearer token (env SIDECAR_ADMIN_TOKEN)")
    common.add_argument(
        "--token-file", metavar="FILE", help="file whose first line is the token (env SIDECAR_ADMIN_TOKEN_FILE)"
    )
    common.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the admin API")
    common.add_argument("--json", action="store_true", help="print the API's JSON instead of a table")

    parser = subparsers.add_parser("approvals", help="list and decide human approvals (admin API)")
    actions = parser.add_subparsers(dest="action", required=True)

    listing = actions.add_parser("list", parents=[common], help="list approvals (pending by default)")
    listing.add_argument("--status", help="pending (default), approved, denied, expired, consumed or all")
    listing.add_argument("--group")
    listing.add_argument("--tool")
    listing.add_argument("--session")

    show = actions.add_parser("show", parents=[common], help="one approval, with its redacted arguments")
    show.add_argument("id")

    for action in ("approve", "deny"):
        decide = actions.add_parser(action, parents=[common], help=f"{action} a pending approval")
        decide.add_argument("id")
        decide.add_argument("--comment", help="why (the model sees a denial's comment)")
        decide.add_argument("--by", help="your name (default: derived from the token, token:<fingerprint>)")

    parser.set_defaults(func=_run)
