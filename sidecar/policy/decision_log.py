"""The decision log: one redacted JSON line per tool-call decision, with its full input.

It is what `sidecar policy replay` re-evaluates a candidate policy against. Lines go through
the rejection log's writer (`RejectionLog`: a background thread, size rotation to
file.1 … file.N, key and shape redaction, never blocking or raising in the caller), so the two
logs behave alike. Redaction replaces values (`[REDACTED]`) before they are written, and a
replayed decision sees the redacted value: a rule that reads a redacted argument may decide
differently on replay than it did live (`policy replay` says how many inputs had redactions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sidecar.config import DecisionLogSettings
from sidecar.telemetry.rejection_log import RejectionLog, utc_now

if TYPE_CHECKING:
    from sidecar.policy.engine import Decision

KIND = "policy_decision"


class DecisionLog:
    def __init__(self, settings: DecisionLogSettings, mode: str) -> None:
        assert settings.path is not None
        self.mode = mode
        self.writer = RejectionLog(
            settings.path, max_bytes=settings.max_bytes, backups=settings.backups, redact_keys=settings.redact_keys
        )

    @classmethod
    def from_settings(cls, settings: DecisionLogSettings, mode: str) -> DecisionLog | None:
        """None when no path is configured (the default: the log is opt-in)."""
        return cls(settings, mode) if settings.path is not None else None

    def record(self, document: dict[str, Any], decision: Decision, *, engine: str, revision: str | None) -> None:
        """Enqueue one line; never raises (a failing writer is counted in its health)."""
        session = document.get("session")
        tool = document.get("tool")
        call = document.get("call")
        self.writer.write(
            {
                "time": utc_now(),
                "kind": KIND,
                "session": session.get("id") if isinstance(session, dict) else None,
                "tool": tool.get("name") if isinstance(tool, dict) else None,
                "call_id": call.get("id") if isinstance(call, dict) else None,
                "engine": engine,
                "revision": revision,
                "mode": self.mode,
                "input": document,
                "decision": decision.to_dict(),
            }
        )

    def health(self) -> dict[str, Any]:
        return self.writer.health()

    def flush(self) -> bool:
        return self.writer.flush()

    def close(self) -> None:
        self.writer.close()
