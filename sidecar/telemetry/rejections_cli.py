"""`sidecar rejections top|promote`: read the rejection log, find what keeps failing, and turn
it into regression tests.

Problems are grouped by (tool, field, kind, normalised problem): quoted values, numbers and
array indices are replaced by placeholders, so `got string "10"` and `got string "25"` are one
group. Fixture files are written with sorted keys and names derived from the group, so running
promote again on newer logs rewrites the same files instead of adding near-duplicates.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import orjson

_QUOTED = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?!\w)")
_INDEX = [(re.compile(r"\[\d+\]"), "[*]"), (re.compile(r"(?<=[./])\d+(?=[./]|$)"), "*")]
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str) -> timedelta:
    """`30m`, `24h`, `7d` (also s, w) -> timedelta; ValueError otherwise."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"expected a duration such as 30m, 24h or 7d, got {text!r}")
    return timedelta(**{_UNITS[match.group(2)]: float(match.group(1))})


def normalise_problem(problem: str) -> str:
    """Strip the values out of a problem text so equal problems group together."""
    text = _QUOTED.sub("<value>", problem)
    return _NUMBER.sub("<n>", text)


def normalise_field(path: str) -> str:
    for pattern, placeholder in _INDEX:
        path = pattern.sub(placeholder, path)
    return path


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _lines(path: str) -> Iterator[bytes]:
    if path == "-":
        yield from sys.stdin.buffer
        return
    with open(path, "rb") as handle:
        yield from handle


def read_records(
    paths: Iterable[str], since: timedelta | None = None, now: datetime | None = None
) -> tuple[list[dict[str, Any]], int]:
    """Records from JSON-lines files ("-" is stdin), oldest first, and the count of unparseable
    lines. With `since`, records older than now - since (or without a time) are left out."""
    cutoff = (now or datetime.now(UTC)) - since if since is not None else None
    records: list[tuple[datetime | None, int, dict[str, Any]]] = []
    skipped = 0
    for path in paths:
        for raw in _lines(path):
            if not raw.strip():
                continue
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError:
                skipped += 1
                continue
            if not isinstance(record, dict):
                skipped += 1
                continue
            when = _parse_time(record.get("time"))
            if cutoff is not None and (when is None or when < cutoff):
                continue
            records.append((when, len(records), record))
    # Rotated files are read newest-last regardless of the order given on the command line.
    records.sort(key=lambda item: (item[0] or datetime.min.replace(tzinfo=UTC), item[1]))
    return [record for _, _, record in records], skipped


@dataclass
class Group:
    """One recurring problem: every record whose error normalises to the same key."""

    tool: str
    field: str
    kind: str
    problem: str
    count: int = 0
    example_problem: str = ""
    example: dict[str, Any] = dataclasses.field(default_factory=dict)
    first_seen: str | None = None
    last_seen: str | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.tool, self.field, self.kind, self.problem)

    @property
    def slug(self) -> str:
        """Stable file name stem: the tool name plus a hash of the group key."""
        digest = hashlib.sha256(orjson.dumps(list(self.key))).hexdigest()[:10]
        tool = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.tool)[:60] or "tool"
        return f"{tool}-{digest}"


def _record_errors(record: dict[str, Any]) -> list[dict[str, Any]]:
    errors = record.get("errors")
    if isinstance(errors, list) and errors:
        return [e if isinstance(e, dict) else {"problem": str(e)} for e in errors]
    # Refused without field errors (policy deny, replay…): group by the reasons or verdict.
    reasons = record.get("reasons")
    problem = "; ".join(map(str, reasons)) if isinstance(reasons, list) and reasons else ""
    return [{"field": "", "problem": problem or str(record.get("status") or record.get("verdict"))}]


def _error_kind(error: dict[str, Any], record: dict[str, Any]) -> str:
    return str(error.get("kind") or record.get("verdict") or "other")


def group_rejections(records: Iterable[dict[str, Any]]) -> list[Group]:
    """Groups sorted by count (descending), then by key for a stable order."""
    groups: dict[tuple[str, str, str, str], Group] = {}
    for record in records:
        tool = str(record.get("tool") or "")
        for error in _record_errors(record):
            problem = str(error.get("problem") or "")
            group = Group(
                tool,
                normalise_field(str(error.get("field") or "")),
                _error_kind(error, record),
                normalise_problem(problem),
            )
            existing = groups.setdefault(group.key, group)
            if existing.count == 0:
                existing.example_problem = problem
                existing.example = record
                existing.first_seen = record.get("time")
            existing.count += 1
            existing.last_seen = record.get("time") or existing.last_seen
    return sorted(groups.values(), key=lambda g: (-g.count, g.key))


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def format_table(groups: list[Group], limit: int | None = None) -> str:
    """A plain-text table: count, tool, field, kind, problem, example."""
    shown = groups[:limit] if limit else groups
    rows = [("COUNT", "TOOL", "FIELD", "KIND", "PROBLEM", "EXAMPLE")]
    for g in shown:
        example = g.example_problem
        if g.example.get("arguments") is not None:
            example += "  args=" + orjson.dumps(g.example["arguments"]).decode()
        rows.append(
            (
                str(g.count),
                _clip(g.tool, 30),
                _clip(g.field or "-", 30),
                g.kind,
                _clip(g.problem, 60),
                _clip(example, 80),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [
        "  ".join(
            cell.rjust(widths[0]) if i == 0 else cell.ljust(widths[i]) if i < 5 else cell for i, cell in enumerate(row)
        ).rstrip()
        for row in rows
    ]
    return "\n".join(lines) + "\n"


def _fixture(group: Group) -> dict[str, Any]:
    record = group.example
    matching = [
        {k: e.get(k) for k in ("field", "problem", "expected", "kind") if k in e}
        for e in _record_errors(record)
        if normalise_field(str(e.get("field") or "")) == group.field
        and normalise_problem(str(e.get("problem") or "")) == group.problem
    ]
    fixture: dict[str, Any] = {
        "tool": group.tool,
        "schema": record.get("schema") if isinstance(record.get("schema"), dict) else None,
        "arguments": record.get("arguments"),
        "expected_errors": matching,
        "group": {"field": group.field, "kind": group.kind, "problem": group.problem},
    }
    if isinstance(record.get("raw_arguments"), str):
        fixture["raw_arguments"] = record["raw_arguments"]
    return fixture


TEST_MODULE = '''\
"""Regression tests generated by `sidecar rejections promote` from the rejection log.

Each *.json next to this file is a payload the model once sent and the lockdown refused; the
test replays it and asserts the same fields are still refused. Regenerate with promote; edit a
fixture's "schema" when the tool's schema legitimately changes.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from sidecar.config import LockdownSettings
from sidecar.lockdown import Lockdown
from sidecar.model import ToolCall, ToolDeclaration

CASES = sorted(Path(__file__).parent.glob("*.json"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_still_refused(path: Path) -> None:
    case = orjson.loads(path.read_bytes())
    if case.get("schema") is None:
        pytest.skip("no schema was recorded with this rejection; add the tool's schema")
    arguments = case.get("arguments")
    raw = case.get("raw_arguments")
    if raw is None:
        raw = orjson.dumps(arguments).decode()
    call = ToolCall(
        id="regression",
        name=case["tool"],
        arguments=arguments if isinstance(arguments, dict) else None,
        raw_arguments=raw,
    )
    verdict = Lockdown().check(
        call, ToolDeclaration.create(case["tool"], case["schema"]), LockdownSettings()
    )
    refused = {error.field for error in verdict.errors}
    expected = {error.get("field", "") for error in case["expected_errors"]}
    assert verdict.errors, f"{path.name}: the payload is accepted now"
    assert expected <= refused, f"{path.name}: expected {sorted(expected)}, got {sorted(refused)}"
'''


def promote(groups: Iterable[Group], out_dir: str | Path, min_count: int = 1) -> list[Path]:
    """Write one fixture per group with count >= min_count, plus the pytest module."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for group in groups:
        if group.count < min_count or not group.tool:
            continue
        if group.example.get("verdict", "reject") != "reject":
            # Policy denials, approvals and replays depend on policy and session state, not on
            # the payload alone: the lockdown cannot reproduce them (test those in Rego).
            continue
        path = out / f"{group.slug}.json"
        data = orjson.dumps(_fixture(group), option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
        path.write_bytes(data + b"\n")
        written.append(path)
    module = out / "test_rejection_regressions.py"
    module.write_text(TEST_MODULE, encoding="utf-8")
    return written


def _read(args: argparse.Namespace, err: IO[str]) -> list[dict[str, Any]]:
    since = parse_duration(args.since) if getattr(args, "since", None) else None
    records, skipped = read_records(args.files, since)
    if skipped:
        print(f"warning: skipped {skipped} unparseable line(s)", file=err)
    return records


def cmd_top(args: argparse.Namespace, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        records = _read(args, err)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=err)
        return 2
    groups = group_rejections(records)
    if not groups:
        print("no rejections found", file=out)
        return 0
    out.write(format_table(groups, args.limit))
    print(f"{len(records)} rejected call(s), {len(groups)} distinct problem(s)", file=out)
    return 0


def cmd_promote(args: argparse.Namespace, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        records = _read(args, err)
        written = promote(group_rejections(records), args.out, args.min_count)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=err)
        return 2
    print(f"wrote {len(written)} fixture(s) and test_rejection_regressions.py to {args.out}", file=out)
    return 0


def _duration_arg(text: str) -> str:
    try:
        parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add `rejections top|promote` to a subparsers object; each sets `func(args) -> int`."""
    parser: argparse.ArgumentParser = subparsers.add_parser("rejections", help="analyse the rejected-payload log")
    sub = parser.add_subparsers(dest="rejections_command", required=True)

    top = sub.add_parser("top", help="most frequent rejection problems")
    top.add_argument("files", nargs="+", metavar="FILE", help='rejection log files ("-" = stdin)')
    top.add_argument("--since", type=_duration_arg, default=None, help="e.g. 30m, 24h, 7d")
    top.add_argument("--limit", type=int, default=20, help="rows to show (default 20)")
    top.set_defaults(func=cmd_top)

    prom = sub.add_parser("promote", help="turn recurring rejections into regression tests")
    prom.add_argument("files", nargs="+", metavar="FILE", help='rejection log files ("-" = stdin)')
    prom.add_argument("--out", required=True, metavar="DIR", help="output directory")
    prom.add_argument("--min-count", type=int, default=1, help="minimum occurrences (default 1)")
    prom.add_argument("--since", type=_duration_arg, default=None, help="e.g. 30m, 24h, 7d")
    prom.set_defaults(func=cmd_promote)
    return parser
