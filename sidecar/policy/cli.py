"""`sidecar policy test|check|eval|init|replay`: work on a policy without a running sidecar.

A policy is a directory or the packaged library (`builtin`, `example:NAME`, see
sidecar/policy/sources.py), so every command works from an installed wheel, from any
directory. `run_tests` runs OPA-style `*_test.rego` suites on the embedded engine and prints
the way `opa test` does. Each function returns a process exit code; `--json` prints exactly one
JSON document. `register(subparsers)` adds the commands to the `sidecar` argparse tree; `main`
makes the module runnable on its own (`python -m sidecar.policy.cli test example:support -v`).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import orjson

from sidecar.config import PolicySettings
from sidecar.policy._regorus import UNDEFINED, Engine, RegoError, is_fatal
from sidecar.policy.engine import EmbeddedEngine, decision_from_value, visible_from_value
from sidecar.policy.loader import (
    DECISION,
    RESULT_DECISION,
    VISIBLE_TOOLS,
    PolicyBundle,
    PolicyLoadError,
    compile_bundle,
    package_of,
    read_bundle,
    rule_line,
    rule_name,
)
from sidecar.policy.simulate import FailOn, render, simulate
from sidecar.policy.sources import BUILTIN, examples, init_directory

DEFAULT_POLICY = BUILTIN
_RULE_FOR_PHASE = {
    "tool_call": DECISION,
    "tool_list": VISIBLE_TOOLS,
    "tool_result": RESULT_DECISION,
}


def _duration(seconds: float) -> str:
    """Go-style duration, as `opa test` prints it."""
    if seconds >= 1:
        return f"{seconds:.6f}s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.6f}ms"
    return f"{seconds * 1e6:.3f}µs"


def _print_rego_error(err: RegoError, out: TextIO) -> None:
    out.write(f"{err}\n")
    detail = [line for line in err.detail.splitlines() if line.strip() and not line.lstrip().startswith("-->")]
    for line in detail:
        if not line.startswith("error:"):
            out.write(f"    {line}\n")


def _parse_each(modules: tuple[tuple[str, str], ...], out: TextIO) -> int:
    """Parse every file on its own so each broken file is reported. Returns error count."""
    errors = 0
    for name, text in modules:
        try:
            Engine().add_policy(name, text)
        except RegoError as err:
            _print_rego_error(err, out)
            errors += 1
    return errors


@dataclass(frozen=True)
class TestResult:
    name: str
    file: str
    line: int
    status: str  # PASS, FAIL, ERROR, SKIPPED
    seconds: float
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "file": self.file,
            "line": self.line,
            "status": self.status,
            "duration_s": round(self.seconds, 6),
        }
        if self.error:
            out["error"] = self.error
        return out


def collect_tests(bundle: PolicyBundle) -> list[TestResult]:
    """Evaluate every `test_*` rule of the bundle's `*_test.rego` modules (each on a fresh
    clone of one engine); `todo_test_*` rules are SKIPPED, as with `opa test`."""
    engine = Engine()
    for name, text in bundle.modules:
        engine.add_policy(name, text)
    engine.add_data(bundle.data)
    results: list[TestResult] = []
    for module in engine.ast():
        file = str(module.get("source", {}).get("file", ""))
        if not file.endswith("_test.rego"):
            continue
        package = package_of(module)
        seen: set[str] = set()
        for rule in module.get("ast", {}).get("rules", []):
            name = rule_name(rule)
            if name in seen or not (name.startswith("test_") or name.startswith("todo_test_")):
                continue
            seen.add(name)
            full = f"{package}.{name}"
            if name.startswith("todo_"):
                results.append(TestResult(full, file, rule_line(rule), "SKIPPED", 0.0))
                continue
            started = time.perf_counter()
            error = ""
            try:
                status = "PASS" if engine.clone().eval_rule(full) is True else "FAIL"
            except BaseException as exc:
                if is_fatal(exc):
                    raise
                status, error = "ERROR", str(exc)
            results.append(TestResult(full, file, rule_line(rule), status, time.perf_counter() - started, error))
    return results


def _print_results(results: list[TestResult], verbose: bool, out: TextIO) -> None:
    printed = False
    for file in dict.fromkeys(r.file for r in results):
        shown = [r for r in results if r.file == file and (verbose or r.status in ("FAIL", "ERROR"))]
        if not shown:
            continue
        out.write(f"{file}:\n")
        for r in shown:
            where = f"  ({r.file}:{r.line})" if r.status != "PASS" else ""
            took = "" if r.status == "SKIPPED" else f" ({_duration(r.seconds)})"
            out.write(f"{r.name}: {r.status}{took}{where}" + (f"\n  {r.error}" if r.error else "") + "\n")
        out.write("\n")
        printed = True
    if printed:
        out.write("-" * 80 + "\n")


def run_tests(
    directory: str = DEFAULT_POLICY, verbose: bool = False, *, out: TextIO | None = None, as_json: bool = False
) -> int:
    """Run every `test_*` rule of the `*_test.rego` files of a policy; 0 if all pass. Prints
    like `opa test` (failures, or every test with -v), or one JSON document."""
    out = out or sys.stdout
    problem = ""
    results: list[TestResult] = []
    try:
        bundle = read_bundle(directory, tests=True)
    except PolicyLoadError as exc:
        problem = f"error: {exc}"
    else:
        parse_out = io.StringIO()
        if _parse_each(bundle.modules, parse_out):
            problem = parse_out.getvalue().strip()
        else:
            results = collect_tests(bundle)
            if not results:
                problem = f"no tests found in {directory}"
    counts = {status: sum(1 for r in results if r.status == status) for status in ("PASS", "FAIL", "ERROR", "SKIPPED")}
    ok = not problem and counts["FAIL"] == 0 and counts["ERROR"] == 0
    if as_json:
        report: dict[str, Any] = {
            "policy": directory,
            "ok": ok,
            "summary": counts,
            "tests": [r.to_json() for r in results],
        }
        if problem:
            report["error"] = problem
        out.write(orjson.dumps(report).decode() + "\n")
        return 0 if ok else 1
    if problem:
        out.write(problem + "\n")
        return 1
    _print_results(results, verbose, out)
    for status, n in counts.items():
        if n or status == "PASS":
            out.write(f"{status}: {n}/{len(results)}\n")
    return 0 if ok else 1


def check(directory: str = DEFAULT_POLICY, *, out: TextIO | None = None, as_json: bool = False) -> int:
    """Prove the policy can run: parse every file, evaluate it once (unsafe variables in any
    rule), lint every branch (unknown functions, arity, types, conflicts, data types), exactly
    as a (re)load does, test files included. FILE:LINE:COL per finding; exit 1 on errors."""
    out = out or sys.stdout
    errors: list[str] = []
    warnings: list[str] = []
    files = 0
    try:
        bundle = read_bundle(directory, tests=True)
        files = len(bundle.modules)
    except PolicyLoadError as exc:
        errors.append(f"error: {exc}")
    else:
        parse_out = io.StringIO()
        if _parse_each(bundle.modules, parse_out):
            errors.extend(line for line in parse_out.getvalue().splitlines() if line.strip())
        else:
            try:
                warnings.extend(compile_bundle(bundle).warnings)
            except PolicyLoadError as exc:
                errors.extend(str(exc).splitlines())
    if as_json:
        report = {"policy": directory, "ok": not errors, "files": files, "errors": errors, "warnings": warnings}
        out.write(orjson.dumps(report).decode() + "\n")
    else:
        for line in [*errors, *warnings]:
            out.write(line + "\n")
        if not errors:
            out.write(
                f"OK: {files} file(s) in {directory}" + (f", {len(warnings)} warning(s)" if warnings else "") + "\n"
            )
    return 1 if errors else 0


def eval_input(directory: str, input_file: str, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Evaluate one input document (phase picks the rule); print the result and the time."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        raw = sys.stdin.buffer.read() if input_file == "-" else Path(input_file).read_bytes()
        document: Any = orjson.loads(raw)
    except (OSError, orjson.JSONDecodeError) as exc:
        err.write(f"error: cannot read input {input_file}: {exc}\n")
        return 1
    if not isinstance(document, dict):
        err.write("error: the input must be a JSON object\n")
        return 1
    try:
        engine = EmbeddedEngine(PolicySettings.model_validate({}), directory)
    except PolicyLoadError as exc:
        err.write(f"error: {exc}\n")
        return 1
    rule = _RULE_FOR_PHASE.get(str(document.get("phase", "tool_call")), DECISION)
    started = time.perf_counter()
    try:
        value = engine.evaluate(rule, document)
    except BaseException as exc:
        if is_fatal(exc):
            raise
        err.write(f"error: evaluating {rule}: {exc}\n")
        return 1
    took = time.perf_counter() - started
    result: Any
    try:
        if rule == VISIBLE_TOOLS:
            result = visible_from_value(value)
        elif value is UNDEFINED:
            result = None if rule == RESULT_DECISION else {"undefined": True, "allow": False}
        else:
            result = decision_from_value(value).to_dict()
    except ValueError as exc:
        err.write(f"error: {exc}\n")
        return 1
    out.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    err.write(f"# {rule} evaluated in {took * 1e6:.1f} µs\n")
    return 0


def init(target: str, example: str | None, force: bool, *, out: TextIO | None = None) -> int:
    """Copy the packaged library (default data, or an example) into `target` to edit."""
    out = out or sys.stdout
    try:
        written = init_directory(target, example, force=force)
    except (PolicyLoadError, OSError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    for path in written:
        out.write(f"wrote {path}\n")
    out.write(f"next: sidecar policy test {target} && sidecar run --policies {target}\n")
    return 0


def replay(policy: str, logs: list[str], fail_on: FailOn, *, out: TextIO | None = None, as_json: bool = False) -> int:
    """Re-evaluate recorded decisions against `policy`; 1 if flips (per `fail_on`), 2 on errors."""
    out = out or sys.stdout
    try:
        report = simulate(policy, logs)
    except PolicyLoadError as exc:
        sys.stderr.write(f"error: the candidate policy does not load: {exc}\n")
        return 2
    except OSError as exc:
        sys.stderr.write(f"error: cannot read {exc.filename}: {exc.strerror}\n")
        return 2
    out.write(orjson.dumps(report.to_json()).decode() + "\n" if as_json else render(report))
    return 1 if report.failed(fail_on) else 0


_POLICY_HELP = "a directory, builtin (the packaged default) or example:NAME"


def _quiet_pipe(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A closed stdout (`| head`) ends the command quietly, as with any Unix tool (exit 141)."""

    def run(args: argparse.Namespace) -> int:
        try:
            code = func(args)
            sys.stdout.flush()
            return code
        except BrokenPipeError:
            # Python flushes stdout again at exit; point it at /dev/null so that is quiet too.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 141

    return run


def _check_command(args: argparse.Namespace) -> int:
    out = io.StringIO()
    code = check(args.policy, out=out, as_json=args.json)
    sys.stdout.write(out.getvalue())
    if code == 0 and args.strict and ": warning: " in out.getvalue():
        return 1
    return code


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add `policy test|check|eval|init|replay` to an argparse subparsers object.

    Each leaf sets `func`, a callable taking the parsed Namespace and returning the exit code.
    """
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "policy",
        help="test, check, evaluate, copy out or replay Rego policies",
        description="Work on a policy without a running sidecar. A policy is a directory of *.rego files "
        "and data.json, or the library packaged with the sidecar: builtin (what `sidecar run` enforces "
        f"without --policies) or example:NAME ({', '.join(examples())}).",
    )
    sub = parser.add_subparsers(dest="policy_command", required=True, metavar="COMMAND")

    test = sub.add_parser(
        "test",
        help="run the *_test.rego suites (like opa test)",
        description="Run every test_* rule of the policy's *_test.rego files on the embedded engine. "
        "Exit 0 when all pass.",
    )
    test.add_argument("policy", nargs="?", default=BUILTIN, help=f"{_POLICY_HELP} (default: %(default)s)")
    test.add_argument("-v", "--verbose", action="store_true", help="print every test, not only failures")
    test.add_argument("--json", action="store_true", help="print one JSON document with every result")
    test.set_defaults(func=_quiet_pipe(lambda a: run_tests(a.policy, a.verbose, as_json=a.json)))

    chk = sub.add_parser(
        "check",
        help="prove the policy can run: syntax, unknown functions, types, conflicts in every branch",
        description="Parse, evaluate once and lint every branch of the policy (test files included), as a "
        "reload does. Prints FILE:LINE:COL per finding; exit 1 on errors (warnings too with --strict).",
    )
    chk.add_argument("policy", nargs="?", default=BUILTIN, help=f"{_POLICY_HELP} (default: %(default)s)")
    chk.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    chk.add_argument("--json", action="store_true", help="print one JSON document: ok, errors, warnings")
    chk.set_defaults(func=_quiet_pipe(_check_command))

    ev = sub.add_parser(
        "eval",
        help="evaluate one input document, print the decision JSON (and the time on stderr)",
        description="Evaluate one input document (its phase picks the rule: tool_call: decision, "
        "tool_list: visible_tools, tool_result: result_decision). Prints the result as JSON on stdout.",
    )
    ev.add_argument("--input", required=True, metavar="FILE", help="input JSON file, - for stdin")
    ev.add_argument("--policies", default=BUILTIN, metavar="POLICY", help=f"{_POLICY_HELP} (default: %(default)s)")
    ev.set_defaults(func=_quiet_pipe(lambda a: eval_input(a.policies, a.input)))

    ini = sub.add_parser(
        "init",
        help="copy the packaged library into a directory to edit",
        description="Write the packaged rules, their tests and the default data (or an example's data and "
        "tests) into DIR, flat: `sidecar run --policies DIR` and `opa run --server DIR` load it as is.",
    )
    ini.add_argument("dir", metavar="DIR", help="target directory (created if missing)")
    ini.add_argument("--example", choices=examples(), help="start from this example instead of the default")
    ini.add_argument("--force", action="store_true", help="overwrite files that already exist")
    ini.set_defaults(func=_quiet_pipe(lambda a: init(a.dir, a.example, a.force)))

    rep = sub.add_parser(
        "replay",
        help="re-evaluate recorded decisions against a candidate policy and print the flips",
        description="Re-evaluate the tool-call decisions recorded in decision logs (policy.decision_log) and "
        "rejection logs against a candidate policy, with no side effects. Prints the flips (allow→deny, "
        "deny→allow, allow→approval, ...) per tool and rule with examples. Exit 1 when there are flips "
        "(see --fail-on), 2 when the policy or a log cannot be read.",
    )
    rep.add_argument("logs", nargs="+", metavar="LOG", help="decision-log or rejection-log files (JSON lines)")
    rep.add_argument("--policies", required=True, metavar="POLICY", help=f"the candidate: {_POLICY_HELP}")
    rep.add_argument(
        "--fail-on",
        choices=[f.value for f in FailOn],
        default=FailOn.ANY.value,
        help="exit 1 on any flip, only on flips that allow more (loosening), or never (default: %(default)s)",
    )
    rep.add_argument("--json", action="store_true", help="print one JSON document with every flip")
    rep.set_defaults(func=_quiet_pipe(lambda a: replay(a.policies, a.logs, FailOn(a.fail_on), as_json=a.json)))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sidecar")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["policy", *(sys.argv[1:] if argv is None else argv)])
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
