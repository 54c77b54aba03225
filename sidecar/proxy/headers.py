"""Header hygiene: hop-by-hop headers never cross the proxy; secrets never reach a log."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from multidict import CIMultiDict

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "proxy-connection",
    }
)
# Every Proxy-* header concerns one hop (Proxy-Authorization, Proxy-Connection, vendor ones).
HOP_BY_HOP_PREFIX = "proxy-"
# Set by the sidecar itself on each side of the hop.
# aiohttp decodes compressed request bodies as it reads them: what goes upstream is plain,
# so a Content-Encoding from the agent would be a lie.
_REQUEST_OWN = frozenset({"host", "content-length", "accept-encoding", "content-encoding"})
_RESPONSE_OWN = frozenset({"content-length", "content-encoding"})
# What never crosses in each direction, in one set (each header is looked up once).
_REQUEST_DROPPED = HOP_BY_HOP | _REQUEST_OWN
_RESPONSE_DROPPED = HOP_BY_HOP | _RESPONSE_OWN
# We decode what we read; only ask for encodings aiohttp can decode.
UPSTREAM_ACCEPT_ENCODING = "gzip, deflate"


def _connection_tokens(headers: Mapping[str, str]) -> set[str]:
    """Header names listed by every Connection header (there may be several)."""
    getall = getattr(headers, "getall", None)  # a multidict finds them without a walk
    if getall is not None:
        values = getall("connection", ())
    else:
        values = [value for name, value in headers.items() if name.lower() == "connection"]
    return {token.strip().lower() for value in values for token in value.split(",") if token.strip()}


def _filtered(items: Iterable[tuple[str, str]], dropped: frozenset[str], extra: set[str]) -> CIMultiDict[str]:
    """`dropped`: hop-by-hop headers and the side's own, lower case; `extra`: more of them."""
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in items:
        lower = name.lower()
        if lower in dropped or lower in extra or lower.startswith(HOP_BY_HOP_PREFIX):
            continue
        out.add(name, value)
    return out


def upstream_request_headers(headers: Mapping[str, str], drop: Iterable[str] = ()) -> CIMultiDict[str]:
    """What the agent sent, minus hop-by-hop headers, `drop` and what the sidecar sets itself."""
    extra = _connection_tokens(headers) | {d.lower() for d in drop}
    out = _filtered(headers.items(), _REQUEST_DROPPED, extra)
    out["Accept-Encoding"] = UPSTREAM_ACCEPT_ENCODING
    return out


def downstream_response_headers(headers: Mapping[str, str]) -> CIMultiDict[str]:
    """What the provider sent, minus hop-by-hop headers and the framing of a body we decoded."""
    return _filtered(headers.items(), _RESPONSE_DROPPED, _connection_tokens(headers))
