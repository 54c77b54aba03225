"""`sidecar policy replay` against the decision and rejection logs of a recorded demo run
(tests/fixtures/policy_replay, written by the real sidecar; see its README)."""

from __future__ import annotations

import io
from pathlib import Path

import orjson

from sidecar.policy.cli import replay
from sidecar.policy.simulate import FailOn, simulate
from tests.policy.conftest import copy_policies, edit_data

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "policy_replay"
LOGS = [str(FIXTURES / "decisions.jsonl"), str(FIXTURES / "rejections.jsonl")]


def _lower_refund_limit(tmp_path: Path) -> str:
    directory = copy_policies(tmp_path / "candidate")
    edit_data(directory, lambda d: d["tools"]["payments_refund"]["approval"].update(max_amount=30))
    return str(directory)


def test_unchanged_policy_has_no_flips() -> None:
    report = simulate("example:support", LOGS)
    assert report.evaluated == 8 and report.flipped == 0
    assert report.skipped == 2  # the lockdown rejection and the replay never reached the policy
    assert replay("example:support", LOGS, FailOn.ANY, out=io.StringIO()) == 0


def test_changed_policy_finds_the_one_flipped_rule(tmp_path: Path) -> None:
    candidate = _lower_refund_limit(tmp_path)
    report = simulate(candidate, LOGS)
    [flip] = report.sorted_flips()
    assert (flip.tool, flip.before, flip.after) == ("payments_refund", "allow", "approval")
    assert (flip.before_rule, flip.after_rule, flip.count) == ("within_limits", "amount", 1)
    assert flip.examples[0]["args"] == {"ticket_id": "T-1042", "amount": 40}
    out = io.StringIO()
    assert replay(candidate, LOGS, FailOn.ANY, out=out) == 1
    assert "allow→approval   payments_refund  (rule within_limits → amount): 1 call(s)" in out.getvalue()
    assert replay(candidate, LOGS, FailOn.LOOSENING, out=io.StringIO()) == 0  # stricter, not looser
    assert replay(candidate, LOGS, FailOn.NEVER, out=io.StringIO()) == 0


def test_loosening_flip_fails_loosening_gate(tmp_path: Path) -> None:
    directory = copy_policies(tmp_path / "candidate")
    edit_data(directory, lambda d: d["tools"]["support_replies_send"]["blocked_recipients"].update(domains=[]))
    out = io.StringIO()
    assert replay(str(directory), LOGS, FailOn.LOOSENING, out=out, as_json=True) == 1
    report = orjson.loads(out.getvalue())
    directions = {(f["tool"], f["direction"], f["after_rule"]) for f in report["flips"]}
    assert ("support_replies_send", "deny_to_approval", "approval_always") in directions


def test_broken_candidate_exits_2(tmp_path: Path) -> None:
    (tmp_path / "p.rego").write_text("package sidecar\nimport rego.v1\ndecision := lowr(1)\n")
    assert replay(str(tmp_path), LOGS, FailOn.ANY, out=io.StringIO()) == 2
