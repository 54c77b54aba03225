"""Settings: file < environment < flags, and a bad file fails at start-up naming the key."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from sidecar.config import ConfigError, load_settings
from tests.helpers.ports import free_port


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sidecar.yaml"
    path.write_text(text)
    return path


def test_defaults_are_the_public_apis_on_loopback():
    settings = load_settings(environ={})
    assert settings.listen == "127.0.0.1:8080" and settings.admin_listen == "127.0.0.1:9477"
    assert settings.anthropic_upstream == "https://api.anthropic.com"
    assert settings.openai_upstream == "https://api.openai.com"
    assert settings.max_body_bytes == 32 * 1024 * 1024
    assert settings.enforcement.mode == "enforce" and settings.enforcement.max_repair_rounds == 2


def test_flags_beat_environment_beat_file(tmp_path):
    config = _write(
        tmp_path,
        "listen: 127.0.0.1:1000\nadmin_listen: 127.0.0.1:2000\n"
        "openai_upstream: http://file.example\npolicy:\n  engine: opa\n",
    )
    environ = {
        "SIDECAR_ADMIN_LISTEN": "127.0.0.1:3000",
        "SIDECAR_OPENAI_UPSTREAM": "http://env.example",
        "SIDECAR_POLICY__ON_ERROR": "allow",
        "SIDECAR_ENFORCEMENT__MAX_REPAIR_ROUNDS": "1",
    }
    settings = load_settings(config, {"openai_upstream": "http://flag.example", "listen": None}, environ)
    assert settings.listen == "127.0.0.1:1000"  # file (flag not given)
    assert settings.admin_listen == "127.0.0.1:3000"  # environment over file
    assert settings.openai_upstream == "http://flag.example"  # flag over environment
    assert settings.policy.engine == "opa" and settings.policy.on_error == "allow"  # nested from both
    assert settings.enforcement.max_repair_rounds == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("enforcement:\n  mode: strictest\n", "enforcement.mode"),
        ("listen: localhost\n", "listen: expected HOST:PORT"),
        ("anthropic_upstream: ftp://x\n", "anthropic_upstream: expected an http(s) URL"),
        ("max_body_bytes: -5\n", "max_body_bytes"),
        ("no_such_setting: 1\n", "no_such_setting: unknown key"),
        ("tools:\n  send:\n    side_efects: true\n", "tools.send.side_efects: unknown key"),
        ("listen: [unclosed\n", "not valid YAML"),
        ("- a list\n", "the top level must be a mapping"),
    ],
)
def test_bad_file_names_the_key_and_the_problem(tmp_path, text, expected):
    with pytest.raises(ConfigError) as error:
        load_settings(_write(tmp_path, text), environ={})
    assert expected in str(error.value)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(tmp_path / "absent.yaml", environ={})


def test_sidecar_run_refuses_a_bad_config_and_starts_on_a_good_one(tmp_path):
    bad = _write(tmp_path, "policy:\n  engine: rego-ish\n")
    result = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "run", "--config", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "policy.engine" in result.stderr

    proxy, admin = free_port(), free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sidecar.cli",
            "run",
            "--listen",
            f"127.0.0.1:{proxy}",
            "--admin-listen",
            f"127.0.0.1:{admin}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin}/healthz", timeout=1) as response:
                    assert response.status == 200
                    break
            except OSError:
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                assert time.monotonic() < deadline, "sidecar run did not come up"
                time.sleep(0.1)
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert process.returncode in (0, -15)
