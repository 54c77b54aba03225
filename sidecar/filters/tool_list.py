"""Tool list filtering (phase `tool_list`): declared tools the policy hides never reach the
model, and a call to one is refused as an unknown tool.

A filter on `on_request`, so it runs before the request goes upstream. It comes after the
telemetry filter in the chain: telemetry admits the declared tool names as metric labels, and
this filter counts `sidecar_tools_hidden` itself. Critical: if it cannot run, the request
does not go upstream with tools the policy may hide.
"""

from __future__ import annotations

import logging
import time

from sidecar.exchange.state import Exchange
from sidecar.filters.policy import PolicyPhase
from sidecar.telemetry.logs import log_event

log = logging.getLogger("sidecar.policy")


class ToolListFilter(PolicyPhase):
    """Asks `data.sidecar.visible_tools` for each request that declares tools.

    Undefined or an engine error shows every tool: hiding narrows what the model is
    offered, but every call is still decided, so failing open here is safe. In shadow mode
    the tools that would be hidden are logged and left in place; off skips the question.
    """

    name = "policy_tool_list"
    critical = True

    async def on_request(self, exchange: Exchange) -> None:
        declared = exchange.view.declarations
        if self.mode == "off" or not declared:
            return
        names = list(declared)
        started = time.perf_counter()
        visible = self.engine.quick_visible_tools(names)  # from the names alone, when it can
        if visible is None:
            document = self.input_base(exchange, "tool_list", await self.session_counts(exchange))
            document["tools"] = names
            started = time.perf_counter()
            visible = await self.engine.visible_tools(document)
        self.metrics.policy_evaluated(self.engine.name, time.perf_counter() - started)
        if visible is None:
            return
        shown = set(visible)
        hidden = [name for name in declared if name not in shown]
        if not hidden:
            return
        if self.mode == "shadow":
            log_event("tools_hidden", log=log, session=exchange.session, tools=hidden, mode="shadow", applied=False)
            return
        exchange.request = exchange.dialect.hide_tools(exchange.request, set(hidden))
        exchange.view.declarations = {n: d for n, d in declared.items() if n in shown}
        exchange.hidden_tools.extend(hidden)
        for name in hidden:
            self.metrics.tool_hidden(name, exchange.path.value)
        log_event("tools_hidden", log=log, session=exchange.session, tools=hidden, mode=self.mode, applied=True)
