"""Editing the shipped library in a test: a branch put first in the `decision` chain."""

from __future__ import annotations

CHAIN_START = "\ndecision := "


def first_decision_branch(source: str, branch: str) -> str:
    """`source` with `branch` as the first branch of its `decision` chain. `branch` is written
    as a chain's head is: `decision := VALUE if {` and its body, without the closing brace.
    Fails when the chain is not found, so a test never runs the library unedited."""
    assert source.count(CHAIN_START) == 1, "the library's decision chain moved: update this helper"
    return source.replace(CHAIN_START, "\n" + branch + "\n} else := ", 1)
