from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from sidecar.telemetry.rejection_log import RejectionLog
from sidecar.telemetry.rejections_cli import (
    group_rejections,
    normalise_field,
    normalise_problem,
    parse_duration,
    read_records,
    register,
)

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SCHEMA = {
    "type": "object",
    "properties": {
        "amount": {"type": "integer", "minimum": 1},
        "to": {"type": "string"},
        "items": {
            "type": "array",
            "items": {"type": "object", "properties": {"q": {"type": "integer"}}},
        },
    },
    "required": ["amount", "to"],
}


def _rec(when: datetime, tool: str, field: str, problem: str, kind: str, **extra: Any) -> bytes:
    record = {
        "time": when.isoformat().replace("+00:00", "Z"),
        "tool": tool,
        "arguments": extra.pop("arguments", {"amount": "x"}),
        "errors": [{"field": field, "problem": problem, "expected": "integer", "kind": kind}],
        "verdict": "reject",
        "action": "repaired",
        **extra,
    }
    return orjson.dumps(record) + b"\n"


@pytest.fixture
def logfile(tmp_path: Path) -> Path:
    lines = [
        _rec(
            NOW - timedelta(minutes=5),
            "transfer",
            "amount",
            'expected integer, got string "10"',
            "type",
        ),
        _rec(
            NOW - timedelta(minutes=10),
            "transfer",
            "amount",
            'expected integer, got string "25"',
            "type",
        ),
        _rec(
            NOW - timedelta(hours=2),
            "transfer",
            "amount",
            'expected integer, got string "7"',
            "type",
        ),
        _rec(
            NOW - timedelta(days=3),
            "transfer",
            "amount",
            "-5 is less than the minimum of 1",
            "range",
        ),
        _rec(NOW - timedelta(days=3), "search", "items[3].q", "expected integer, got 2.5", "type"),
        _rec(NOW - timedelta(days=2), "search", "items[0].q", "expected integer, got 1.5", "type"),
        b"this is not json\n",
        b'{"truncated": \n',
        b"\n",
        b"[1, 2]\n",
    ]
    path = tmp_path / "rejections.log"
    path.write_bytes(b"".join(lines))
    return path


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sidecar")
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_parse_duration() -> None:
    assert parse_duration("30m") == timedelta(minutes=30)
    assert parse_duration("24h") == timedelta(hours=24)
    assert parse_duration("7d") == timedelta(days=7)
    with pytest.raises(ValueError):
        parse_duration("yesterday")
    with pytest.raises(SystemExit):
        _parse(["rejections", "top", "f", "--since", "1 fortnight"])


def test_normalisation() -> None:
    assert normalise_problem('expected integer, got string "10"') == normalise_problem(
        "expected integer, got string 'abc'"
    )
    assert normalise_problem("-5 is less than the minimum of 1") == "<n> is less than the minimum of <n>"
    assert normalise_problem("expected int32") == "expected int32"
    assert normalise_field("items[3].q") == "items[*].q" == normalise_field("items[12].q")
    assert normalise_field("items/3/q") == "items/*/q"


def test_read_and_group(logfile: Path) -> None:
    records, skipped = read_records([str(logfile)], now=NOW)
    assert skipped == 3 and len(records) == 6
    assert records[0]["time"] < records[-1]["time"]  # oldest first
    groups = group_rejections(records)
    assert [(g.tool, g.field, g.kind, g.count) for g in groups] == [
        ("transfer", "amount", "type", 3),
        ("search", "items[*].q", "type", 2),
        ("transfer", "amount", "range", 1),
    ]
    assert groups[0].problem == "expected integer, got string <value>"
    assert groups[0].example_problem == 'expected integer, got string "7"'  # the oldest


def test_since_filter(logfile: Path) -> None:
    records, _ = read_records([str(logfile)], since=parse_duration("30m"), now=NOW)
    assert len(records) == 2
    records, _ = read_records([str(logfile)], since=parse_duration("24h"), now=NOW)
    assert len(records) == 3


def test_top_command(logfile: Path) -> None:
    args = _parse(["rejections", "top", str(logfile), "--limit", "2"])
    out, err = io.StringIO(), io.StringIO()
    assert args.func(args, out, err) == 0
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[0].split() == ["COUNT", "TOOL", "FIELD", "KIND", "PROBLEM", "EXAMPLE"]
    assert lines[1].split()[:4] == ["3", "transfer", "amount", "type"]
    assert lines[2].split()[:4] == ["2", "search", "items[*].q", "type"]
    assert "range" not in text  # limited to 2 rows
    assert "6 rejected call(s), 3 distinct problem(s)" in text
    assert "skipped 3 unparseable line(s)" in err.getvalue()


def test_top_since_and_missing_file(logfile: Path, tmp_path: Path) -> None:
    args = _parse(["rejections", "top", str(logfile), "--since", "7d"])
    out = io.StringIO()
    assert args.func(args, out, io.StringIO()) == 0
    args = _parse(["rejections", "top", str(tmp_path / "missing.log")])
    err = io.StringIO()
    assert args.func(args, io.StringIO(), err) == 2 and "missing.log" in err.getvalue()


def test_promote_writes_stable_fixtures(logfile: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "regressions"
    args = _parse(["rejections", "promote", str(logfile), "--out", str(out_dir), "--min-count", "2"])
    assert args.func(args, io.StringIO(), io.StringIO()) == 0
    fixtures = sorted(out_dir.glob("*.json"))
    assert len(fixtures) == 2
    contents = {p.name: p.read_bytes() for p in fixtures}
    case = orjson.loads(contents[next(n for n in contents if n.startswith("transfer-"))])
    assert list(case) == sorted(case)  # sorted keys
    assert case["tool"] == "transfer" and case["schema"] is None
    assert case["arguments"] == {"amount": "x"}
    assert case["expected_errors"] == [
        {"field": "amount", "problem": 'expected integer, got string "7"', "expected": "integer", "kind": "type"}
    ]
    module = (out_dir / "test_rejection_regressions.py").read_text()
    assert "from sidecar.lockdown import Lockdown" in module
    assert "Lockdown().check(" in module and "LockdownSettings()" in module
    compile(module, "test_rejection_regressions.py", "exec")
    # running promote again on the same logs rewrites identical files
    assert args.func(args, io.StringIO(), io.StringIO()) == 0
    assert {p.name: p.read_bytes() for p in sorted(out_dir.glob("*.json"))} == contents


def test_promoted_module_replays_through_lockdown(tmp_path: Path) -> None:
    from sidecar.config import LockdownSettings
    from sidecar.lockdown import Lockdown
    from sidecar.model import ToolCall, ToolDeclaration

    # Produce the log the real way: lockdown errors -> RejectionLog (with the schema).
    log_path = tmp_path / "rej.log"
    log = RejectionLog(str(log_path))
    declaration = ToolDeclaration.create("transfer", SCHEMA)
    for i, arguments in enumerate([{"amount": "10", "to": "bob"}, {"amount": 0, "to": "x", "memo": 1}]):
        call = ToolCall(f"c{i}", "transfer", arguments, orjson.dumps(arguments).decode())
        verdict = Lockdown().check(call, declaration, LockdownSettings())
        assert verdict.errors
        log.log_rejection(
            session="s",
            provider="anthropic",
            model="m",
            tool="transfer",
            call_id=call.id,
            arguments=arguments,
            verdict=verdict,
            action="repaired",
            repair_round=1,
            schema=SCHEMA,
        )
    log.close()

    out_dir = tmp_path / "regressions"
    args = _parse(["rejections", "promote", str(log_path), "--out", str(out_dir)])
    assert args.func(args, io.StringIO(), io.StringIO()) == 0
    assert len(list(out_dir.glob("*.json"))) == 3  # type, range, unknown_property

    # A copy whose payload became acceptable must fail loudly; both run in one pytest process.
    broken_dir = tmp_path / "broken"
    shutil.copytree(out_dir, broken_dir)
    fixture = sorted(broken_dir.glob("*.json"))[0]
    case = orjson.loads(fixture.read_bytes())
    case["arguments"] = {"amount": 5, "to": "bob"}
    fixture.write_bytes(orjson.dumps(case, option=orjson.OPT_SORT_KEYS))

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--import-mode=importlib",
            str(out_dir / "test_rejection_regressions.py"),
            str(broken_dir / "test_rejection_regressions.py"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "1 failed, 5 passed" in result.stdout, result.stdout + result.stderr
    assert "accepted now" in result.stdout
    assert f"broken/test_rejection_regressions.py::test_still_refused[{fixture.stem}]" in (
        result.stdout.replace("\\", "/")
    )
