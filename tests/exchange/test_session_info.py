"""`Exchange.session_info`: built once, but always the exchange's current id and source."""

from __future__ import annotations

from multidict import CIMultiDict
from yarl import URL

from sidecar.dialects import ANTHROPIC
from sidecar.exchange.state import Exchange
from sidecar.model import Provider, RequestView, Session, SessionSource


def _exchange() -> Exchange:
    return Exchange(
        "x1", Provider.ANTHROPIC, ANTHROPIC, "derived:abc", RequestView(), {}, URL("http://u"), CIMultiDict()
    )


def test_session_info_is_reused_while_unchanged() -> None:
    ex = _exchange()
    first = ex.session_info
    assert first == Session("derived:abc", SessionSource.DERIVED)
    assert ex.session_info is first


def test_session_info_follows_set_session_and_direct_assignment() -> None:
    ex = _exchange()
    assert ex.session_info.source is SessionSource.DERIVED
    ex.set_session(Session("conv-1", SessionSource.CONVERSATION))
    assert ex.session_info == Session("conv-1", SessionSource.CONVERSATION)
    ex.session = "conv-2"  # the id alone (a field like any other: nothing stops a direct write)
    assert ex.session_info == Session("conv-2", SessionSource.CONVERSATION)
    ex.session_source = SessionSource.HEADER
    assert ex.session_info == Session("conv-2", SessionSource.HEADER)
