"""Who may decide an approval: an approver is a name and groups, and one rule binds them.

An approver comes from an admin token (a line `TOKEN NAME GROUP,GROUP` of the token file or of
`SIDECAR_ADMIN_TOKEN`, read by sidecar/admin/auth.py) or from a Slack user (a line
`SLACK_USER_ID NAME GROUP,GROUP` of the Slack users file, read by sidecar/admin/slack.py). Both
files have the one line format read here, so the same rule applies to both: a decision is
accepted only from an approver in the approval's group, or in `approvals.admin_group` when the
operator configured one. The name, not anything the caller sends, is recorded as `decided_by`.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from enum import StrEnum

log = logging.getLogger("sidecar.approvals")

# The prefix of the names the sidecar makes up itself (`token:1a2b3c4d`, `slack:U123`): a line
# may not claim one, so a recorded approver is never mistaken for another token's fingerprint.
RESERVED_PREFIXES = ("token:", "slack:")
FORMAT = "{key} [NAME [GROUP,GROUP…]]"


class Channel(StrEnum):
    """How a decision reached the sidecar (the `via` of the audit line and the metrics)."""

    API = "api"
    SLACK = "slack"

    @property
    def key(self) -> str:
        """What the first field of this channel's identity lines is."""
        return "TOKEN" if self is Channel.API else "USER_ID"


class RefusalReason(StrEnum):
    """Why a decision was refused after its caller was authenticated (`reason` label)."""

    OUTSIDE_GROUP = "outside_group"
    UNKNOWN_APPROVER = "unknown_approver"


@dataclass(frozen=True, slots=True)
class Approver:
    """An authenticated person: `name` is recorded as the approver, `credential` says what vouched
    for them (`token:1a2b3c4d`, `slack:U0123`: loggable, useless to authenticate with)."""

    name: str
    groups: frozenset[str]
    credential: str
    via: Channel

    def describe(self) -> str:
        groups = ", ".join(sorted(self.groups)) or "no group"
        return f"{self.name} ({groups})"


@dataclass(frozen=True, slots=True)
class DecisionRule:
    """The one rule for deciding and for seeing approvals: the approval's group, or the admin group."""

    admin_group: str | None = None

    def all_groups(self, approver: Approver) -> bool:
        return self.admin_group is not None and self.admin_group in approver.groups

    def allows(self, approver: Approver, group: str) -> bool:
        return group in approver.groups or self.all_groups(approver)


class IdentityError(ValueError):
    """A malformed identity line or file; the message names the line, never its content."""


@dataclass(frozen=True, slots=True)
class IdentityLine:
    """One line: the key (a bearer token or a Slack user id), the name, the groups."""

    key: str
    name: str | None
    groups: frozenset[str]


def parse_line(text: str, key: str = "KEY") -> IdentityLine:
    """`KEY [NAME [GROUP,GROUP…]]`, split on whitespace (`key` names the first field in errors).
    The message of an error never repeats the line: its first field may be a bearer token."""
    fields = text.split()
    if not fields:
        raise IdentityError("empty")
    if len(fields) > 3:
        raise IdentityError(f"expected {FORMAT.format(key=key)} (3 fields at most), got {len(fields)} fields")
    name, groups = fields[1] if len(fields) > 1 else None, fields[2] if len(fields) > 2 else ""
    if name is not None and name.startswith(RESERVED_PREFIXES):
        raise IdentityError(f"a name may not start with {' or '.join(RESERVED_PREFIXES)} (the sidecar's own names)")
    members = groups.split(",") if groups else []
    if any(not group for group in members):
        raise IdentityError("empty group name (GROUP,GROUP: no leading, trailing or doubled comma)")
    return IdentityLine(fields[0], name, frozenset(members))


def parse_lines(text: str, key: str = "KEY") -> dict[str, IdentityLine]:
    """Every line of a file: blank lines and `#` comments skipped; a key given twice is an error
    (two identities for one credential would make the recorded approver a matter of order)."""
    found: dict[str, IdentityLine] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            entry = parse_line(stripped, key)
        except IdentityError as exc:
            raise IdentityError(f"line {number}: {exc}") from None
        if entry.key in found:
            raise IdentityError(f"line {number}: the same {key} as an earlier line")
        found[entry.key] = entry
    return found


class IdentityFile:
    """A file of identity lines, re-read when it changes.

    Every use stats the file (a Kubernetes secret rotates by swapping a symlink, which changes the
    inode and mtime the stat follows), so a rotated file applies without a restart. A file that
    cannot be read or parsed yields no identities at all (fail closed: a revoked line must not
    survive a broken edit), is logged once per problem, and `problem` says why.
    """

    def __init__(self, path: str, what: str, key: str) -> None:
        self.path = path
        self.what = what
        self.key = key
        self._version: tuple[int, int, int, int] | None = None
        self._entries: dict[str, IdentityLine] = {}
        self.problem: str | None = None

    def load_at_start(self) -> None:
        """The first read: a malformed file stops start-up (IdentityError naming the file and
        line); one that cannot be read is only logged, as it may be mounted later."""
        malformed = self._refresh()
        if malformed:
            raise IdentityError(self.problem)
        if self.problem:
            log.warning("%s", self.problem)

    def entries(self) -> dict[str, IdentityLine]:
        before = self.problem
        malformed = self._refresh()
        if self.problem and self.problem != before:
            suffix = "; every identity in it is refused until it is fixed" if malformed else ""
            log.warning("%s%s", self.problem, suffix)
        return self._entries

    def _refresh(self) -> bool:
        """Re-read if the file changed; True when it was read but is malformed."""
        try:
            st = os.stat(self.path)
            version = (st.st_ino, st.st_dev, st.st_mtime_ns, st.st_size)
            if version == self._version:
                return False
            with open(self.path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            self._version, self._entries, self.problem = None, {}, f"{self.what} {self.path} unreadable: {reason}"
            return False
        self._version = version
        try:
            self._entries, self.problem = parse_lines(text, self.key), None
        except IdentityError as exc:
            self._entries, self.problem = {}, f"{self.what} {self.path}: {exc}"
            return True
        return False


def approver_from(entry: IdentityLine, credential: str, via: Channel) -> Approver:
    """The approver a line names; a line without a name is known by its credential's fingerprint."""
    return Approver(entry.name or credential, entry.groups, credential, via)


class ApprovalForbidden(Exception):
    """An authenticated approver outside the approval's group (HTTP 403; nothing was decided)."""

    def __init__(self, approval_id: str, group: str, approver: Approver) -> None:
        if approver.groups:
            detail = f"{approver.name} is in {', '.join(sorted(approver.groups))}, not in {group}"
        else:
            detail = f"{approver.name} is in no group (give it one: {FORMAT.format(key=approver.via.key)})"
        super().__init__(f"approval {approval_id} is for group {group}: {detail}")
        self.approval_id = approval_id
        self.group = group
