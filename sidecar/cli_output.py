"""The one table helper every subcommand prints with: plain, aligned columns, no colour and no
box drawing, so the output greps, pipes into `awk`/`sort` and reads the same in CI logs.

(`rich` was considered: its tables wrap or truncate to the terminal width when piped, which
breaks line-oriented tools, and they add dependencies for what this needs: column widths.)
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from enum import StrEnum

# The admin port's default address (Settings.admin_listen), for the clients of the admin API.
DEFAULT_ADMIN_URL = "http://127.0.0.1:9477"


def add_admin_url_argument(parser: argparse.ArgumentParser) -> None:
    """`--admin-url`, the same for every admin API client (`approvals`, `status`)."""
    parser.add_argument(
        "--admin-url",
        default=os.environ.get("SIDECAR_ADMIN_URL", DEFAULT_ADMIN_URL),
        help=f"admin port base URL (env SIDECAR_ADMIN_URL, default {DEFAULT_ADMIN_URL})",
    )


class Align(StrEnum):
    LEFT = "left"
    RIGHT = "right"


def clip(text: str, width: int) -> str:
    """One line of at most `width` characters (whitespace runs folded), `…` when cut."""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def table(
    header: Sequence[str],
    rows: Sequence[Sequence[object]],
    align: Sequence[Align] | None = None,
    rule: bool = False,
) -> str:
    """Columns padded to their widest cell (two spaces apart), trailing spaces trimmed.

    `align` per column (default: left); `rule` draws a dashed line under the header."""
    cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    sides = list(align or []) + [Align.LEFT] * (len(header) - len(align or []))
    lines = [
        "  ".join(
            c.rjust(w) if a is Align.RIGHT else c.ljust(w) for c, w, a in zip(row, widths, sides, strict=True)
        ).rstrip()
        for row in cells
    ]
    if rule:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"
