"""Loads `Settings` from its layers (defaults < YAML file < environment < flags), remembering
where every value came from, so a bad value is reported against the file key, the variable
or the flag that set it, and a typo gets a "did you mean".

The environment is read by pydantic-settings' `EnvSettingsSource` (field-type-aware: a `str`
setting stays the string it was given, `123456` and `null` included; models, lists and
mappings are JSON; `__` separates nested keys). The YAML file is read with `yaml.safe_load`
rather than pydantic-settings' YAML source: that source folds key case and drops the key
paths this module needs to name the file's keys.

Which `SIDECAR_*` variables may be set without being settings (everything else under the
prefix that is not a setting fails start-up, since a misspelt setting silently ignored is a
guard silently off):

- `SIDECAR_ADMIN_URL`: read by the `sidecar approvals` and `sidecar status` clients;
- the variables Kubernetes injects for a Service named `sidecar` (`SIDECAR_SERVICE_HOST`,
  `SIDECAR_SERVICE_PORT[_NAME]`, `SIDECAR_PORT`, `SIDECAR_PORT_<n>_<PROTO>[_ADDR|_PORT|_PROTO]`).
"""

from __future__ import annotations

import difflib
import os
import re
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Generic, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsError
from pydantic_settings.sources.utils import parse_env_vars

from sidecar.config.settings import ENV_PREFIX, ConfigError, Settings
from sidecar.telemetry.redact import DEFAULT_KEY_PATTERNS, key_matcher

NESTED = "__"
# Read by the admin API clients (`sidecar approvals`, `sidecar status`), not by `sidecar run`.
CLIENT_VARIABLES = frozenset({"SIDECAR_ADMIN_URL"})
# Kubernetes service links for a Service named "sidecar" (enableServiceLinks, on by default).
_SERVICE_LINK = re.compile(
    r"SIDECAR_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT|PORT_\d+_(TCP|UDP|SCTP)(_(ADDR|PORT|PROTO))?)"
)
_SECRET_KEY = key_matcher(DEFAULT_KEY_PATTERNS)

Path_ = tuple[str, ...]
S = TypeVar("S", bound=BaseSettings)


class SourceKind(StrEnum):
    FILE = "file"
    ENV = "env"
    FLAG = "flag"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where one value came from, worded the way the operator would look for it."""

    kind: SourceKind
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"

    def at(self, key: str) -> str:
        """`sidecar.yaml: policy.engine`, `SIDECAR_POLICY__ENGINE (policy.engine)`, `--listen (listen)`."""
        if self.kind is SourceKind.FILE:
            return f"{self.name}: {key}"
        return f"{self.name} ({key})"


@dataclass
class Layer:
    """One source's values, and the origin of each key path it sets."""

    data: dict[str, Any] = field(default_factory=dict)
    origins: dict[Path_, Origin] = field(default_factory=dict)


def is_allowed_non_setting(name: str) -> bool:
    upper = name.upper()
    return upper in CLIENT_VARIABLES or _SERVICE_LINK.fullmatch(upper) is not None


def _unwrap(annotation: Any) -> Any:
    """The model / dict / leaf type behind Optional[...] and Annotated[...]."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            members = [a for a in get_args(annotation) if a is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _is_dict(annotation: Any) -> bool:
    return get_origin(annotation) is dict or annotation is dict


def type_at(model: type[BaseModel], path: Path_) -> Any:
    """The (unwrapped) type at a key path, or None if the path is not a setting."""
    current: Any = model
    for key in path:
        if _is_model(current):
            found = current.model_fields.get(key)
            if found is None:
                return None
            current = _unwrap(found.annotation)
        elif _is_dict(current):
            args = get_args(current)
            current = _unwrap(args[-1]) if args else Any
        else:
            return None
    return current


def _leaf_names(model: type[BaseModel], prefix: Path_ = ()) -> Iterator[Path_]:
    """Every settable key path (mappings of arbitrary keys stop at the mapping itself)."""
    for name, info in model.model_fields.items():
        path = (*prefix, name)
        yield path
        inner = _unwrap(info.annotation)
        if _is_model(inner):
            yield from _leaf_names(inner, path)


def env_name(path: Path_) -> str:
    return ENV_PREFIX + NESTED.join(path).upper()


def _suggest(word: str, choices: list[str]) -> str | None:
    found = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return found[0] if found else None


class _GivenEnvironment(EnvSettingsSource):
    """pydantic-settings' environment source reading a given mapping instead of os.environ."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._given = dict(environ)
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self._given, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


def _deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _paths(data: Mapping[str, Any], prefix: Path_ = ()) -> Iterator[Path_]:
    for key, value in data.items():
        path = (*prefix, str(key))
        yield path
        if isinstance(value, Mapping):
            yield from _paths(value, path)


class SettingsLoader(Generic[S]):
    """One load: build the layers, check names, merge, validate, explain."""

    def __init__(self, settings_cls: type[S]) -> None:
        self.settings_cls = settings_cls

    # -- layers -----------------------------------------------------------------------------

    def file_layer(self, config_file: str | os.PathLike[str]) -> Layer:
        path = Path(config_file)
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise ConfigError(f"config file not found: {config_file}") from exc
        except OSError as exc:
            raise ConfigError(f"cannot read config file {config_file}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {config_file} is not valid YAML: {exc}") from exc
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {config_file}: the top level must be a mapping")
        origins = {p: Origin(SourceKind.FILE, f"{config_file}") for p in _paths(loaded)}
        return Layer(loaded, origins)

    def env_layer(self, environ: Mapping[str, str]) -> Layer:
        ours = {k: v for k, v in environ.items() if k.upper().startswith(ENV_PREFIX)}
        problems = [p for name in sorted(ours) if (p := self._unknown_variable(name)) is not None]
        if problems:
            raise ConfigError(
                "unknown SIDECAR_* environment variable(s) (the prefix is reserved for settings; nested keys"
                " use __, e.g. SIDECAR_POLICY__ENGINE):\n" + "\n".join(problems)
            )
        settings_vars = {k: v for k, v in ours.items() if not is_allowed_non_setting(k)}
        try:
            data = _GivenEnvironment(self.settings_cls, settings_vars)()
        except SettingsError as exc:
            raise ConfigError(self._decode_problem(exc, settings_vars)) from None
        origins: dict[Path_, Origin] = {}
        for name in settings_vars:
            path = tuple(name[len(ENV_PREFIX) :].lower().split(NESTED))
            origins[path] = Origin(SourceKind.ENV, name)
        return Layer(data, origins)

    @staticmethod
    def flag_layer(flags: Mapping[str, Any]) -> Layer:
        data = {k: v for k, v in flags.items() if v is not None}
        origins = {p: Origin(SourceKind.FLAG, "--" + p[-1].replace("_", "-")) for p in _paths(data)}
        return Layer(data, origins)

    # -- names ------------------------------------------------------------------------------

    def _unknown_variable(self, name: str) -> str | None:
        """None if `name` is a setting (or an allowed non-setting), else the problem line."""
        if is_allowed_non_setting(name):
            return None
        path = tuple(name[len(ENV_PREFIX) :].lower().split(NESTED))
        if all(path) and type_at(self.settings_cls, path) is not None:
            return None
        known = [env_name(p) for p in _leaf_names(self.settings_cls)]
        candidates = [g for g in (_suggest(name.upper(), known), self._suggest_by_level(path)) if g]
        # The closer of the two: a misplaced `_` (whole name) or a misspelt key (one level).
        guess = max(candidates, key=lambda g: difflib.SequenceMatcher(None, name.upper(), g).ratio(), default=None)
        hint = f"; did you mean {guess}?" if guess else ""
        return f"  {name}: not a setting{hint}"

    def _suggest_by_level(self, path: Path_) -> str | None:
        """Replace the first unknown key by the closest known key at its level."""
        for depth in range(len(path)):
            parent = type_at(self.settings_cls, path[:depth])
            if _is_model(parent) and path[depth] not in parent.model_fields:
                choice = _suggest(path[depth], list(parent.model_fields))
                return env_name((*path[:depth], choice, *path[depth + 1 :])) if choice else None
        return None

    @staticmethod
    def _decode_problem(exc: SettingsError, settings_vars: Mapping[str, str]) -> str:
        """pydantic-settings names the field, not the variable: find the variable by field."""
        match = re.search(r'field "([^"]+)"', str(exc))
        fieldname = match.group(1).lower() if match else ""
        names = sorted(n for n in settings_vars if n.lower().rstrip("_").endswith(fieldname)) or sorted(settings_vars)
        cause = f": {exc.__cause__}" if exc.__cause__ else ""
        return (
            f"invalid configuration:\n  {' / '.join(names)} (env): lists and mappings are given as JSON"
            f' (e.g. \'["a", "b"]\' or \'{{"key": "value"}}\'){cause}'
        )

    # -- load -------------------------------------------------------------------------------

    def load(
        self,
        config_file: str | os.PathLike[str] | None,
        flags: Mapping[str, Any],
        environ: Mapping[str, str],
    ) -> S:
        layers = [self.file_layer(config_file)] if config_file is not None else []
        layers += [self.env_layer(environ), self.flag_layer(flags)]
        data: dict[str, Any] = {}
        origins: dict[Path_, Origin] = {}
        for layer in layers:  # later layers win, key by key
            data = _deep_merge(data, layer.data)
            origins.update(layer.origins)
        try:
            return self.settings_cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(self.describe(exc, origins)) from None

    def describe(self, error: ValidationError, origins: Mapping[Path_, Origin]) -> str:
        lines = ["invalid configuration:"]
        for item in error.errors():
            loc = tuple(str(p) for p in item["loc"])
            key = ".".join(loc) or "(root)"
            origin = next((origins[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in origins), None)
            where = origin.at(key) if origin else f"{key} (default)"
            lines.append(f"  {where}: {self._message(item, loc)}")
        return "\n".join(lines)

    def _message(self, item: Mapping[str, Any], loc: Path_) -> str:
        if item["type"] == "extra_forbidden":
            parent = type_at(self.settings_cls, loc[:-1])
            choices = list(parent.model_fields) if _is_model(parent) else []
            guess = _suggest(loc[-1], choices)
            return f"unknown key; did you mean {guess}?" if guess else f"unknown key (keys here: {', '.join(choices)})"
        message = str(item["msg"]).removeprefix("Value error, ")
        value = item.get("input")
        secret = any(_SECRET_KEY(part) for part in loc)
        if not secret and isinstance(value, (str, int, float, bool)) and "got" not in message:
            message += f", got {value!r}"
        return message


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    flags: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> Settings:
    """Defaults < file < environment (`os.environ` unless given) < flags (None values skipped).

    Raises ConfigError naming the source (file and key, variable, flag) and the problem.
    """
    env = dict(os.environ if environ is None else environ)
    return SettingsLoader(Settings).load(config_file, flags or {}, env)
