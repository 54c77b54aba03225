"""Header hygiene: hop-by-hop headers never cross, credentials cross unchanged, secrets never print."""

from __future__ import annotations

from multidict import CIMultiDict, CIMultiDictProxy

from sidecar.proxy.headers import downstream_response_headers, upstream_request_headers

CREDENTIALS = {
    "x-api-key": "sk-ant-secret",
    "authorization": "Bearer sk-openai-secret",
    "anthropic-version": "2023-06-01",
    "anthropic-beta": "tools-2024-05-16,prompt-caching-2024-07-31",
    "openai-organization": "org-123",
    "openai-project": "proj_456",
}
HOP_BY_HOP = [
    ("Connection", "keep-alive, X-Named-By-Connection"),
    ("connection", "X-Second-Connection-Header"),
    ("Keep-Alive", "timeout=5"),
    ("TE", "trailers"),
    ("Trailer", "X-Checksum"),
    ("Transfer-Encoding", "chunked"),
    ("Upgrade", "h2c"),
    ("Proxy-Authorization", "Basic cHJveHk6cHc="),
    ("Proxy-Connection", "keep-alive"),
    ("Proxy-Authenticate", "Basic"),
    ("Proxy-Vendor-Thing", "x"),
    ("X-Named-By-Connection", "drop me"),
    ("X-Second-Connection-Header", "drop me too"),
]


def _headers(*pairs: tuple[str, str]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(pairs))


def _names(headers: CIMultiDict[str]) -> set[str]:
    return {name.lower() for name in headers}


def test_request_drops_hop_by_hop_keeps_credentials():
    incoming = _headers(
        *CREDENTIALS.items(),
        *HOP_BY_HOP,
        ("Host", "evil.example"),
        ("Content-Length", "12"),
        ("Accept-Encoding", "br, zstd"),
        ("X-Sidecar-Session", "s-1"),
        ("Content-Type", "application/json"),
        ("X-Stainless-Lang", "python"),
    )
    out = upstream_request_headers(incoming, drop=["X-Sidecar-Session"])
    for name, value in CREDENTIALS.items():
        assert out.getall(name) == [value]
    for name, _ in HOP_BY_HOP:
        assert name.lower() not in _names(out), name
    assert {"host", "content-length", "x-sidecar-session"}.isdisjoint(_names(out))
    assert out["Accept-Encoding"] == "gzip, deflate"  # only what the sidecar can decode
    assert out["Content-Type"] == "application/json"
    assert out["X-Stainless-Lang"] == "python"


def test_request_keeps_repeated_end_to_end_headers():
    out = upstream_request_headers(_headers(("anthropic-beta", "a"), ("anthropic-beta", "b")))
    assert out.getall("anthropic-beta") == ["a", "b"]


def test_response_drops_hop_by_hop_and_stale_framing():
    incoming = _headers(
        *HOP_BY_HOP,
        ("Content-Encoding", "gzip"),
        ("Content-Length", "99"),
        ("Content-Type", "application/json"),
        ("request-id", "req_1"),
        ("Set-Cookie", "a=1"),
        ("anthropic-ratelimit-requests-remaining", "49"),
    )
    out = downstream_response_headers(incoming)
    for name, _ in HOP_BY_HOP:
        assert name.lower() not in _names(out), name
    assert {"content-encoding", "content-length"}.isdisjoint(_names(out))
    assert out["request-id"] == "req_1"
    assert out["anthropic-ratelimit-requests-remaining"] == "49"
    assert out["Set-Cookie"] == "a=1"


def test_request_content_encoding_is_not_forwarded():
    """aiohttp hands the handler a decoded body: the upstream must not be told it is gzip."""
    out = upstream_request_headers(_headers(("Content-Encoding", "gzip"), ("Content-Type", "application/json")))
    assert "content-encoding" not in _names(out)
    assert out["Content-Type"] == "application/json"


def test_every_connection_header_names_headers_to_drop_in_any_case():
    pairs = (
        ("connection", "X-Hop-One"),
        ("CONNECTION", "x-hop-two , keep-alive"),
        ("X-Hop-One", "1"),
        ("x-HOP-two", "2"),
        ("X-Kept", "3"),
    )
    for incoming in (_headers(*pairs), dict(pairs)):  # a multidict, and any other mapping
        out = upstream_request_headers(incoming)
        assert _names(out) == {"x-kept", "accept-encoding"}, type(incoming)
        assert _names(downstream_response_headers(incoming)) == {"x-kept"}
