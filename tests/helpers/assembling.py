"""What the stream assembler tests compare: everything an assembler decided and assembled, and
how many events it read in full (`apply`), so a faster way of reading a stream (learned shapes,
runs taken at once) can be shown to decide exactly what reading every event in full decides."""

from __future__ import annotations

from typing import Any

from sidecar.dialects.base import StreamAssembler
from sidecar.dialects.sse import SSEEvent


def count_applied(assembler: StreamAssembler) -> list[int]:
    """Counts the events the assembler reads in full (`apply`), in the one-item list returned."""
    applied = [0]
    apply = assembler.apply

    def counted(event: SSEEvent) -> tuple[int | None, bool]:
        applied[0] += 1
        return apply(event)

    assembler.apply = counted  # type: ignore[method-assign]
    return applied


def outcome(answers: list[bool] | list[bytes], assembler: StreamAssembler) -> Any:
    """`answers` (what the caller saw: each event's forward/hold answer, or the bytes forwarded)
    with all the assembler decided and assembled: the refusal, the text the agent was sent, the
    error, the cut, whether orjson read every event, the held events, each item's events, the
    reply's items, calls, envelope and completeness."""
    reply = assembler.reply()
    calls = [
        (c.name, c.id, c.arguments, c.raw_arguments, c.parse_error, c.truncated) for c in reply.calls if c is not None
    ]
    return (
        answers,
        assembler.violation,
        assembler.tail,  # what the agent was sent of the text (forwarded_text, role_sent)
        assembler.error is not None,
        assembler.cut,
        assembler.read_by_orjson,
        [event.raw for event in assembler.held],
        [[event.raw for event in item.raw_events] for item in reply.items],
        [(item.kind, item.wire) for item in reply.items],
        calls,
        reply.envelope,
        reply.complete,
    )
