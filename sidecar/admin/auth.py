"""Bearer-token authentication for the admin API's approval endpoints: a token is an approver.

Tokens come from `admin_token` (`SIDECAR_ADMIN_TOKEN`, one line) and `admin_token_file` (one a
line), both in the format `TOKEN NAME GROUP,GROUP` (sidecar/approvals/approvers.py): the bearer
token, the name recorded as the approver, the approval groups it may decide for. A line with the
token alone (the format before identities) still authenticates, as `token:<fingerprint>` in no
group: it can list nothing and decide nothing, so no old token silently keeps deciding for every
group. A malformed line stops start-up; a malformed file later refuses every token in it.

The file is re-read whenever it changes, so a rotated or re-grouped token applies without a
restart. Comparison is constant time against *every* configured token, so timing reveals neither
a token's prefix nor which token matched. Nothing here logs or returns a token: the credential
of an approver is a fingerprint (`token:<8 hex of sha256>`), stable and useless to authenticate.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from sidecar.approvals.approvers import (
    Approver,
    Channel,
    IdentityError,
    IdentityFile,
    IdentityLine,
    approver_from,
    parse_line,
)
from sidecar.config import ConfigError, Settings


def fingerprint(token: str) -> str:
    return "token:" + hashlib.sha256(token.encode()).hexdigest()[:8]


@dataclass(frozen=True, slots=True)
class AuthResult:
    """The approver a token stands for, or (approver None) the HTTP status and why not."""

    approver: Approver | None
    status: int = 200
    message: str = ""


def _env_token(settings: Settings) -> list[IdentityLine]:
    if not settings.admin_token:
        return []
    try:
        return [parse_line(settings.admin_token, Channel.API.key)]
    except IdentityError as exc:
        raise ConfigError(f"admin_token (SIDECAR_ADMIN_TOKEN): {exc}") from None


class AdminAuth:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._env = _env_token(settings)
        self._file = (
            IdentityFile(settings.admin_token_file, "admin token file", Channel.API.key)
            if settings.admin_token_file
            else None
        )
        if self._file is not None:
            try:
                self._file.load_at_start()
            except IdentityError as exc:
                raise ConfigError(str(exc)) from None

    def tokens(self) -> list[IdentityLine]:
        return self._env + (list(self._file.entries().values()) if self._file is not None else [])

    def check(self, authorization: str | None) -> AuthResult:
        tokens = self.tokens()
        if not tokens:
            broken = self._file.problem if self._file is not None else None
            return AuthResult(
                None,
                403,
                f"no usable admin token ({broken}); the approvals API refuses every request until one is"
                if broken
                else "no admin token is configured (set --admin-token-file or SIDECAR_ADMIN_TOKEN); "
                "the approvals API refuses every request until one is",
            )
        scheme, _, presented = (authorization or "").partition(" ")
        presented = presented.strip()
        if scheme.lower() != "bearer" or not presented:
            return AuthResult(None, 401, "missing bearer token: send 'Authorization: Bearer <admin token>'")
        candidate = presented.encode()
        matched: IdentityLine | None = None
        for entry in tokens:  # no early exit: every token is compared
            if hmac.compare_digest(candidate, entry.key.encode()) and matched is None:
                matched = entry
        if matched is None:
            return AuthResult(None, 401, "invalid admin token")
        return AuthResult(approver_from(matched, fingerprint(matched.key), Channel.API))
