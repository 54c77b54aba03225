"""Run `sidecar schemas …` through the real argument parser and capture what it prints."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from sidecar.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
Run = Callable[..., tuple[int, str, str]]


def fixture(name: str) -> str:
    return str(FIXTURES / name)


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """`run("lint", FILE)` -> (exit code, stdout, stderr); SIDECAR_* variables cleared."""
    import os

    for key in list(os.environ):
        if key.startswith("SIDECAR_"):
            monkeypatch.delenv(key)

    def _run(*argv: str) -> tuple[int, str, str]:
        code = main(["schemas", *argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return _run


def as_json(text: str) -> Any:
    return orjson.loads(text)
