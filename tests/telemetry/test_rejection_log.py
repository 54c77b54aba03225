from __future__ import annotations

import asyncio
import errno
import io
import os
import threading
from pathlib import Path

import orjson
import pytest

from sidecar.config import RejectionLogSettings
from sidecar.model import FieldError, Verdict, VerdictKind
from sidecar.telemetry import rejection_log
from sidecar.telemetry.metrics import Metrics
from sidecar.telemetry.redact import REDACTED, redact, redact_text
from sidecar.telemetry.rejection_log import RejectionLog, rejection_record

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1234567890abcdef\nQWERTY==\n-----END RSA PRIVATE KEY-----"


# ------------------------------------------------------------------ redaction


@pytest.mark.parametrize(
    "secret",
    [
        "Bearer abcdefghijklmnop1234567890",
        "bearer abc.def-ghi_jkl~mno+pq/rs=",
        "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx1234",
        "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz-0123456789",
        JWT,
        PEM,
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    ],
)
def test_credential_shapes_redacted_anywhere(secret: str) -> None:
    assert redact_text(secret) == REDACTED
    embedded = f"run this: curl -H 'X: {secret}' https://example.com/path and done"
    out = redact_text(embedded)
    assert secret not in out and REDACTED in out
    assert out.startswith("run this: curl") and out.endswith("and done")
    nested = redact({"cmd": {"args": ["--header", embedded], "n": 3}})
    assert secret not in orjson.dumps(nested).decode()
    assert nested["cmd"]["n"] == 3


def test_truncated_pem_redacted_to_the_end() -> None:
    text = "key: -----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC"
    assert redact_text(text) == "key: " + REDACTED


def test_url_credentials_redacted() -> None:
    assert redact_text("postgres://admin:hunter2@db:5432/x") == f"postgres://{REDACTED}@db:5432/x"


def test_harmless_text_untouched() -> None:
    for text in ("task-manager-1234567890abcdef", "skip-this", "the bearer of bad news", "eyJ"):
        assert redact_text(text) == text


def test_key_patterns_nested_and_case_insensitive() -> None:
    value = {
        "user": "alice",
        "Password": "hunter2",
        "config": {"DB_SECRET": {"nested": "x"}, "items": [{"apiKey": "abc"}, {"x-api-key": "k"}]},
        "headers": {"Authorization": "Basic dXNlcjpwYXNz", "accept": "json"},
        "access_token": 12345,
        "max_tokens": 1024,
        "credentials_file": None,
    }
    out = redact(value)
    assert out["user"] == "alice"
    assert out["Password"] == REDACTED
    assert out["config"]["DB_SECRET"] == REDACTED
    assert out["config"]["items"] == [{"apiKey": REDACTED}, {"x-api-key": REDACTED}]
    assert out["headers"] == {"Authorization": REDACTED, "accept": "json"}
    assert out["access_token"] == REDACTED
    assert out["max_tokens"] == 1024  # a token count, not a token
    assert out["credentials_file"] is None
    assert value["Password"] == "hunter2"  # input not mutated
    assert redact({"pin": "1234"}, ["PIN"]) == {"pin": REDACTED}


def test_deep_nesting_does_not_recurse_forever() -> None:
    value: object = "x"
    for _ in range(5000):
        value = [value]
    redact(value)


# ------------------------------------------------------------------ records


def _record(i: int = 0, **extra: object) -> dict[str, object]:
    return rejection_record(
        session="s1",
        provider="anthropic",
        model="claude",
        tool="transfer",
        call_id=f"toolu_{i}",
        arguments={"amount": "10", "password": "hunter2", "note": f"n{i}"},
        errors=[FieldError("amount", 'expected integer, got string "10"', "integer", "type")],
        verdict=VerdictKind.REJECT,
        action="repaired",
        repair_round=1,
        **extra,
    )


def test_record_shape_and_redaction(tmp_path: Path) -> None:
    path = tmp_path / "rej.log"
    log = RejectionLog(str(path))
    verdict = Verdict.reject(
        "invalid_arguments",
        [FieldError("password", 'expected length >= 12, got "hunter2"', "string", "range")],
    )
    assert log.log_rejection(
        session="s",
        provider="openai",
        model="gpt",
        tool="login",
        call_id="c1",
        arguments={"user": "bob", "password": "hunter2", "token": JWT},
        verdict=verdict,
        action="blocked",
        repair_round=2,
        schema={"type": "object", "properties": {"password": {"type": "string"}}},
        headers={"authorization": "Bearer abcdefghijklmnop"},
    )
    log.close()
    line = path.read_text()
    assert "hunter2" not in line and JWT not in line and "abcdefghijklmnop" not in line
    record = orjson.loads(line)
    assert record["time"].endswith("Z") and "T" in record["time"]
    assert record["verdict"] == "reject" and record["status"] == "invalid_arguments"
    assert record["errors"] == [
        {
            "field": "password",
            "problem": 'expected length >= 12, got "[REDACTED]"',
            "expected": "string",
            "kind": "range",
        }
    ]
    assert record["arguments"] == {"user": "bob", "password": REDACTED, "token": REDACTED}
    assert record["schema"]["properties"] == {"password": {"type": "string"}}  # names are kept
    assert record["headers"] == {"authorization": REDACTED}
    for key in ("session", "provider", "model", "tool", "call_id", "action", "repair_round"):
        assert key in record
    assert next(iter(record)) == "time"


def test_record_snapshot_taken_at_write(tmp_path: Path) -> None:
    log = RejectionLog(str(tmp_path / "r.log"))
    record = _record()
    log.write(record)
    record["tool"] = "mutated"
    log.close()
    assert orjson.loads((tmp_path / "r.log").read_bytes())["tool"] == "transfer"


# ------------------------------------------------------------------ rotation and concurrency


def _read_all_lines(directory: Path, max_bytes: int) -> set[tuple[str, int]]:
    """Every (writer, seq) in the log and its backups; a torn line fails to parse."""
    files = sorted(directory.iterdir())
    assert len(files) > 10  # it really rotated
    seen: set[tuple[str, int]] = set()
    for file in files:
        data = file.read_bytes()
        assert len(data) <= max_bytes and data.endswith(b"\n")
        for line in data.splitlines():
            record = orjson.loads(line)
            key = (record["writer"], record["seq"])
            assert key not in seen
            seen.add(key)
    return seen


async def test_rotation_under_concurrency_loses_and_tears_nothing(tmp_path: Path) -> None:
    path = tmp_path / "rej.log"
    log = RejectionLog(str(path), max_bytes=16384, backups=500, queue_size=100_000)
    threads_n, per_thread, tasks_n, per_task = 6, 300, 20, 60

    def worker(t: int) -> None:
        for i in range(per_thread):
            assert log.write(_record(i, writer=f"thread-{t}", seq=i, pad="x" * (i % 50)))

    async def task(t: int) -> None:
        for i in range(per_task):
            assert log.write(_record(i, writer=f"task-{t}", seq=i))
            if i % 10 == 0:
                await asyncio.sleep(0)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
    for thread in threads:
        thread.start()
    await asyncio.gather(*(task(t) for t in range(tasks_n)))
    for thread in threads:
        thread.join()
    await log.aclose()

    seen = _read_all_lines(tmp_path, max_bytes=16384)
    assert len(seen) == threads_n * per_thread + tasks_n * per_task
    health = log.health()
    assert health["ok"] and health["written"] == len(seen) and health["dropped"] == 0


def test_rotation_keeps_only_n_backups(tmp_path: Path) -> None:
    path = tmp_path / "r.log"
    log = RejectionLog(str(path), max_bytes=1024, backups=2)
    for i in range(100):
        log.write(_record(i))
    log.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.log", "r.log.1", "r.log.2"]
    last = orjson.loads(path.read_bytes().splitlines()[-1])
    assert last["call_id"] == "toolu_99"


def test_zero_backups_truncates(tmp_path: Path) -> None:
    path = tmp_path / "r.log"
    log = RejectionLog(str(path), max_bytes=1024, backups=0)
    for i in range(50):
        log.write(_record(i))
    log.close()
    assert [p.name for p in tmp_path.iterdir()] == ["r.log"]
    assert path.stat().st_size <= 1024


def test_stdout_mode(capsys: pytest.CaptureFixture[str]) -> None:
    log = RejectionLog("-")
    log.write(_record(1))
    log.write(_record(2))
    log.close()
    lines = capsys.readouterr().out.splitlines()
    assert [orjson.loads(line)["call_id"] for line in lines] == ["toolu_1", "toolu_2"]


def test_explicit_stream() -> None:
    stream = io.StringIO()
    log = RejectionLog("-", stream=stream)
    log.write(_record(1))
    assert log.flush()
    assert orjson.loads(stream.getvalue())["call_id"] == "toolu_1"
    log.close()


def test_from_settings_wires_metrics(tmp_path: Path) -> None:
    metrics = Metrics()
    settings = RejectionLogSettings(path=str(tmp_path), max_bytes=2048, backups=1)
    log = RejectionLog.from_settings(settings, metrics)  # a directory: unwritable
    log.write(_record())
    log.close()
    assert b"sidecar_rejection_log_errors_total 2.0" in metrics.render()[0]


# ------------------------------------------------------------------ failures


def test_directory_path_is_reported_not_raised(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    log = RejectionLog(str(tmp_path), on_error=errors.append)
    assert log.health()["ok"] is False
    assert log.write(_record())  # accepted into the queue, fails in the writer
    log.flush()
    health = log.health()
    assert health["ok"] is False and "IsADirectoryError" in health["error"]
    assert health["written"] == 0 and log.errors == 2 and len(errors) == 2
    log.close()


def test_unwritable_even_for_root() -> None:
    log = RejectionLog("/proc/sidecar-rejections.log")  # procfs refuses new files to anyone
    log.write(_record())
    log.close()
    health = log.health()
    assert health["ok"] is False and health["error"] and log.errors == 2


def test_unwritable_file_recovers(tmp_path: Path) -> None:
    target = tmp_path / "sub"
    target.write_text("a file where a directory is expected")
    log = RejectionLog(str(target / "rej.log"))
    log.write(_record(1))
    log.flush()
    assert not log.health()["ok"]
    target.unlink()  # the operator fixes it: next line opens the file
    log.write(_record(2))
    log.close()
    assert log.health() == {"ok": True, "error": None, "written": 1, "dropped": 0, "errors": 2, "queued": 0}
    assert orjson.loads((target / "rej.log").read_bytes())["call_id"] == "toolu_2"


def test_enospc_counted_and_no_torn_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.log"
    metrics = Metrics()
    log = RejectionLog(str(path), on_error=metrics.rejection_log_error)
    log.write(_record(0))
    log.flush()
    real_write = os.write

    def full_disk(fd: int, data: bytes) -> int:
        real_write(fd, data[:10])  # half a line reaches the disk, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rejection_log, "_write", full_disk)
    for i in range(1, 4):
        assert log.write(_record(i))
    log.flush()
    health = log.health()
    assert health["ok"] is False and "No space left" in health["error"]
    assert log.errors == 3 and health["written"] == 1
    assert b"sidecar_rejection_log_errors_total 3.0" in metrics.render()[0]
    monkeypatch.setattr(rejection_log, "_write", real_write)
    log.write(_record(4))
    log.close()
    lines = path.read_bytes().splitlines()
    assert [orjson.loads(line)["call_id"] for line in lines] == ["toolu_0", "toolu_4"]
    assert log.health()["ok"] is True


def test_queue_full_drops_and_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = threading.Event()
    real_write = os.write

    def slow(fd: int, data: bytes) -> int:
        gate.wait(5)
        return real_write(fd, data)

    monkeypatch.setattr(rejection_log, "_write", slow)
    drops: list[int] = []
    log = RejectionLog(str(tmp_path / "r.log"), queue_size=5, on_drop=lambda: drops.append(1))
    results = [log.write(_record(i)) for i in range(20)]
    gate.set()
    log.close()
    health = log.health()
    assert health["dropped"] == results.count(False) == len(drops)
    assert health["dropped"] >= 14
    assert health["written"] + health["dropped"] == 20


def test_unserialisable_and_bad_records_never_raise(tmp_path: Path) -> None:
    log = RejectionLog(str(tmp_path / "r.log"))
    assert log.write({"tool": "x", "odd": {1, 2}, "obj": object()})  # default=str
    assert log.log_rejection(tool="x") is False  # missing required fields: counted
    log.close()
    assert log.errors == 1
    assert log.write(_record()) is False  # after close: dropped
    assert log.dropped == 1


async def test_write_does_not_block_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = threading.Event()
    real_write = os.write
    monkeypatch.setattr(rejection_log, "_write", lambda fd, data: (gate.wait(5), real_write(fd, data))[1])
    log = RejectionLog(str(tmp_path / "r.log"))
    # Every write returns while the file write is stuck: the lines wait in the queue, none was
    # written by the caller (a write done inline would have waited for the gate).
    assert all(log.write(_record(i)) for i in range(50))
    assert log.health()["written"] == 0
    gate.set()
    assert await log.aflush()
    await log.aclose()
    assert log.health()["written"] == 50
