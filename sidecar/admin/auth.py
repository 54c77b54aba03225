"""Bearer-token authentication for the admin API's approval endpoints.

Tokens come from `admin_token` (`SIDECAR_ADMIN_TOKEN`) and `admin_token_file` (one a line).
The file is re-read whenever it changes (stat on every request: a Kubernetes secret rotates
by swapping a symlink, which changes the inode/mtime the stat follows), so a rotated token
works and the old one stops working without a restart.

Comparison is constant time against *every* configured token, so timing reveals neither a
token's prefix nor which token matched. The caller's identity is a fingerprint of the token
(`token:<8 hex of sha256>`): stable, loggable, and useless for authenticating.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from dataclasses import dataclass

from sidecar.config import Settings

log = logging.getLogger("sidecar.admin")


def fingerprint(token: str) -> str:
    return "token:" + hashlib.sha256(token.encode()).hexdigest()[:8]


@dataclass(frozen=True, slots=True)
class AuthResult:
    ok: bool
    status: int = 200
    message: str = ""
    identity: str = ""


class AdminAuth:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._file_key: tuple[int, int, int, int] | None = None
        self._file_tokens: list[str] = []
        self._file_error: str | None = None

    def _from_file(self) -> list[str]:
        path = self.settings.admin_token_file
        if not path:
            return []
        try:
            st = os.stat(path)
        except OSError as exc:
            if self._file_error is None:
                log.warning("admin token file %s unreadable: %s", path, exc.strerror)
            self._file_error = exc.strerror or str(exc)
            self._file_key, self._file_tokens = None, []
            return []
        key = (st.st_ino, st.st_dev, st.st_mtime_ns, st.st_size)
        if key != self._file_key:
            try:
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
            except OSError as exc:
                self._file_error = exc.strerror or str(exc)
                return []
            self._file_tokens = [line.strip() for line in text.splitlines() if line.strip()]
            self._file_key, self._file_error = key, None
        return self._file_tokens

    def tokens(self) -> list[str]:
        env = [self.settings.admin_token] if self.settings.admin_token else []
        return env + self._from_file()

    def check(self, authorization: str | None) -> AuthResult:
        tokens = self.tokens()
        if not tokens:
            return AuthResult(
                False,
                403,
                "no admin token is configured (set --admin-token-file or SIDECAR_ADMIN_TOKEN); "
                "the approvals API refuses every request until one is",
            )
        scheme, _, presented = (authorization or "").partition(" ")
        presented = presented.strip()
        if scheme.lower() != "bearer" or not presented:
            return AuthResult(False, 401, "missing bearer token: send 'Authorization: Bearer <admin token>'")
        candidate = presented.encode()
        matched: str | None = None
        for token in tokens:  # no early exit: every token is compared
            if hmac.compare_digest(candidate, token.encode()):
                matched = token
        if matched is None:
            return AuthResult(False, 401, "invalid admin token")
        return AuthResult(True, identity=fingerprint(matched))
