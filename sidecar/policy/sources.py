"""Where a policy comes from: a directory, or the library packaged inside the sidecar.

The packaged library (`sidecar/policy/library/`) is one set of generic rules (`rules/`) and
one data set per use: `default/` (what `sidecar run` enforces without `--policies`: undeclared
tools refused, every tool side-effecting so replays are caught, no approval rules) and one
directory per example (`support/`: the support agent of the demo). A policy spec names one:

- unset or `builtin`: rules + default;
- `example:NAME`: rules + that example;
- anything else: a directory on disk (hot-reloaded by the sidecar).

Packaged sources live inside the installed package, so they work from a wheel, from any
working directory, and never change while the process runs (no watcher). `init_directory`
copies one out, flat, so it can be edited, hot-reloaded, and served by `opa run` unchanged.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Final

LIBRARY: Final = Path(__file__).resolve().parent / "library"
BUILTIN: Final = "builtin"
EXAMPLE_PREFIX: Final = "example:"
_RULES: Final = "rules"
_DEFAULT: Final = "default"


class PolicyLoadError(Exception):
    """The policy could not be found, read, parsed or validated; names file and line."""


@dataclass(frozen=True)
class PolicySource:
    """The directories one policy is read from, and how its files are named in messages."""

    spec: str
    roots: tuple[Path, ...]
    packaged: bool

    def display(self, path: Path, root: Path) -> str:
        """`DIR/file.rego` for a directory (as the user wrote DIR), `spec/file.rego` if packaged."""
        if self.packaged:
            return f"{self.spec}/{path.relative_to(root)}"
        return os.path.join(self.spec, str(path.relative_to(root)))

    @property
    def directory(self) -> str | None:
        """The directory to watch for changes (None for packaged sources: they never change)."""
        return None if self.packaged else self.spec


def examples() -> list[str]:
    """Names of the packaged examples (`example:NAME`)."""
    return sorted(
        entry.name
        for entry in LIBRARY.iterdir()
        if entry.is_dir() and entry.name not in (_RULES, _DEFAULT) and (entry / "data.json").is_file()
    )


def _packaged(spec: str, data_dir: str) -> PolicySource:
    return PolicySource(spec, (LIBRARY / _RULES, LIBRARY / data_dir), True)


def resolve(spec: str | os.PathLike[str] | None) -> PolicySource:
    """The source a policy spec names (see the module docstring). Raises PolicyLoadError."""
    text = BUILTIN if spec is None else os.fspath(spec)
    if text == BUILTIN:
        return _packaged(BUILTIN, _DEFAULT)
    if text.startswith(EXAMPLE_PREFIX):
        name = text[len(EXAMPLE_PREFIX) :]
        if name not in examples():
            known = ", ".join(f"{EXAMPLE_PREFIX}{n}" for n in examples())
            raise PolicyLoadError(f"unknown policy example {name!r}; packaged examples: {known}")
        return _packaged(text, name)
    return PolicySource(text, (Path(text),), False)


def init_directory(target: str | os.PathLike[str], example: str | None = None, *, force: bool = False) -> list[Path]:
    """Copy the packaged rules, their tests, and the default data (or an example's data and
    tests) into `target`, flat. Refuses to overwrite files unless `force`. Returns the paths."""
    source = resolve(None if example is None else f"{EXAMPLE_PREFIX}{example}")
    files = sorted(
        (path for root in source.roots for path in root.iterdir() if path.suffix in (".rego", ".json")),
        key=lambda p: p.name,
    )
    destination = Path(target)
    existing = [destination / path.name for path in files if (destination / path.name).exists()]
    if existing and not force:
        names = ", ".join(str(p) for p in existing)
        raise PolicyLoadError(f"{names} already exist{'s' if len(existing) == 1 else ''}; use --force to overwrite")
    destination.mkdir(parents=True, exist_ok=True)
    written = []
    for path in files:
        shutil.copyfile(path, destination / path.name)
        written.append(destination / path.name)
    return written
