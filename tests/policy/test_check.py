"""`sidecar policy check` proves a policy can run: every branch, reached or not."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest

from sidecar.config import PolicySettings
from sidecar.policy.cli import check
from sidecar.policy.engine import EmbeddedEngine
from tests.policy.conftest import copy_policies

HEAD = (
    'package sidecar\nimport rego.v1\ndecision := {"allow": true} if { input.never == 1; ok } '
    'else := {"allow": false}\n'
)


def _check(tmp_path: Path, rego: str, data: dict | None = None) -> tuple[int, str]:
    (tmp_path / "p.rego").write_text(HEAD + rego)
    if data is not None:
        (tmp_path / "data.json").write_bytes(orjson.dumps(data))
    out = io.StringIO()
    return check(str(tmp_path), out=out), out.getvalue()


@pytest.mark.parametrize(
    ("rego", "expected"),
    [
        ('ok if { input.rare == 1; lowr(input.x) == "a" }\n', "p.rego:4:"),
        ('ok if { input.rare == 1; lowr(input.x) == "a" }\n', "error: unknown function lowr"),
        ("ok if { input.rare == 1; y == 1 }\n", "use of undefined variable `y` is unsafe"),
        ("f(x) := lowr(x)\nok := true\n", "unknown function lowr"),
        ('ok if { input.rare; x := 1 + "a"; x > 0 }\n', "operator add cannot take a string"),
        ("ok if { input.rare; count(5) > 0 }\n", "argument 1 of count must be array or object or set or string"),
        ('ok if { input.rare; lower("A", "a", "b") }\n', "lower takes 1 argument(s), called with 3"),
        ("ok if { input.rare; crypto.sha256(input.x) }\n", "crypto.sha256 is an OPA builtin the embedded engine"),
        ("ok contains 1 if input.rare\nok := 2 if input.rare\n", "ok is defined as complete and set"),
        ("default ok := true\ndefault ok := false\n", "ok has more than one default"),
        ("f(x) := 1\nf(x, y) := 2\nok := true\n", "f was previously defined with 1 arguments"),
        ("ok := true\ntools := 1\n", "rule data.sidecar.tools has the same path as a key of the policy data"),
    ],
)
def test_check_fails_on_errors_in_unreached_branches(tmp_path: Path, rego: str, expected: str) -> None:
    code, text = _check(tmp_path, rego, {"sidecar": {"tools": {}}})
    assert code == 1, text
    assert expected in text


def test_check_reports_data_type_errors_and_unicode_domains(tmp_path: Path) -> None:
    data = {
        "sidecar": {
            "tools": {
                "t": {
                    "max_calls_per_session": "5",
                    "approval": {"max_amount": 100, "amount_arg": "amount", "on_invalid": "allow"},
                    "blocked_recipients": {"recipient_arg": "to", "domains": ["bücher.de"]},
                }
            }
        }
    }
    code, text = _check(tmp_path, "ok := true\n", data)
    assert code == 1
    assert 'sidecar.tools.t.max_calls_per_session: must be a integer, got "5"' in text
    assert "sidecar.tools.t.approval.on_invalid: must be one of deny, approval" in text
    assert "write xn--bcher-kva.de" in text


def test_check_warns_on_engine_disagreement(tmp_path: Path) -> None:
    code, text = _check(tmp_path, "ok if not is_number(input.x)\n")
    assert code == 0
    assert "warning: `not` over a call on input.x" in text


def test_check_json_is_one_document(tmp_path: Path) -> None:
    (tmp_path / "p.rego").write_text(HEAD + "ok if lowr(input.x)\n")
    out = io.StringIO()
    assert check(str(tmp_path), out=out, as_json=True) == 1
    report = orjson.loads(out.getvalue())
    assert report["ok"] is False and "unknown function lowr" in report["errors"][0]


def test_packaged_policies_check_clean() -> None:
    for spec in ("builtin", "example:support"):
        out = io.StringIO()
        assert check(spec, out=out) == 0, out.getvalue()
        assert "warning" not in out.getvalue()


async def test_reload_refuses_a_misspelled_builtin_and_keeps_the_last_good(tmp_path: Path) -> None:
    directory = copy_policies(tmp_path / "p")
    engine = EmbeddedEngine(PolicySettings.model_validate({}), str(directory))
    good = engine.health()["revision"]
    rules = directory / "sidecar.rego"
    rules.write_text(
        rules.read_text().replace("normal_domain(d) := trim_suffix(lower(d)", "normal_domain(d) := trim_suffix(lowr(d)")
    )
    await engine.reload_now()
    health = engine.health()
    assert health["ok"] is False and "unknown function lowr" in health["error"]
    assert health["revision"] == good
    decision = await engine.decide({"tool": {"name": "support_tickets_search", "declared": True}})
    assert decision.error is None and decision.rule == "read_only"  # the last good policy serves
    await engine.close()
