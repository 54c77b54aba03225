"""Header hygiene: hop-by-hop headers never cross the proxy; secrets never reach a log."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from multidict import CIMultiDict

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "trailers", "transfer-encoding", "upgrade", "proxy-connection",
})
# Set by the sidecar itself on each side of the hop.
_REQUEST_OWN = frozenset({"host", "content-length", "accept-encoding"})
_RESPONSE_OWN = frozenset({"content-length", "content-encoding"})
SECRET_HEADERS = frozenset({
    "authorization", "x-api-key", "api-key", "proxy-authorization", "cookie", "set-cookie",
    "openai-organization", "openai-project", "anthropic-admin-api-key",
})
# We decode what we read; only ask for encodings aiohttp can decode.
UPSTREAM_ACCEPT_ENCODING = "gzip, deflate"


def _connection_tokens(headers: Mapping[str, str]) -> set[str]:
    value = headers.get("connection", "")
    return {token.strip().lower() for token in value.split(",") if token.strip()}


def _filtered(items: Iterable[tuple[str, str]], drop: frozenset[str], extra: set[str]) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in items:
        lower = name.lower()
        if lower in HOP_BY_HOP or lower in drop or lower in extra:
            continue
        out.add(name, value)
    return out


def upstream_request_headers(headers: Mapping[str, str], drop: Iterable[str] = ()) -> CIMultiDict[str]:
    extra = _connection_tokens(headers) | {d.lower() for d in drop}
    out = _filtered(headers.items(), _REQUEST_OWN, extra)
    out["Accept-Encoding"] = UPSTREAM_ACCEPT_ENCODING
    return out


def downstream_response_headers(headers: Mapping[str, str]) -> CIMultiDict[str]:
    return _filtered(headers.items(), _RESPONSE_OWN, _connection_tokens(headers))


def loggable(headers: Mapping[str, str]) -> dict[str, str]:
    """Headers safe to log: secret ones are replaced, never printed."""
    return {k: ("[REDACTED]" if k.lower() in SECRET_HEADERS else v) for k, v in headers.items()}
