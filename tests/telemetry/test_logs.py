from __future__ import annotations

import asyncio
import io
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider

from sidecar.telemetry.logs import (
    WRITER,
    JsonFormatter,
    LineWriter,
    configure_logging,
    log_event,
    log_event_at,
    nonblocking_twin,
    trace_ids,
)
from sidecar.telemetry.redact import redact_text


@pytest.fixture(autouse=True)
def _restore_sidecar_logger() -> Iterator[None]:
    """configure_logging changes process-wide state; leave it as other tests expect it."""
    logger = logging.getLogger("sidecar")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


class _Written(io.StringIO):
    """A stream whose value is read once the log writer has written every line handed to it."""

    def getvalue(self) -> str:
        assert WRITER.flush()
        return super().getvalue()


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    out = _Written()
    configure_logging("debug", stream=out)
    yield out


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines()]


def test_json_shape(stream: io.StringIO) -> None:
    log_event("startup", listen="127.0.0.1:8080", policies=3)
    log_event("verdict", level=logging.WARNING, tool="transfer", verdict="reject", time="x")
    first, second = _lines(stream)
    assert first["event"] == "startup" and first["level"] == "info"
    assert first["listen"] == "127.0.0.1:8080" and first["policies"] == 3
    assert str(first["time"]).endswith("Z")
    assert "trace_id" not in first and "message" not in first
    assert second["level"] == "warning" and second["field_time"] == "x"  # no clobbering


def test_plain_logging_is_json_and_redacted(stream: io.StringIO) -> None:
    logging.getLogger("sidecar.proxy").info("upstream said %s", "Bearer abcdefghijklmnopqrstu")
    try:
        raise ValueError("key sk-ant-api03-abcdefghijklmnopqrstuvwxyz")
    except ValueError:
        logging.getLogger("sidecar.proxy").exception("boom")
    info, error = _lines(stream)
    assert info["event"] == "log" and info["logger"] == "sidecar.proxy"
    assert info["message"] == "upstream said [REDACTED]"
    assert "sk-ant" not in str(error["exception"]) and "ValueError" in str(error["exception"])


def test_level_filtering() -> None:
    out = _Written()
    configure_logging("warning", stream=out)
    log_event("request", path="/v1/messages")
    log_event("policy_reload", level=logging.ERROR, ok=False)
    assert [line["event"] for line in _lines(out)] == ["policy_reload"]
    # reconfiguring replaces our handler instead of adding a second one
    handler = configure_logging("info", stream=out)
    ours = [h for h in logging.getLogger("sidecar").handlers if type(h) is type(handler)]
    assert ours == [handler]


def test_trace_ids_inside_span(stream: io.StringIO) -> None:
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("request") as span:
        log_event("request", path="/v1/messages")
        context = span.get_span_context()
    log_event("after")
    inside, outside = _lines(stream)
    assert inside["trace_id"] == format(context.trace_id, "032x")
    assert inside["span_id"] == format(context.span_id, "016x")
    assert len(str(inside["trace_id"])) == 32 and len(str(inside["span_id"])) == 16
    assert "trace_id" not in outside


def test_an_event_logged_later_carries_its_own_time_and_span(stream: io.StringIO) -> None:
    """log_event_at (the request line, written in a batch after the exchange ended): the
    line tells when and in which span the event happened, not when it was written."""
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("request") as span:
        at, trace = 1_700_000_000.25, trace_ids()
        context = span.get_span_context()
    log_event_at(at, trace, "request", status=200)  # outside the span, much later
    (line,) = _lines(stream)
    assert line["time"] == "2023-11-14T22:13:20.250Z"
    assert line["trace_id"] == format(context.trace_id, "032x")
    assert line["span_id"] == format(context.span_id, "016x")
    assert line["status"] == 200

    # Through the logging machinery (another handler beside ours), the same line.
    record_stream = io.StringIO()
    other = logging.StreamHandler(record_stream)
    other.setFormatter(JsonFormatter())
    logging.getLogger("sidecar").addHandler(other)
    try:
        log_event_at(at, trace, "request", status=200)
    finally:
        logging.getLogger("sidecar").removeHandler(other)
    assert orjson.loads(record_stream.getvalue()) == line


def test_secrets_never_logged(stream: io.StringIO) -> None:
    log_event(
        "request",
        headers={
            "authorization": "Bearer abcdefghijklmnopqrst",
            "x-api-key": "plain-key-without-shape",
            "X-Api-Key": "another",
            "cookie": "session=abc",
            "proxy-authorization": "Basic Zm9vOmJhcg==",
            "content-type": "application/json",
        },
        api_key="k1",
        body={"messages": [{"content": "my key is sk-proj-abcdefghijklmnopqrstuvwx"}]},
    )
    text = stream.getvalue()
    for secret in (
        "abcdefghijklmnopqrst",
        "plain-key-without-shape",
        "another",
        "session=abc",
        "Zm9vOmJhcg==",
        "k1",
        "sk-proj",
    ):
        assert secret not in text
    record = _lines(stream)[0]
    assert record["headers"]["content-type"] == "application/json"  # type: ignore[index]


def test_provider_headers_never_reach_a_log_line(stream: io.StringIO) -> None:
    headers = {
        "authorization": "Bearer sk-ant-secret",
        "x-api-key": "sk-openai-secret",
        "openai-organization": "org-123",
        "openai-project": "proj_456",
        "Proxy-Authorization": "Basic x",
        "Cookie": "s=1",
        "Set-Cookie": "t=2",
        "anthropic-version": "2023-06-01",
    }
    log_event("request", headers=headers)
    text = stream.getvalue()
    for secret in ("sk-ant-secret", "sk-openai-secret", "org-123", "proj_456", "Basic x", "s=1", "t=2"):
        assert secret not in text
    assert _lines(stream)[0]["headers"]["anthropic-version"] == "2023-06-01"


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("redis://:REDISPASS01@redis:6379/0", "redis://[REDACTED]@redis:6379/0"),  # a password, no user
        ("postgres://app:PGPASS0123@db/x", "postgres://[REDACTED]@db/x"),
        ('{"password": "RAWPASS01", "user": 1', '{"password": "[REDACTED]", "user": 1'),  # unparseable JSON
        ("password=RAWPASS01&next=/", "password=[REDACTED]&next=/"),
        ("api_key='KEY0123456'", "api_key='[REDACTED]'"),
        ("Authorization: Bearer BEARER0123456789", "Authorization: [REDACTED]"),
        ("max_tokens: 100 and the tokenizer = fast", "max_tokens: 100 and the tokenizer = fast"),  # no secret
    ],
)
def test_raw_text_is_redacted_by_shape(text: str, kept: str) -> None:
    assert redact_text(text) == kept


def _made_records(monkeypatch: pytest.MonkeyPatch) -> list[logging.LogRecord]:
    """Every LogRecord made from now on (the handler chain's path makes one, the direct one
    not), with our handler the `sidecar` logger's only one (pytest's capture handlers go)."""
    logger = logging.getLogger("sidecar")
    monkeypatch.setattr(logger, "handlers", [h for h in logger.handlers if type(h).__name__ == "_SidecarHandler"])
    made: list[logging.LogRecord] = []
    real = logging.Logger.makeRecord

    def counting(self: logging.Logger, *args: object, **kwargs: object) -> logging.LogRecord:
        record = real(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append(record)
        return record

    monkeypatch.setattr(logging.Logger, "makeRecord", counting)
    return made


@pytest.mark.parametrize("name", ["sidecar", "sidecar.filters.policy"])
def test_an_event_written_directly_is_the_line_the_handler_chain_writes(
    stream: io.StringIO, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """log_event skips the LogRecord when our handler is the only one; the line is the same,
    redaction included."""
    made = _made_records(monkeypatch)
    fields = {"session": "s1", "status": 200, "stream": False, "error": None, "token": "hunter22", "time": "t"}
    target = logging.getLogger(name)
    log_event("request", level=logging.WARNING, log=target, **fields)
    assert made == []
    monkeypatch.setattr(logging.getLogger("sidecar"), "filters", [lambda record: True])  # the chain decides
    log_event("request", level=logging.WARNING, log=target, **fields)
    assert len(made) == 1
    direct, chained = _lines(stream)
    assert str(direct.pop("time")).endswith("Z") and str(chained.pop("time")).endswith("Z")
    assert direct == chained
    assert direct["logger"] == name and direct["level"] == "warning" and direct["token"] == "[REDACTED]"
    assert direct["field_time"] == "t"


def test_another_handler_or_a_level_sends_events_through_the_chain(
    stream: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _made_records(monkeypatch)
    extra = logging.Handler()
    heard: list[logging.LogRecord] = []
    extra.emit = heard.append  # type: ignore[method-assign]
    logger = logging.getLogger("sidecar")
    logger.addHandler(extra)
    log_event("request", status=200)
    assert len(made) == 1 and [r.event for r in heard] == ["request"]  # type: ignore[attr-defined]
    logger.removeHandler(extra)
    ours = logger.handlers[0]
    ours.setLevel(logging.ERROR)
    log_event("request", status=200)  # below our handler's level: not written
    ours.setLevel(logging.NOTSET)
    log_event("request", status=201)
    assert [line["status"] for line in _lines(stream)] == [200, 201]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_line_time_is_the_time_iso_utc_writes(seed: int) -> None:
    """The log line's time keeps its seconds' text between lines; it must still be exactly
    what `iso_utc(..., "milliseconds")` writes, roundings at a second's edge included."""
    import random

    from sidecar.telemetry.logs import _time
    from sidecar.timefmt import iso_utc

    rng = random.Random(seed)
    edges = [1700000000.9999996, 1700000000.0004999, 1700000000.0005, 1700000000.999, 1700000001.0, 0.0]
    times = [1.7e9 + rng.random() * 1e6 for _ in range(20_000)] + edges
    rng.shuffle(times)
    assert [t for t in times if _time(t) != iso_utc(t, "milliseconds")] == []


class _BlockedStream(io.StringIO):
    """A stream whose writes wait until `release` is set: a full pipe, a stalled collector."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.writing = threading.Event()

    def write(self, text: str) -> int:
        self.writing.set()
        assert self.release.wait(10)
        return super().write(text)


def test_a_blocked_stream_does_not_block_the_caller() -> None:
    blocked = _BlockedStream()
    configure_logging("info", stream=blocked)
    log_event("request", status=200)
    assert blocked.writing.wait(5)  # the writer thread is inside write(), stuck
    log_event("request", status=201)  # and the caller goes on all the same
    log_event("request", status=202)
    assert blocked.getvalue() == ""
    blocked.release.set()
    assert WRITER.flush()
    assert [orjson.loads(line)["status"] for line in blocked.getvalue().splitlines()] == [200, 201, 202]


def test_lines_keep_their_order_across_streams_and_threads() -> None:
    writer = LineWriter()
    first, second = io.StringIO(), io.StringIO()

    def put(prefix: str) -> None:
        for i in range(2000):
            writer.put(first if i % 3 else second, f"{prefix}{i}\n")

    threads = [threading.Thread(target=put, args=(p,)) for p in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert writer.flush()
    for prefix in "ab":
        for stream, keep in ((first, lambda i: i % 3), (second, lambda i: not i % 3)):
            mine = [line for line in stream.getvalue().splitlines() if line.startswith(prefix)]
            assert mine == [f"{prefix}{i}" for i in range(2000) if keep(i)]


def test_past_the_bound_the_caller_waits_and_no_line_is_lost() -> None:
    writer = LineWriter(max_pending=100)
    blocked = _BlockedStream()
    writer.put(blocked, "x" * 10 + "\n")
    assert blocked.writing.wait(5)  # taken by the writer: pending is empty again
    done = threading.Event()

    def fill() -> None:
        for i in range(50):  # 50 lines of 11 characters: far past 100 pending
            writer.put(blocked, f"{i:010d}\n")
        done.set()

    filler = threading.Thread(target=fill)
    filler.start()
    assert not done.wait(0.3)  # waits for room while the stream is stuck
    blocked.release.set()
    filler.join(10)
    assert done.is_set() and writer.flush()
    assert blocked.getvalue().splitlines() == ["x" * 10, *(f"{i:010d}" for i in range(50))]


def test_a_failing_stream_loses_its_lines_not_the_writer() -> None:
    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError

    writer, good = LineWriter(), io.StringIO()
    writer.put(Broken(), "lost\n")
    writer.put(good, "kept\n")
    assert writer.flush()
    assert good.getvalue() == "kept\n"


def test_every_line_is_written_before_the_process_exits() -> None:
    script = (
        "from sidecar.telemetry.logs import configure_logging, log_event\n"
        "configure_logging('info')\n"
        "for i in range(3000):\n"
        "    log_event('request', n=i)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60, check=True)
    assert [orjson.loads(line)["n"] for line in done.stderr.splitlines()] == list(range(3000))


def test_without_a_thread_to_write_the_line_is_written_by_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """At interpreter shutdown no thread can start: the line is written on the spot."""

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    writer, out = LineWriter(), io.StringIO()
    writer.put(out, "late\n")
    assert out.getvalue() == "late\n"


def _pipe() -> tuple[int, IO[str]]:
    read_end, write_end = os.pipe()
    return read_end, os.fdopen(write_end, "w", encoding="utf-8")


def _read_all(fd: int, out: list[bytes]) -> None:
    while chunk := os.read(fd, 65536):
        out.append(chunk)


def test_a_pipe_that_is_read_gets_each_line_on_the_spot() -> None:
    """To a pipe, lines logged off an event loop are written by the caller through a
    non-blocking twin descriptor: no thread is needed while the reader keeps up."""
    read_end, stream = _pipe()
    got: list[bytes] = []
    reader = threading.Thread(target=_read_all, args=(read_end, got))
    reader.start()
    writer = LineWriter()
    for i in range(200):
        writer.put(stream, f"line {i} é\n")
    assert writer._thread is None  # every line went out on the spot
    assert writer.flush()
    os.close(writer._twin or -1)
    stream.close()
    reader.join(10)
    assert b"".join(got).decode().splitlines() == [f"line {i} é" for i in range(200)]


def test_a_full_pipe_never_blocks_the_caller_and_loses_nothing() -> None:
    """Nobody reads: the pipe fills (64 KiB), the caller goes on, the rest waits for the thread
    (which blocks on the pipe, not the caller); once read, every line is there, in order."""
    read_end, stream = _pipe()
    writer = LineWriter()
    lines = [f"{i:06d} " + "x" * 300 + "\n" for i in range(2000)]  # ~600 KB: ten pipes full
    done = threading.Event()

    def log_all() -> None:
        for line in lines:
            writer.put(stream, line)
        done.set()

    threading.Thread(target=log_all, daemon=True).start()
    assert done.wait(30), "the caller blocked on a full pipe"
    assert writer._thread is not None  # the backlog went to the thread
    got: list[bytes] = []
    reader = threading.Thread(target=_read_all, args=(read_end, got))
    reader.start()
    assert writer.flush(30)
    for _ in range(3):  # and lines after the backlog go out on the spot again, after it
        writer.put(stream, "after\n")
    assert writer.flush()
    os.close(writer._twin or -1)
    stream.close()
    reader.join(10)
    assert b"".join(got).decode() == "".join(lines) + "after\n" * 3


def test_only_pipes_and_terminals_get_a_non_blocking_twin(tmp_path: Path) -> None:
    with open(tmp_path / "log.txt", "w") as regular:
        assert nonblocking_twin(regular) is None  # descriptions of a file keep their own offsets
    assert nonblocking_twin(io.StringIO()) is None
    read_end, stream = _pipe()
    twin = nonblocking_twin(stream)
    assert twin is not None and os.get_blocking(twin) is False
    assert os.get_blocking(stream.fileno()) is True  # the stream's own descriptor is left blocking
    for fd in (twin, read_end):
        os.close(fd)
    stream.close()


class CountingTwinWrites:
    """Counts the `os.write` calls made to one descriptor (the writer's twin)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[int] = []
        self.fd: int | None = None
        real = os.write

        def write(fd: int, data: bytes) -> int:
            if fd == self.fd:
                self.calls.append(len(data))
            return real(fd, data)

        monkeypatch.setattr(os, "write", write)


async def test_on_an_event_loop_lines_to_a_pipe_are_written_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """A write to a pipe wakes its reader: lines logged on a loop are held and written with one
    `os.write` within linger_s, in order, by the loop itself (no thread)."""
    read_end, stream = _pipe()
    writes = CountingTwinWrites(monkeypatch)
    writer = LineWriter(linger_s=0.05)
    writer.put(stream, "line 0\n")
    writes.fd = writer._twin
    for i in range(1, 100):
        writer.put(stream, f"line {i} é\n")
    assert writes.calls == []  # held for the loop's write
    await asyncio.sleep(0.2)
    assert len(writes.calls) == 1 and writer._thread is None
    got = os.read(read_end, 65536).decode().splitlines()
    assert got == ["line 0"] + [f"line {i} é" for i in range(1, 100)]
    assert writer.flush(1)  # nothing left: every line put is written
    os.close(writer._twin or -1)
    stream.close()
    os.close(read_end)


async def test_held_lines_go_first_and_a_flush_writes_them_at_once() -> None:
    """A line logged off the loop is written after those the loop holds; `flush` (from another
    thread, as at shutdown) writes held lines without waiting for the loop's timer; past
    max_held bytes, the held lines and the new one are written at once."""
    read_end, stream = _pipe()
    writer = LineWriter(linger_s=60.0, max_held=1000)  # the timer never fires in this test
    writer.put(stream, "held 1\n")
    writer.put(stream, "held 2\n")
    other = threading.Thread(target=writer.put, args=(stream, "from a thread\n"))
    other.start()
    other.join(5)
    assert os.read(read_end, 65536) == b"held 1\nheld 2\nfrom a thread\n"
    writer.put(stream, "held 3\n")
    assert await asyncio.to_thread(writer.flush, 5)
    assert os.read(read_end, 65536) == b"held 3\n"
    writer.put(stream, "x" * 600 + "\n")
    writer.put(stream, "y" * 600 + "\n")  # 1,202 bytes would pass max_held: both go now
    assert os.read(read_end, 65536) == b"x" * 600 + b"\n" + b"y" * 600 + b"\n"
    os.close(writer._twin or -1)
    stream.close()
    os.close(read_end)


def test_lines_held_on_a_loop_that_stopped_are_written_by_the_next_line_or_flush() -> None:
    read_end, stream = _pipe()
    writer = LineWriter(linger_s=60.0)

    async def log() -> None:
        writer.put(stream, "on the loop\n")

    asyncio.run(log())  # the loop closes with the line held
    writer.put(stream, "after the loop\n")  # off any loop: written at once, after the held one
    assert os.read(read_end, 65536) == b"on the loop\nafter the loop\n"
    asyncio.run(log())
    assert writer.flush(5)
    assert os.read(read_end, 65536) == b"on the loop\n"
    os.close(writer._twin or -1)
    stream.close()
    os.close(read_end)


async def test_a_full_pipe_takes_held_lines_through_the_thread_in_order() -> None:
    read_end, stream = _pipe()
    writer = LineWriter(linger_s=0.01)
    lines = [f"{i:06d} " + "x" * 300 + "\n" for i in range(1000)]  # ~300 KB: the pipe fills
    for line in lines:
        writer.put(stream, line)
    await asyncio.sleep(0.1)
    got: list[bytes] = []
    reader = threading.Thread(target=_read_all, args=(read_end, got))
    reader.start()
    assert await asyncio.to_thread(writer.flush, 30)
    assert writer._thread is not None  # the backlog went to the thread
    os.close(writer._twin or -1)
    stream.close()
    reader.join(10)
    assert b"".join(got).decode() == "".join(lines)
