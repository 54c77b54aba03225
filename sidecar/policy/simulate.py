"""The policy simulator behind `sidecar policy replay`: recorded decisions, a candidate policy.

It reads JSON lines the sidecar wrote and re-evaluates each recorded tool-call decision with
the candidate policy's `data.sidecar.decision`, on a private regorus engine: no state store,
no approvals, no upstream, nothing written. A flip is a recorded outcome (allow, deny,
approval, error) that the candidate decides otherwise; flips are grouped by tool, direction
and rule (the `rule` id the shipped library puts on its decisions), with examples.

Sources, told apart per line:

- the decision log (`policy.decision_log`): the full input as the sidecar built it
  (redacted: a rule reading a redacted value may decide differently here than it did live;
  the report counts such inputs);
- the rejection log: the refused calls the policy decided (`guard: policy`, or `approval`
  for approval verdicts). It has no session counts, replay or approval state, so the input
  is rebuilt with those at zero / none; the schema hash is recomputed from the recorded
  schema. Lockdown rejections and replays never reached the policy and are skipped.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from sidecar.model import schema_hash
from sidecar.policy._regorus import UNDEFINED, Engine, is_fatal
from sidecar.policy.decision_log import KIND as DECISION_LOG_KIND
from sidecar.policy.engine import MalformedDecision, decision_from_value
from sidecar.policy.loader import DECISION, compile_bundle, read_bundle
from sidecar.telemetry.redact import REDACTED

_RANK = {"allow": 2, "approval": 1, "deny": 0, "error": 0}
_POLICY_GUARDS = ("policy", "approval")
MAX_EXAMPLES = 3


class FailOn(enum.StrEnum):
    """When `policy replay` exits 1: any flip, only flips that allow more, or never."""

    ANY = "any"
    LOOSENING = "loosening"
    NEVER = "never"


@dataclass(frozen=True)
class Recorded:
    """One recorded decision: where it was read, its input, and what was decided then."""

    where: str
    time: str | None
    input: dict[str, Any]
    outcome: str
    rule: str | None
    redacted: bool


@dataclass
class Flip:
    tool: str
    before: str
    after: str
    before_rule: str | None
    after_rule: str | None
    count: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def direction(self) -> str:
        return f"{self.before}→{self.after}"

    @property
    def loosening(self) -> bool:
        return _RANK[self.after] > _RANK[self.before]

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "direction": f"{self.before}_to_{self.after}",
            "before": self.before,
            "after": self.after,
            "before_rule": self.before_rule,
            "after_rule": self.after_rule,
            "count": self.count,
            "examples": self.examples,
        }


@dataclass
class Report:
    policy: str
    revision: str
    files: list[str]
    evaluated: int = 0
    skipped: int = 0
    unreadable: int = 0
    redacted_inputs: int = 0
    flips: dict[tuple[str, str, str, str | None, str | None], Flip] = field(default_factory=dict)

    @property
    def flipped(self) -> int:
        return sum(f.count for f in self.flips.values())

    def failed(self, fail_on: FailOn) -> bool:
        if fail_on is FailOn.NEVER:
            return False
        if fail_on is FailOn.LOOSENING:
            return any(f.loosening for f in self.flips.values())
        return bool(self.flips)

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "revision": self.revision,
            "files": self.files,
            "evaluated": self.evaluated,
            "flipped": self.flipped,
            "skipped": self.skipped,
            "unreadable": self.unreadable,
            "redacted_inputs": self.redacted_inputs,
            "flips": [f.to_json() for f in self.sorted_flips()],
        }

    def sorted_flips(self) -> list[Flip]:
        return sorted(self.flips.values(), key=lambda f: (f.tool, f.before, f.after, f.after_rule or ""))


def outcome_of(decision: dict[str, Any]) -> str:
    """allow, deny, approval or error for a recorded decision document."""
    if decision.get("error") is not None:
        return "error"
    if decision.get("allow") is True:
        return "allow"
    return "approval" if decision.get("require_approval") else "deny"


def _has_redaction(value: Any) -> bool:
    if isinstance(value, str):
        return REDACTED in value
    if isinstance(value, dict):
        return any(_has_redaction(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_redaction(v) for v in value)
    return False


def input_from_rejection(record: dict[str, Any]) -> dict[str, Any]:
    """The tool_call input a rejection-log record stands for (see the module docstring)."""
    schema = record.get("schema")
    args = record.get("arguments")
    return {
        "version": 1,
        "phase": "tool_call",
        "provider": record.get("provider"),
        "model": record.get("model"),
        "agent": {"id": "", "namespace": "", "labels": {}},
        "session": {
            "id": record.get("session"),
            "source": record.get("session_source") or "derived",
            "calls_total": 0,
            "calls_by_tool": {},
        },
        "tool": {
            "name": record.get("tool"),
            "declared": True,
            "schema_hash": schema_hash(schema) if isinstance(schema, dict) else "",
        },
        "call": {"id": record.get("call_id"), "args": args if isinstance(args, dict) else {}, "args_hash": ""},
        "validation": {"valid": True, "errors": []},
        "replay": {"count": 0, "first_seen": None},
        "approval": {"status": "none", "id": None, "approved_by": None},
        "time": record.get("time"),
    }


def _recorded(where: str, record: Any) -> Recorded | None:
    """A Recorded for a decision-log or policy-decided rejection-log line, else None."""
    if not isinstance(record, dict):
        return None
    if record.get("kind") == DECISION_LOG_KIND and isinstance(record.get("input"), dict):
        found = record.get("decision")
        decision: dict[str, Any] = found if isinstance(found, dict) else {}
        document = record["input"]
        rule = decision.get("rule")
        named = rule if isinstance(rule, str) else None
        return Recorded(where, record.get("time"), document, outcome_of(decision), named, _has_redaction(document))
    if "verdict" in record and record.get("guard") in _POLICY_GUARDS and isinstance(record.get("tool"), str):
        outcome = "approval" if record.get("verdict") == "approval" else "deny"
        document = input_from_rejection(record)
        return Recorded(where, record.get("time"), document, outcome, None, _has_redaction(document))
    return None


def read_records(paths: Iterable[str], report: Report) -> Iterator[Recorded]:
    """Every recorded decision in `paths`; other lines are counted as skipped or unreadable."""
    for path in paths:
        with Path(path).open("rb") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    record = orjson.loads(line)
                except orjson.JSONDecodeError:
                    report.unreadable += 1
                    continue
                found = _recorded(f"{path}:{number}", record)
                if found is None:
                    report.skipped += 1
                else:
                    yield found


def _evaluate(engine: Engine, document: dict[str, Any]) -> tuple[str, str | None, list[str]]:
    """(outcome, rule, reasons) of the candidate for one input; engine errors are `error`."""
    try:
        engine.set_input(document)
        value = engine.eval_rule(DECISION)
        if value is UNDEFINED:
            return "deny", None, ["no policy decision (data.sidecar.decision is undefined)"]
        decision = decision_from_value(value)
    except MalformedDecision as exc:
        return "error", None, [str(exc)]
    except BaseException as exc:  # regorus panics are BaseExceptions
        if is_fatal(exc):
            raise
        return "error", None, [str(exc)]
    return decision.outcome, decision.rule, decision.reasons


def simulate(policy: str, paths: list[str]) -> Report:
    """Re-evaluate every recorded decision in `paths` with `policy`. Raises PolicyLoadError
    (the candidate does not load) and OSError (a log cannot be read)."""
    compiled = compile_bundle(read_bundle(policy))
    report = Report(policy, compiled.bundle.revision, list(paths))
    for recorded in read_records(paths, report):
        report.evaluated += 1
        report.redacted_inputs += recorded.redacted
        after, rule, reasons = _evaluate(compiled.engine, recorded.input)
        if after == recorded.outcome:
            continue
        tool = str((recorded.input.get("tool") or {}).get("name"))
        key = (tool, recorded.outcome, after, recorded.rule, rule)
        flip = report.flips.setdefault(key, Flip(tool, recorded.outcome, after, recorded.rule, rule))
        flip.count += 1
        if len(flip.examples) < MAX_EXAMPLES:
            call = recorded.input.get("call") or {}
            flip.examples.append(
                {
                    "where": recorded.where,
                    "time": recorded.time,
                    "session": (recorded.input.get("session") or {}).get("id"),
                    "call_id": call.get("id"),
                    "args": call.get("args"),
                    "reasons": reasons,
                }
            )
    return report


def render(report: Report) -> str:
    """The human-readable report."""
    lines = [
        f"replayed {report.evaluated} decision(s) from {len(report.files)} file(s) against {report.policy} "
        f"(revision {report.revision}): {report.flipped} flipped"
    ]
    for flip in report.sorted_flips():
        rules = f"rule {flip.before_rule or '?'} → {flip.after_rule or '?'}"
        lines.append(f"  {flip.direction:<16} {flip.tool}  ({rules}): {flip.count} call(s)")
        for example in flip.examples:
            args = orjson.dumps(example["args"]).decode()
            reason = "; ".join(example["reasons"]) or "(no reason given)"
            lines.append(f"      e.g. {example['time']} session {example['session']} {args}")
            lines.append(f"           now: {reason}")
    if report.skipped:
        lines.append(
            f"skipped {report.skipped} line(s) that are not policy decisions "
            "(lockdown rejections, replays, other events)"
        )
    if report.unreadable:
        lines.append(f"{report.unreadable} line(s) were not JSON")
    if report.redacted_inputs:
        lines.append(
            f"{report.redacted_inputs} input(s) had redacted values: a rule reading one may decide "
            "differently here than it did live"
        )
    return "\n".join(lines) + "\n"
