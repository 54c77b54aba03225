"""`sidecar policy test|check|eval`: work on a policy directory without a running sidecar.

`run_tests` runs OPA-style `*_test.rego` suites on the embedded engine and prints the way
`opa test` does, so CI needs no opa binary. Each function returns a process exit code.
`register(subparsers)` adds the commands to the `sidecar` argparse tree; `main` makes the
module runnable on its own (`python -m sidecar.policy.cli test policies -v`).
"""

from __future__ import annotations

import argparse
import sys
import time
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
    PolicyLoadError,
    compile_bundle,
    package_of,
    read_bundle,
    rule_line,
    rule_name,
)

DEFAULT_DIR = "policies"
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


def run_tests(directory: str = DEFAULT_DIR, verbose: bool = False, *, out: TextIO | None = None) -> int:
    """Run every `test_*` rule of the `*_test.rego` files under `directory`; 0 if all pass."""
    out = out or sys.stdout
    try:
        bundle = read_bundle(directory, tests=True)
    except PolicyLoadError as exc:
        out.write(f"error: {exc}\n")
        return 1
    if _parse_each(bundle.modules, out):
        return 1
    engine = Engine()
    for name, text in bundle.modules:
        engine.add_policy(name, text)
    engine.add_data(bundle.data)

    results: dict[str, int] = {"PASS": 0, "FAIL": 0, "ERROR": 0, "SKIPPED": 0}
    printed = False
    for module in engine.ast():
        file = str(module.get("source", {}).get("file", ""))
        if not file.endswith("_test.rego"):
            continue
        package = package_of(module)
        seen: set[str] = set()
        lines: list[str] = []
        for rule in module.get("ast", {}).get("rules", []):
            name = rule_name(rule)
            if name in seen or not (name.startswith("test_") or name.startswith("todo_test_")):
                continue
            seen.add(name)
            full = f"{package}.{name}"
            if name.startswith("todo_"):
                results["SKIPPED"] += 1
                lines.append(f"{full}: SKIPPED")
                continue
            started = time.perf_counter()
            message = ""
            try:
                value = engine.clone().eval_rule(full)
                status = "PASS" if value is True else "FAIL"
            except BaseException as exc:
                if is_fatal(exc):
                    raise
                status, message = "ERROR", f"\n  {exc}"
            took = _duration(time.perf_counter() - started)
            results[status] += 1
            if verbose or status in ("FAIL", "ERROR"):
                where = f"  ({file}:{rule_line(rule)})" if status != "PASS" else ""
                lines.append(f"{full}: {status} ({took}){where}{message}")
        if lines and (verbose or any(": FAIL" in x or ": ERROR" in x for x in lines)):
            out.write(f"{file}:\n")
            for line in lines:
                if verbose or ": FAIL" in line or ": ERROR" in line:
                    out.write(line + "\n")
            out.write("\n")
            printed = True
    total = sum(results.values())
    if total == 0:
        out.write(f"no tests found in {directory}\n")
        return 1
    if printed:
        out.write("-" * 80 + "\n")
    for status in ("PASS", "FAIL", "ERROR", "SKIPPED"):
        if results[status] or status == "PASS":
            out.write(f"{status}: {results[status]}/{total}\n")
    return 0 if results["FAIL"] == 0 and results["ERROR"] == 0 else 1


def check(directory: str = DEFAULT_DIR, *, out: TextIO | None = None) -> int:
    """Parse and validate the policy like a reload would; print FILE:LINE:COL per error."""
    out = out or sys.stdout
    try:
        bundle = read_bundle(directory, tests=True)
    except PolicyLoadError as exc:
        out.write(f"error: {exc}\n")
        return 1
    if _parse_each(bundle.modules, out):
        return 1
    try:
        compile_bundle(read_bundle(directory))
    except PolicyLoadError as exc:
        out.write(f"{exc}\n")
        return 1
    out.write(f"OK: {len(bundle.modules)} file(s) in {directory}\n")
    return 0


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


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add `policy test|check|eval` to an argparse subparsers object.

    Each leaf sets `func`, a callable taking the parsed Namespace and returning the exit code.
    """
    parser: argparse.ArgumentParser = subparsers.add_parser("policy", help="test, check or evaluate Rego policies")
    sub = parser.add_subparsers(dest="policy_command", required=True)

    test = sub.add_parser("test", help="run *_test.rego suites (like opa test)")
    test.add_argument("dir", nargs="?", default=DEFAULT_DIR)
    test.add_argument("-v", "--verbose", action="store_true", help="print every test")
    test.set_defaults(func=lambda a: run_tests(a.dir, a.verbose))

    chk = sub.add_parser("check", help="report syntax and compile errors with file and line")
    chk.add_argument("dir", nargs="?", default=DEFAULT_DIR)
    chk.set_defaults(func=lambda a: check(a.dir))

    ev = sub.add_parser("eval", help="evaluate one input document, print the decision and the time")
    ev.add_argument("--input", required=True, metavar="FILE", help="input JSON file, - for stdin")
    ev.add_argument("--policies", default=DEFAULT_DIR, metavar="DIR")
    ev.set_defaults(func=lambda a: eval_input(a.policies, a.input))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sidecar")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["policy", *(sys.argv[1:] if argv is None else argv)])
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
