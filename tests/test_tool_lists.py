"""One `ToolList` per distinct tool list (sidecar/model.py): the work done per list rather than
per request, the metric labels here (the inventory's walk: tests/schemas/test_inventory.py), is
remembered by the list's identity, weakly and bounded."""

from __future__ import annotations

import gc
from typing import Any

from multidict import CIMultiDict
from yarl import URL

from sidecar.dialects import ANTHROPIC
from sidecar.exchange.state import Exchange
from sidecar.filters.telemetry import TelemetryFilter
from sidecar.model import PerToolList, Provider, ToolDeclaration, ToolList
from sidecar.telemetry.metrics import Metrics


def tools(*names: str) -> ToolList:
    return ToolList({n: ToolDeclaration.create(n, {"type": "object"}, "") for n in names})


def test_remembered_by_identity_only_for_a_tool_list() -> None:
    memo: PerToolList[int] = PerToolList()
    listed = tools("a", "b")
    memo.put(listed, 1)
    assert memo.get(listed) == 1
    assert memo.get(tools("a", "b")) is None  # equal, but another list
    plain = dict(listed)
    memo.put(plain, 2)  # a mapping read afresh each time is never remembered
    assert memo.get(plain) is None


def test_a_list_gone_is_not_kept_alive_and_the_memo_stays_bounded() -> None:
    memo: PerToolList[int] = PerToolList(max_entries=4)
    listed = tools("a")
    memo.put(listed, 1)
    del listed
    gc.collect()
    assert all(ref() is None for ref, _ in memo._entries.values())  # held weakly
    alive = [tools(str(i)) for i in range(10)]
    for i, listed in enumerate(alive):
        memo.put(listed, i)
    assert len(memo._entries) <= 4
    assert memo.get(alive[-1]) == 9


class CountingMetrics(Metrics):
    def __init__(self) -> None:
        super().__init__()
        self.declared: list[str] = []

    def declare_tool(self, name: str) -> str:
        self.declared.append(name)
        return super().declare_tool(name)


def _exchange(declarations: Any) -> Exchange:
    view = ANTHROPIC.read_request({"model": "m", "messages": []})
    view.declarations = declarations
    return Exchange("x", Provider.ANTHROPIC, ANTHROPIC, "s1", view, {}, URL("http://u"), CIMultiDict())


async def test_tool_names_are_admitted_once_per_tool_list() -> None:
    metrics = CountingMetrics()
    telemetry = TelemetryFilter(metrics, rejections=None)  # type: ignore[arg-type]  # not used here
    listed = tools("a", "b")
    for _ in range(3):
        await telemetry.on_request(_exchange(listed))
    assert metrics.declared == ["a", "b"]
    await telemetry.on_request(_exchange(tools("a", "c")))  # another list: its names are admitted
    assert metrics.declared == ["a", "b", "a", "c"]
    assert metrics.tools.label("c") == "c"
    plain = {"d": listed["a"]}
    for _ in range(2):  # a plain mapping (a list read afresh) is admitted every time
        await telemetry.on_request(_exchange(plain))
    assert metrics.declared[-2:] == ["d", "d"]
