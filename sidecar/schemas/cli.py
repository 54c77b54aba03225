"""`sidecar schemas lint|show|check`: prepare tool declarations for argument lockdown.

Settings come from `--config` (and SIDECAR_* variables) exactly as `sidecar run` reads them,
and per-tool overrides apply, so each command answers for the lockdown the proxy would run.
Exit codes: 0 fine, 1 errors found / arguments refused, 2 unusable input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import IO, Any

import orjson

from sidecar.config import LockdownSettings, Settings, load_settings
from sidecar.dialects.base import parse_arguments
from sidecar.lockdown.validator import Lockdown
from sidecar.model import ToolCall, Verdict
from sidecar.schemas.lint import SEVERITIES, ToolReport, lint_file
from sidecar.schemas.load import LoadedFile, LoadedTool, LoadError, load_file, pointer

_INDENT = orjson.OPT_INDENT_2


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(args.config)


def _dump(value: Any) -> str:
    return orjson.dumps(value, option=_INDENT).decode()


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def format_reports(reports: list[ToolReport], loaded: list[LoadedFile], quiet: bool = False) -> str:
    """Per tool: a header line, then SEVERITY / POINTER / FIELD / FINDING rows."""
    lines: list[str] = []
    by_file: dict[str, list[ToolReport]] = {}
    for report in reports:
        by_file.setdefault(report.file, []).append(report)
    for file in loaded:
        lines.append(f"{file.path}: {file.shape}, {len(file.tools)} tool(s)")
        for where, why in file.skipped:
            lines.append(f"  skipped {where or '/'}: {why}")
        for report in by_file.get(file.path, []):
            counts = ", ".join(f"{report.count(s)} {s}" for s in SEVERITIES)
            lines.append(
                f"\n  {report.tool}  ({report.dialect}, {report.location}, schema {report.schema_hash[:12]}; {counts})"
            )
            rows = [("SEVERITY", "POINTER", "FIELD", "FINDING")]
            rows += [
                (f.severity, _clip(f.pointer or "/", 40), _clip(f.field or "-", 30), f.message)
                for f in report.findings
                if not (quiet and f.severity == "info")
            ]
            if len(rows) == 1:
                lines.append("    no findings")
                continue
            widths = [max(len(row[i]) for row in rows) for i in range(3)]
            for row in rows:
                lines.append("    " + "  ".join(c.ljust(widths[i]) if i < 3 else c for i, c in enumerate(row)).rstrip())
        lines.append("")
    total = {s: sum(r.count(s) for r in reports) for s in SEVERITIES}
    lines.append(
        f"{len(reports)} tool(s): {total['error']} error(s), {total['warning']} warning(s), {total['info']} info"
    )
    return "\n".join(lines) + "\n"


def _load_all(paths: list[str], err: IO[str]) -> list[LoadedFile] | None:
    loaded = []
    for path in paths:
        try:
            loaded.append(load_file(path))
        except LoadError as exc:
            print(f"error: {exc}", file=err)
            return None
    return loaded


def cmd_lint(args: argparse.Namespace, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    loaded = _load_all(args.files, err)
    if loaded is None:
        return 2
    settings = _settings(args)
    lockdown = Lockdown()
    reports = [report for file in loaded for report in lint_file(file, settings, lockdown)]
    if args.json:
        skipped = [{"file": f.path, "pointer": w, "reason": why} for f in loaded for w, why in f.skipped]
        summary = {s: sum(r.count(s) for r in reports) for s in SEVERITIES}
        out.write(_dump({"tools": [r.to_json() for r in reports], "skipped": skipped, "summary": summary}) + "\n")
    else:
        out.write(format_reports(reports, loaded, args.quiet))
    errors = sum(r.count("error") for r in reports)
    warnings = sum(r.count("warning") for r in reports)
    return 1 if errors or (args.strict and warnings) else 0


def _select(loaded: LoadedFile, name: str | None, err: IO[str]) -> list[LoadedTool] | None:
    if name is None:
        return loaded.tools
    chosen = [t for t in loaded.tools if t.declaration.name == name]
    if not chosen:
        names = ", ".join(t.declaration.name for t in loaded.tools)
        print(f"error: {loaded.path}: no tool named {name!r} (declared: {names})", file=err)
        return None
    return chosen


def _added(before: Any, after: Any, where: tuple[str | int, ...] = ()) -> list[tuple[str, Any]]:
    """What the lockdown's rewrite added to the schema (it only ever adds keys)."""
    found: list[tuple[str, Any]] = []
    if isinstance(before, dict) and isinstance(after, dict):
        for key, value in after.items():
            if key not in before:
                found.append((pointer((*where, key)), value))
            else:
                found += _added(before[key], value, (*where, key))
    elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for i, (b, a) in enumerate(zip(before, after, strict=True)):
            found += _added(b, a, (*where, i))
    return found


def _rules(settings: LockdownSettings) -> dict[str, bool]:
    return settings.model_dump()


def cmd_show(args: argparse.Namespace, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        loaded = load_file(args.file)
    except LoadError as exc:
        print(f"error: {exc}", file=err)
        return 2
    tools = _select(loaded, args.tool, err)
    if tools is None:
        return 2
    settings, lockdown = _settings(args), Lockdown()
    shown = []
    for tool in tools:
        decl = tool.declaration
        rules = settings.lockdown_for(decl.name)
        entry = lockdown.compiled(decl, rules)
        shown.append(
            {
                "tool": decl.name,
                "dialect": tool.dialect,
                "location": tool.location,
                "schema_hash": decl.schema_hash,
                "lockdown": _rules(rules),
                "compile_error": entry.compile_error or None,
                "injected": [{"pointer": p, "value": v} for p, v in _added(decl.schema, entry.root)],
                "effective_schema": entry.root,
            }
        )
    if args.json:
        out.write(_dump({"tools": shown}) + "\n")
        return 0
    for item in shown:
        out.write(f"# tool {item['tool']} ({item['dialect']}, {args.file}#{item['location']})\n")
        out.write(f"# schema_hash {item['schema_hash']}\n")
        out.write("# lockdown " + ", ".join(f"{k}={'on' if v else 'off'}" for k, v in item["lockdown"].items()) + "\n")
        if item["compile_error"]:
            out.write(f"# does not compile: {item['compile_error']} (every call is refused)\n")
        if item["injected"]:
            out.write("# added by the lockdown:\n")
            for added in item["injected"]:
                out.write(f"#   {added['pointer']}: {orjson.dumps(added['value']).decode()}\n")
        else:
            out.write("# added by the lockdown: nothing (validated as declared)\n")
        out.write(_dump(item["effective_schema"]) + "\n")
    return 0


def check_arguments(loaded: LoadedFile, tool: str, raw: str, settings: Settings) -> Verdict:
    """The verdict the proxy's argument guard gives this call (same parsing, same settings)."""
    declarations = {t.declaration.name: t.declaration for t in loaded.tools}
    arguments, parse_error = parse_arguments(raw)
    call = ToolCall("sidecar-schemas-check", tool, arguments, raw, parse_error=parse_error)
    return Lockdown().check(call, declarations.get(tool), settings.lockdown_for(tool), declarations.keys())


def cmd_check(args: argparse.Namespace, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        loaded = load_file(args.file)
    except LoadError as exc:
        print(f"error: {exc}", file=err)
        return 2
    raw = args.args
    if raw.startswith("@"):
        try:
            raw = sys.stdin.read() if raw == "@-" else Path(raw[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            print(f"error: cannot read {raw[1:]}: {exc.strerror or exc}", file=err)
            return 2
    settings = _settings(args)
    verdict = check_arguments(loaded, args.tool, raw, settings)
    mode = settings.mode_for(args.tool)
    payload = None if verdict.allowed else verdict.model_payload()
    if args.json:
        out.write(_dump({"tool": args.tool, "valid": verdict.allowed, "mode": mode, "payload": payload}) + "\n")
        return 0 if verdict.allowed else 1
    if verdict.allowed:
        out.write(f"valid: {args.tool} accepts these arguments; the call reaches the agent unchanged\n")
        return 0
    out.write(f"refused: {verdict.status}\n")
    for error in verdict.errors:
        out.write(f"  {error.field or '(arguments)'}: {error.problem}\n    expected: {error.expected}\n")
    if mode == "observe":
        out.write("mode observe: the call would still reach the agent; the refusal is only recorded\n")
    else:
        out.write("the model receives (tool result, is_error: true):\n")
        out.write(orjson.dumps(payload).decode() + "\n")
    return 1


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add `schemas lint|show|check` to a subparsers object; each sets `func(args) -> int`."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "schemas", help="prepare tool schemas for argument lockdown (lint, show, check)"
    )
    sub = parser.add_subparsers(dest="schemas_command", required=True)
    config = argparse.ArgumentParser(add_help=False)
    config.add_argument("--config", metavar="FILE", help="sidecar YAML settings (per-tool lockdown rules)")
    config.add_argument("--json", action="store_true", help="machine-readable output")
    files_help = 'JSON: a request body, a tools array or one tool ("-" = stdin)'

    lint = sub.add_parser("lint", parents=[config], help="predict rejections and weak repair hints")
    lint.add_argument("files", nargs="+", metavar="FILE", help=files_help)
    lint.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    lint.add_argument("-q", "--quiet", action="store_true", help="hide info rows in the table")
    lint.set_defaults(func=cmd_lint)

    show = sub.add_parser("show", parents=[config], help="the schema the lockdown enforces, and its hash")
    show.add_argument("file", metavar="FILE", help=files_help)
    show.add_argument("--tool", metavar="NAME", help="only this tool")
    show.set_defaults(func=cmd_show)

    check = sub.add_parser("check", parents=[config], help="validate one argument object like the proxy")
    check.add_argument("file", metavar="FILE", help=files_help)
    check.add_argument("--tool", required=True, metavar="NAME")
    check.add_argument(
        "--args", required=True, metavar="JSON", help="the arguments as the model wrote them (@FILE reads a file)"
    )
    check.set_defaults(func=cmd_check)
    return parser
