"""What `sidecar run` tells the operator at start-up: which port failed to bind and why, and
one log line with the effective configuration (what is in force, secrets redacted), so nobody
has to guess whether the policy directory, the Redis store or observe mode was picked up."""

from __future__ import annotations

import errno
import os
from enum import StrEnum
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from sidecar import __version__
from sidecar.config import Settings
from sidecar.policy.sources import BUILTIN, EXAMPLE_PREFIX
from sidecar.telemetry.redact import DEFAULT_KEY_PATTERNS, REDACTED, redact


class PortPurpose(StrEnum):
    PROXY = "proxy"
    ADMIN = "admin"


class PortBindError(OSError):
    """A port could not be bound: says which port (its purpose), where, and why."""

    def __init__(self, purpose: PortPurpose, address: str, cause: OSError) -> None:
        reason = os.strerror(cause.errno).lower() if cause.errno else str(cause)
        if cause.errno == errno.EADDRINUSE:
            reason = "address in use (another process listens there; choose another port with "
            reason += f"--{'listen' if purpose is PortPurpose.PROXY else 'admin-listen'})"
        super().__init__(cause.errno, f"cannot bind the {purpose} port {address}: {reason}")
        self.purpose = purpose
        self.address = address

    def __str__(self) -> str:
        return str(self.strerror)


def describe_policy(policies: str | None) -> str:
    """The policy in force, as the operator would name it."""
    if policies is None or policies == BUILTIN:
        return "built-in"
    if policies.startswith(EXAMPLE_PREFIX):
        return f"packaged example {policies.removeprefix(EXAMPLE_PREFIX)}"
    return f"directory {os.path.abspath(policies)}"


def _scrub_url(value: str) -> str:
    """URL passwords (`redis://:pw@host`, which the text redactor misses) and query values go."""
    try:
        parts = urlsplit(value)
    except ValueError:
        return value
    if not parts.scheme or not parts.netloc:
        return value
    netloc = parts.netloc
    if parts.password is not None:
        user = parts.username or ""
        netloc = f"{user}:{REDACTED}@{netloc.rpartition('@')[2]}"
    query = urlencode([(k, REDACTED) for k, _ in parse_qsl(parts.query, keep_blank_values=True)], safe="[]")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return _scrub_url(value) if "://" in value else value
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def redacted_settings(settings: Settings) -> dict[str, Any]:
    """Every setting, with secrets replaced: by key (admin_token, opa_token, …), by shape, in URLs.

    `*_file` settings are paths, not secrets, and stay readable."""
    dump = settings.model_dump(mode="json")
    files = {k: dump[k] for k in dump if k.endswith("_file")}
    clean: dict[str, Any] = redact(_scrub(dump), DEFAULT_KEY_PATTERNS)
    clean.update(files)
    return clean


def startup_fields(settings: Settings, proxy_url: str, admin_url: str) -> dict[str, Any]:
    """The fields of the `startup` log event: what is in force first, then every setting."""
    policy = settings.policy
    return {
        "version": __version__,
        "proxy": proxy_url,
        "admin": admin_url,
        "policy": describe_policy(settings.policies) if policy.engine == "embedded" else f"OPA server {policy.opa_url}",
        "policy_engine": policy.engine,
        "policy_mode": policy.mode,
        "state_backend": settings.state.backend,
        "enforcement_mode": settings.enforcement.mode,
        "approvals_mode": settings.approvals.mode,
        "upstreams": _scrub({"anthropic": settings.anthropic_upstream, "openai": settings.openai_upstream}),
        "admin_auth": "token configured"
        if settings.admin_token or settings.admin_token_file
        # No "token:" before prose: the log redactor reads the word after it as the token.
        else "no admin token configured, so the approve/deny endpoints refuse every request",
        "settings": redacted_settings(settings),
    }
