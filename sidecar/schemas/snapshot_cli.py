"""`sidecar schemas snapshot|diff`: golden files of what the model is shown, and their review.

`snapshot --out DIR` makes DIR hold one file per tool (see `snapshot.py`); `diff DIR` prints
what changed between DIR and the current declarations and exits 1 when anything did, so a
CI job fails on an unreviewed change and the diff is the review artefact. Both read
`--from FILE` or `--from ADMIN_URL` (a running sidecar's inventory). Exit codes: 0 fine /
no change, 1 changes found (diff), 2 unusable input.
"""

from __future__ import annotations

import argparse
import sys
from typing import IO, Any

import orjson

from sidecar.model import ToolDeclaration
from sidecar.schemas.diff import diff_tool_sets
from sidecar.schemas.load import LoadError
from sidecar.schemas.snapshot import SnapshotError, read_snapshots, write_snapshots
from sidecar.schemas.source import declarations_by_name, read_sources


def _current(args: argparse.Namespace, err: IO[str]) -> dict[str, ToolDeclaration] | None:
    try:
        return declarations_by_name(read_sources([], args.source, args.agent, args.provider))
    except LoadError as exc:
        print(f"error: {exc}", file=err)
        return None


def _dump(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def cmd_snapshot(args: argparse.Namespace, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    current = _current(args, err)
    if current is None:
        return 2
    try:
        done = write_snapshots(args.out, current)
    except SnapshotError as exc:
        print(f"error: {exc}", file=err)
        return 2
    if args.json:
        out.write(_dump({"written": done.written, "unchanged": done.unchanged, "removed": done.removed}) + "\n")
        return 0
    for path in done.written:
        out.write(f"wrote {path}\n")
    for path in done.removed:
        out.write(f"removed {path} (tool no longer declared)\n")
    out.write(
        f"{len(current)} tool(s) in {args.out}: {len(done.written)} written, {len(done.unchanged)} unchanged, "
        f"{len(done.removed)} removed\n"
    )
    return 0


def cmd_diff(args: argparse.Namespace, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        golden = read_snapshots(args.dir)
    except SnapshotError as exc:
        print(f"error: {exc}", file=err)
        return 2
    current = _current(args, err)
    if current is None:
        return 2
    changes = diff_tool_sets(golden, current)
    tools = sorted({c.tool for c in changes})
    if args.json:
        out.write(_dump({"changes": [c.to_json() for c in changes], "tools": tools}) + "\n")
    elif changes:
        for change in changes:
            out.write(change.text() + "\n")
        out.write(f"{len(changes)} change(s) in {len(tools)} tool(s); accept them with `sidecar schemas snapshot`\n")
    else:
        out.write(f"no changes: {len(current)} tool(s) match {args.dir}\n")
    return 1 if changes else 0


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    snapshot = sub.add_parser("snapshot", parents=parents, help="write one golden file per tool into DIR")
    snapshot.add_argument("--out", required=True, metavar="DIR", help="snapshot directory (created if missing)")
    snapshot.set_defaults(func=cmd_snapshot)
    diff = sub.add_parser("diff", parents=parents, help="what changed since the snapshots in DIR (exit 1 if any)")
    diff.add_argument("dir", metavar="DIR", help="snapshot directory written by `sidecar schemas snapshot`")
    diff.set_defaults(func=cmd_diff)
