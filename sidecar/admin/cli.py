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
from typing import Any, get_args

from sidecar.cli_output import add_admin_url_argument, clip, table
from sidecar.state.base import ApprovalStatus
from sidecar.timefmt import parse_iso, relative

STATUSES = frozenset(get_args(ApprovalStatus))


class CliError(Exception):
    pass


def _first_field(line: str) -> str:
    """The token of a token line: `TOKEN NAME GROUP,GROUP` (the server's format) or `TOKEN`."""
    return line.split()[0] if line.split() else ""


def _token(args: argparse.Namespace) -> str | None:
    if args.token:
        return _first_field(str(args.token)) or None
    path = args.token_file or os.environ.get("SIDECAR_ADMIN_TOKEN_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                lines = [line.strip() for line in handle if line.strip() and not line.lstrip().startswith("#")]
        except OSError as exc:
            raise CliError(f"cannot read token file {path}: {exc.strerror}") from exc
        if not lines:
            raise CliError(f"token file {path} is empty")
        return _first_field(lines[0])
    return _first_field(os.environ.get("SIDECAR_ADMIN_TOKEN") or "") or None


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


def _when(iso: str | None, now: float) -> str:
    """`2026-11-30T10:00:00Z (in 59m58s)`; the bare text if it is not a time."""
    if not iso:
        return "-"
    try:
        return f"{iso} ({relative(parse_iso(iso), now)})"
    except ValueError:
        return iso


def _print_json(data: Any) -> None:
    """The API's JSON document, unchanged (indented for reading)."""
    print(json.dumps(data, indent=2, ensure_ascii=False))


def _list(args: argparse.Namespace) -> int:
    query = {
        k: v
        for k, v in (("status", args.status), ("group", args.group), ("tool", args.tool), ("session", args.session))
        if v
    }
    path = "/approvals" + ("?" + urllib.parse.urlencode(query) if query else "")
    body = _call(args, "GET", path)
    if args.json:
        _print_json(body)
        return 0
    approvals = body["approvals"]
    if not approvals:
        print(f"no {args.status or 'pending'} approvals {_scope(body.get('caller') or {})}")
        return 0
    now = time.time()
    rows = [
        [
            a["id"],
            a["status"],
            a["tool"],
            a["group"],
            clip(a["session"], 24),
            _when(a["expires"], now),
            clip("; ".join(a["reasons"]), 60),
        ]
        for a in approvals
    ]
    sys.stdout.write(table(["ID", "STATUS", "TOOL", "GROUP", "SESSION", "EXPIRES", "REASONS"], rows))
    return 0


def _scope(caller: dict[str, Any]) -> str:
    """Which approvals the caller may see (the API lists only those)."""
    if caller.get("all_groups"):
        return "in any group"
    groups = caller.get("groups") or []
    name = caller.get("name", "this token")
    return f"for {name} ({', '.join(groups)})" if groups else f"for {name}: the token is in no approval group"


def _show_one(a: dict[str, Any]) -> str:
    now = time.time()
    fields = [
        ("id", a["id"]),
        ("status", a["status"]),
        ("tool", a["tool"]),
        ("session", a["session"]),
        ("group", a["group"]),
        ("reasons", "; ".join(a["reasons"]) or "-"),
        ("created", _when(a.get("created"), now)),
        ("expires", _when(a.get("expires"), now)),
        ("decided by", a.get("decided_by") or "-"),
        ("decided at", _when(a.get("decided_at"), now)),
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
    if args.json:
        _print_json(a)
    else:
        print(_show_one(a))
    return 0


def _decide(args: argparse.Namespace, action: str) -> int:
    if args.by is not None:
        raise CliError(
            "--by is no longer accepted: the approver recorded is the identity your admin token carries "
            "(NAME in the token line `TOKEN NAME GROUP,GROUP`)"
        )
    body: dict[str, Any] = {}
    if args.comment:
        body["comment"] = args.comment
    a = _call(args, "POST", f"/approvals/{urllib.parse.quote(args.id, safe='')}/{action}", body)
    if args.json:
        _print_json(a)
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
    add_admin_url_argument(common)
    common.add_argument("--token", help="admin bearer token (env SIDECAR_ADMIN_TOKEN)")
    common.add_argument(
        "--token-file",
        metavar="FILE",
        help="file whose first line holds the token, alone or as `TOKEN NAME GROUP,GROUP` "
        "(env SIDECAR_ADMIN_TOKEN_FILE)",
    )
    common.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the admin API")
    common.add_argument("--json", action="store_true", help="print the API's JSON instead of a table")

    parser = subparsers.add_parser(
        "approvals",
        help="list and decide human approvals (admin API)",
        description="A client of the admin API's /approvals endpoints (works through kubectl port-forward). "
        "Every call needs an admin token: --token, --token-file, SIDECAR_ADMIN_TOKEN or SIDECAR_ADMIN_TOKEN_FILE; "
        "the approver recorded is the identity that token carries on the server. "
        "Times are ISO-8601 UTC.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser(
        "list", parents=[common], help="list approvals (pending by default)", description="List approvals."
    )
    listing.add_argument(
        "--status",
        choices=sorted(STATUSES | {"all"}),
        help="which approvals (default pending; all = every status)",
    )
    listing.add_argument("--group", help="only this approver group (as the policy names it)")
    listing.add_argument("--tool", help="only this tool")
    listing.add_argument("--session", help="only this session id")

    show = actions.add_parser(
        "show",
        parents=[common],
        help="one approval, with its redacted arguments",
        description="One approval, with its redacted arguments.",
    )
    show.add_argument("id", help="the approval id (apr_…)")

    for action in ("approve", "deny"):
        decide = actions.add_parser(
            action,
            parents=[common],
            help=f"{action} a pending approval",
            description=f"{action.capitalize()} a pending approval: the identical call (same session, tool and "
            "arguments) "
            + ("then passes exactly once." if action == "approve" else "is then refused, with your comment."),
        )
        decide.add_argument("id", help="the approval id (apr_…)")
        decide.add_argument("--comment", help="why (the model sees a denial's comment)")
        # Gone: the approver is the token's identity. Kept hidden so that an old script fails
        # with the reason instead of argparse's "unrecognized arguments".
        decide.add_argument("--by", help=argparse.SUPPRESS)

    parser.set_defaults(func=_run)
