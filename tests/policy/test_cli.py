"""`sidecar policy test|check|eval`."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import orjson
import pytest

from sidecar.policy.cli import check, eval_input, register, run_tests
from tests.policy.cases import call
from tests.policy.conftest import POLICIES, copy_policies


def test_shipped_policy_tests_pass() -> None:
    out = io.StringIO()
    assert run_tests(POLICIES, verbose=True, out=out) == 0
    text = out.getvalue()
    assert "data.sidecar_test.test_read_only_allowed: PASS" in text
    assert text.rstrip().splitlines()[-1].startswith("PASS: ")
    total = text.rstrip().splitlines()[-1].split()[-1]
    assert total.split("/")[0] == total.split("/")[1]


def test_failing_test_file_fails(tmp_path: Path) -> None:
    copy_policies(tmp_path)
    (tmp_path / "wrong_test.rego").write_text(
        "package wrong_test\nimport rego.v1\nimport data.sidecar\n"
        "test_search_denied if {\n"
        '\tnot sidecar.decision.allow with input as {"tool": {"name": "support_tickets_search"}}\n'
        "}\n"
    )
    out = io.StringIO()
    assert run_tests(str(tmp_path), out=out) == 1
    text = out.getvalue()
    assert "data.wrong_test.test_search_denied: FAIL" in text
    assert "FAIL: 1/" in text
    assert "test_read_only_allowed" not in text  # passing tests only with -v


def test_check_reports_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "ok.rego").write_text('package sidecar\nimport rego.v1\ndecision := {"allow": true}\n')
    (tmp_path / "bad.rego").write_text("package sidecar\nimport rego.v1\n\nx if {\n  input.a ==\n}\n")
    out = io.StringIO()
    assert check(str(tmp_path), out=out) == 1
    assert f"{tmp_path}/bad.rego:6:" in out.getvalue()


def test_check_reports_unknown_function(tmp_path: Path) -> None:
    (tmp_path / "p.rego").write_text(
        'package sidecar\nimport rego.v1\ndecision := {"allow": true}\n'
        "other if {\n  input.never == 1\n  no_such_builtin(input.x)\n}\n"
    )
    out = io.StringIO()
    assert check(str(tmp_path), out=out) == 1
    assert "p.rego:6:" in out.getvalue() and "no_such_builtin" in out.getvalue()


def test_check_shipped_policies() -> None:
    out = io.StringIO()
    assert check(POLICIES, out=out) == 0


def test_eval_prints_decision_and_time(tmp_path: Path) -> None:
    path = tmp_path / "input.json"
    path.write_bytes(orjson.dumps(call("payments_refund", {"amount": 500})))
    out, err = io.StringIO(), io.StringIO()
    assert eval_input(POLICIES, str(path), out=out, err=err) == 0
    decision = orjson.loads(out.getvalue())
    assert decision["allow"] is False
    assert decision["require_approval"] == {"group": "finance-approvers", "ttl_s": 900}
    assert "µs" in err.getvalue()


def test_register_adds_policy_commands(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="sidecar")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["policy", "test", POLICIES, "-v"])
    assert args.func(args) == 0
    assert "PASS:" in capsys.readouterr().out
    args = parser.parse_args(["policy", "check", POLICIES])
    assert args.func(args) == 0
    args = parser.parse_args(["policy", "eval", "--input", "x.json", "--policies", POLICIES])
    assert (args.input, args.policies) == ("x.json", POLICIES)
