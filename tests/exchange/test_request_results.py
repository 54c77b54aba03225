"""`Exchange.request_results`: the results `read_request` read in its walk, reused while the
request still holds the history it walked, and read again from any other history."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from multidict import CIMultiDict
from yarl import URL

from sidecar.dialects import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES, Dialect
from sidecar.exchange.state import Exchange
from sidecar.model import JsonPath
from tests.helpers.strategies import WIRE_JSON, mutated
from tests.helpers.wire import wire_json

RECORDED = [
    (ANTHROPIC, "anthropic-request-tool-result-parallel.json"),
    (OPENAI_CHAT, "openai-chat-request-tool-messages-parallel.json"),
    (OPENAI_RESPONSES, "openai-responses-request-function-call-output.json"),
]
IDS = [dialect.name for dialect, _ in RECORDED]


def _exchange(dialect: Dialect, body: dict[str, Any]) -> Exchange:
    view = dialect.read_request(body)
    return Exchange("x", dialect.provider, dialect, "s1", view, body, URL("http://u"), CIMultiDict())


def _at(body: Any, path: JsonPath) -> Any:
    for step in path:
        body = body[step]
    return body


@pytest.mark.parametrize(("dialect", "name"), RECORDED, ids=IDS)
def test_results_read_with_the_request_are_reused_while_its_history_stays(dialect: Dialect, name: str) -> None:
    body = wire_json(name)
    ex = _exchange(dialect, body)
    found = ex.request_results()
    assert found and found == dialect.request_results(body)
    assert all(a is b for a, b in zip(found, (r for _, r in ex.view.result_slots), strict=True))
    # A filter that replaces another field (hidden tools, a thread) keeps the history list.
    ex.request = {**body, "tools": []}
    assert all(a is b for a, b in zip(ex.request_results(), found, strict=True))


@pytest.mark.parametrize(("dialect", "name"), RECORDED, ids=IDS)
def test_a_replaced_history_is_read_again(dialect: Dialect, name: str) -> None:
    body = wire_json(name)
    ex = _exchange(dialect, body)
    ex.request = dialect.replace_results(body, {0: "withheld"})
    assert ex.request_results()[0].content == "withheld"
    assert ex.request_results() == dialect.request_results(ex.request)
    ex.request = {key: value for key, value in body.items() if key != dialect.history_key}
    assert ex.request_results() == []


@pytest.mark.parametrize(("dialect", "name"), RECORDED, ids=IDS)
def test_every_slot_is_where_its_result_is_and_the_new_ones_are_last(dialect: Dialect, name: str) -> None:
    """Random JSON mixed into a request: each result's path leads to its content, and the
    view's new results are the last of them."""

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(body=mutated(wire_json(name), WIRE_JSON))
    def run(body: dict[str, Any]) -> None:
        view = dialect.read_request(body)
        for path, result in view.result_slots:
            assert path[0] == dialect.history_key
            assert _at(body, path[:-1]).get(path[-1], "") == result.content  # an absent one reads as ""
        new = [result for _, result in view.result_slots][len(view.result_slots) - len(view.results) :]
        assert new == view.results

    run()
