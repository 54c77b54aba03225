"""Settings: defaults < file < environment < flags; every bad value fails start-up naming its source and key."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from sidecar.app import start
from sidecar.config import ConfigError, Settings, load_settings
from sidecar.startup import PortBindError, redacted_settings, startup_fields
from sidecar.telemetry.redact import DEFAULT_KEY_PATTERNS, redact
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
        ("tools:\n  send:\n    side_efects: true\n", "tools.send.side_efects: unknown key; did you mean side_effects?"),
        ("polcy:\n  engine: opa\n", "polcy: unknown key; did you mean policy?"),
        ("state:\n  backnd: redis\n", "state.backnd: unknown key; did you mean backend?"),
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
    env = {**os.environ, "SIDECAR_ADMIN_TOKEN": "123456", "SIDECAR_STATE__REDIS_URL": "redis://:hunter2@r:6379/0"}
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
            "--log-level",
            "debug",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
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
    assert process.stderr is not None
    logged = [json.loads(line) for line in process.stderr.read().decode().splitlines() if line.startswith("{")]
    [startup] = [line for line in logged if line["event"] == "startup"]
    assert startup["proxy"] == f"http://127.0.0.1:{proxy}" and startup["admin"] == f"http://127.0.0.1:{admin}"
    assert startup["policy"] == "built-in" and startup["state_backend"] == "memory"
    assert startup["enforcement_mode"] == "enforce" and startup["upstreams"]["openai"] == "https://api.openai.com"
    assert startup["settings"]["telemetry"]["log_level"] == "debug"  # --log-level reached the settings
    assert startup["admin_auth"] == "token configured"
    assert "123456" not in json.dumps(startup) and "hunter2" not in json.dumps(startup)


def test_sidecar_run_names_the_port_it_cannot_bind():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = f"127.0.0.1:{taken.getsockname()[1]}"
        result = subprocess.run(
            [sys.executable, "-m", "sidecar.cli", "run", "--listen", "127.0.0.1:0", "--admin-listen", busy],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert f"sidecar: cannot start: cannot bind the admin port {busy}: address in use" in result.stderr
    assert "Traceback" not in result.stderr


# -- environment: strings unless the type says otherwise ------------------------------------


@pytest.mark.parametrize("raw", ["123456", "null", "true", "0x1F", "[1, 2]", "~"])
def test_a_string_setting_from_the_environment_is_the_string_given(raw):
    assert load_settings(environ={"SIDECAR_ADMIN_TOKEN": raw}).admin_token == raw


def test_typed_settings_from_the_environment_are_converted_by_their_type():
    settings = load_settings(
        environ={
            "SIDECAR_ENFORCEMENT__MAX_REPAIR_ROUNDS": "0",
            "SIDECAR_LOCKDOWN__ASSERT_FORMATS": "false",
            "SIDECAR_STATE__LEDGER_TTL_S": "60.5",
            "SIDECAR_POLICY__ENGINE": "opa",
        }
    )
    assert settings.enforcement.max_repair_rounds == 0
    assert settings.lockdown.assert_formats is False
    assert settings.state.ledger_ttl_s == 60.5
    assert settings.policy.engine == "opa"


def test_lists_and_mappings_from_the_environment_are_json():
    settings = load_settings(
        environ={
            "SIDECAR_REJECTION_LOG__REDACT_KEYS": '["pin", "ssn"]',
            "SIDECAR_TOOLS": '{"Send": {"side_effects": true}}',
            "SIDECAR_TOOLS__lookup__REPEATABLE": "true",
            "SIDECAR_APPROVALS": '{"mode": "hold"}',
            "SIDECAR_APPROVALS__HOLD_TIMEOUT_S": "9",
        }
    )
    assert settings.rejection_log.redact_keys == ["pin", "ssn"]
    assert settings.tool("Send").side_effects is True  # JSON keeps the tool name's case
    assert settings.tool("lookup").repeatable is True
    assert settings.approvals.mode == "hold" and settings.approvals.hold_timeout_s == 9


@pytest.mark.parametrize("raw", ["team=support,tier=prod", '{"team": "support", "tier": "prod"}'])
def test_agent_labels_from_the_environment_as_pairs_or_json(raw):
    assert load_settings(environ={"SIDECAR_AGENT_LABELS": raw}).agent_labels == {"team": "support", "tier": "prod"}


def test_a_list_that_is_not_json_names_the_variable():
    with pytest.raises(ConfigError) as error:
        load_settings(environ={"SIDECAR_REJECTION_LOG__REDACT_KEYS": "pin,ssn"})
    assert "SIDECAR_REJECTION_LOG__REDACT_KEYS (env): lists and mappings are given as JSON" in str(error.value)


# -- errors name the real source ---------------------------------------------------------------


def test_an_environment_error_names_the_variable_and_the_key():
    with pytest.raises(ConfigError) as error:
        load_settings(environ={"SIDECAR_ENFORCEMENT__MAX_REPAIR_ROUNDS": "lots", "SIDECAR_LISTEN": "8080"})
    text = str(error.value)
    assert (
        "SIDECAR_ENFORCEMENT__MAX_REPAIR_ROUNDS (enforcement.max_repair_rounds): Input should be a valid integer"
        in text
    )
    assert "SIDECAR_LISTEN (listen): expected HOST:PORT, got '8080'" in text
    assert "default" not in text


def test_a_file_error_names_the_file_and_the_key(tmp_path):
    config = _write(tmp_path, "state:\n  backend: etcd\n")
    with pytest.raises(ConfigError) as error:
        load_settings(config, environ={})
    assert f"{config}: state.backend: Input should be 'memory', 'sqlite' or 'redis', got 'etcd'" in str(error.value)


def test_a_flag_error_names_the_flag(tmp_path):
    config = _write(tmp_path, "listen: 127.0.0.1:1000\n")
    with pytest.raises(ConfigError) as error:
        load_settings(config, {"listen": "nowhere"}, environ={"SIDECAR_LISTEN": "127.0.0.1:2000"})
    assert "--listen (listen): expected HOST:PORT, got 'nowhere'" in str(error.value)
    assert str(config) not in str(error.value) and "SIDECAR_LISTEN" not in str(error.value)


def test_a_whole_section_from_json_is_blamed_on_its_variable():
    with pytest.raises(ConfigError) as error:
        load_settings(environ={"SIDECAR_TOOLS": '{"send": {"side_efects": true}}'})
    assert "SIDECAR_TOOLS (tools.send.side_efects): unknown key; did you mean side_effects?" in str(error.value)


def test_a_secret_value_is_not_echoed_in_an_error(tmp_path):
    with pytest.raises(ConfigError) as error:
        load_settings(_write(tmp_path, "policy:\n  opa_token: 12345678\n"), environ={})
    assert "policy.opa_token: Input should be a valid string" in str(error.value)
    assert "12345678" not in str(error.value)


# -- unknown variables fail, with a suggestion -----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("SIDECAR_POLICY_ENGINE", "SIDECAR_POLICY__ENGINE"),  # one underscore for two
        ("SIDECAR_POLCY__ENGINE", "SIDECAR_POLICY__ENGINE"),
        ("SIDECAR_ADMIN_LISTN", "SIDECAR_ADMIN_LISTEN"),
        ("SIDECAR_TOOLS__send__SIDE_EFECTS", "SIDECAR_TOOLS__SEND__SIDE_EFFECTS"),
        ("SIDECAR_LISTEN__PORT", "SIDECAR_LISTEN"),  # a plain setting has no nested keys
    ],
)
def test_an_unknown_sidecar_variable_fails_with_did_you_mean(name, suggestion):
    with pytest.raises(ConfigError) as error:
        load_settings(environ={name: "opa"})
    assert f"{name}: not a setting; did you mean {suggestion}?" in str(error.value)


def test_every_unknown_variable_is_listed_at_once():
    with pytest.raises(ConfigError) as error:
        load_settings(environ={"SIDECAR_SESSION": "s1", "SIDECAR_WHATEVER": "x", "SIDECAR_LISTEN": "127.0.0.1:1"})
    text = str(error.value)
    assert "SIDECAR_SESSION: not a setting" in text and "SIDECAR_WHATEVER: not a setting" in text


@pytest.mark.parametrize(
    "name",
    [
        "SIDECAR_ADMIN_URL",  # the admin API clients' base URL
        "SIDECAR_SERVICE_HOST",  # Kubernetes service links for a Service named "sidecar"
        "SIDECAR_SERVICE_PORT",
        "SIDECAR_SERVICE_PORT_ADMIN",
        "SIDECAR_PORT",
        "SIDECAR_PORT_9477_TCP",
        "SIDECAR_PORT_9477_TCP_ADDR",
        "SIDECAR_PORT_8080_TCP_PROTO",
    ],
)
def test_documented_non_settings_are_allowed(name):
    assert load_settings(environ={name: "tcp://10.0.0.1:9477"}) == load_settings(environ={})


def test_variables_without_the_prefix_are_none_of_our_business():
    assert load_settings(environ={"SIDECARX": "1", "MY_SIDECAR_LISTEN": "x", "POD_NAME": "p"}) == load_settings(
        environ={}
    )


def test_the_process_environment_is_read_when_none_is_given(monkeypatch):
    monkeypatch.setenv("SIDECAR_SESSION_HEADER", "X-Conversation")
    assert load_settings().session_header == "X-Conversation"
    assert Settings().session_header == "X-Sidecar-Session"  # constructing the model reads no environment


# -- ports ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("purpose", "key"), [("proxy", "listen"), ("admin", "admin_listen")])
async def test_a_bind_error_names_the_port_and_its_address(purpose, key):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        flags = {"listen": "127.0.0.1:0", "admin_listen": "127.0.0.1:0", key: address}
        with pytest.raises(PortBindError) as error:
            await start(load_settings(flags=flags, environ={}))
    assert str(error.value).startswith(f"cannot bind the {purpose} port {address}: address in use")


# -- start-up line ----------------------------------------------------------------------------------


def test_redacted_settings_hide_tokens_and_url_passwords_but_not_paths():
    settings = load_settings(
        flags={"admin_token_file": "/run/secrets/admin"},
        environ={
            "SIDECAR_ADMIN_TOKEN": "123456",
            "SIDECAR_POLICY__OPA_TOKEN": "opa-secret-value",
            "SIDECAR_STATE__REDIS_URL": "redis://:hunter2@redis:6379/0",
            "SIDECAR_APPROVALS__WEBHOOK_URL": "https://hooks.example/T0?key=abcdef&channel=ops",
        },
    )
    clean = redacted_settings(settings)
    text = json.dumps(clean)
    for secret in ("123456", "opa-secret-value", "hunter2", "abcdef"):
        assert secret not in text
    assert clean["admin_token"] == "[REDACTED]" and clean["policy"]["opa_token"] == "[REDACTED]"
    assert clean["state"]["redis_url"] == "redis://[REDACTED]@redis:6379/0"
    assert clean["admin_token_file"] == "/run/secrets/admin"
    assert clean["listen"] == settings.listen and clean["state"]["backend"] == "memory"


@pytest.mark.parametrize(
    ("policies", "engine", "expected"),
    [
        (None, "embedded", "built-in"),
        ("builtin", "embedded", "built-in"),
        ("example:support", "embedded", "packaged example support"),
        ("policies", "embedded", f"directory {os.path.abspath('policies')}"),
        (None, "opa", "OPA server http://127.0.0.1:8181"),
    ],
)
def test_the_startup_fields_say_which_policy_is_in_force(policies, engine, expected):
    settings = load_settings(flags={"policies": policies, "policy": {"engine": engine}}, environ={})
    assert startup_fields(settings, "http://p", "http://a")["policy"] == expected


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sidecar_run_says_why_a_policy_does_not_load(tmp_path, workers):
    """A policy directory that is not there, or Rego that does not parse: one line, no traceback,
    exit 1 (with workers: each worker says it, and the supervisor names the worker)."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "sidecar.rego").write_text("package sidecar\n\ndecision := {\n")
    state = ["--config", str(tmp_path / "state.yaml")]
    (tmp_path / "state.yaml").write_text(f"state:\n  backend: sqlite\n  sqlite_path: {tmp_path / 's.db'}\n")
    for policies, said in ((str(tmp_path / "missing"), "policy directory not found"), (str(broken), "sidecar.rego")):
        ports = ["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]
        result = subprocess.run(
            [sys.executable, "-m", "sidecar.cli", "run", *ports, "--policies", policies, "--workers", workers, *state],
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr
        assert said in result.stderr
        if workers == "2":
            assert "sidecar: a worker cannot start:" in result.stderr
            assert "did not start (exit code 1)" in result.stderr
        else:
            assert "sidecar: cannot start:" in result.stderr


def test_the_startup_line_without_an_admin_token_reads_the_same_after_redaction():
    # Every log field goes through the redactor: the sentence must not look like a credential.
    settings = load_settings(flags={}, environ={})
    said = startup_fields(settings, "http://p", "http://a")["admin_auth"]
    assert said == "no admin token configured, so the approve/deny endpoints refuse every request"
    assert redact({"admin_auth": said}, DEFAULT_KEY_PATTERNS) == {"admin_auth": said}
