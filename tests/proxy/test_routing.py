"""Routing: which upstream and dialect a request gets, and the URL it is sent to."""

from __future__ import annotations

import pytest
from yarl import URL

from sidecar.dialects import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES
from sidecar.memo import ShortMemo
from sidecar.model import Provider
from sidecar.proxy.routing import canonical_path, resolve, upstream_url

A, OA = Provider.ANTHROPIC, Provider.OPENAI
NO_HEADERS: dict[str, str] = {}
ANTHROPIC_SDK = {"anthropic-version": "2023-06-01"}


@pytest.mark.parametrize(
    ("method", "path", "headers", "provider", "dialect"),
    [
        ("POST", "/v1/messages", NO_HEADERS, A, ANTHROPIC),
        ("POST", "/v1/chat/completions", ANTHROPIC_SDK, OA, OPENAI_CHAT),
        ("POST", "/v1/responses", NO_HEADERS, OA, OPENAI_RESPONSES),
        ("POST", "/v1/messages/", NO_HEADERS, A, ANTHROPIC),
        ("POST", "/v1/messages/count_tokens", NO_HEADERS, A, None),
        ("POST", "/v1/messages/batches", NO_HEADERS, A, None),
        ("GET", "/v1/messages", NO_HEADERS, A, None),
        ("GET", "/v1/responses/resp_1", NO_HEADERS, OA, OPENAI_RESPONSES),  # read back and checked
        ("POST", "/v1/embeddings", ANTHROPIC_SDK, OA, None),
        # Both providers serve these: the SDK's own headers decide.
        ("GET", "/v1/models", NO_HEADERS, OA, None),
        ("GET", "/v1/models", ANTHROPIC_SDK, A, None),
        ("GET", "/v1/models", {"X-Api-Key": "k"}, A, None),
        ("GET", "/v1/models", {"Authorization": "Bearer k"}, OA, None),
        ("GET", "/v1/files", {"ANTHROPIC-VERSION": "2023-06-01"}, A, None),
        # Explicit prefixes win over everything else.
        ("POST", "/anthropic/v1/messages", NO_HEADERS, A, ANTHROPIC),
        ("POST", "/openai/v1/chat/completions", ANTHROPIC_SDK, OA, OPENAI_CHAT),
        ("GET", "/anthropic/v1/models", NO_HEADERS, A, None),
        ("GET", "/openai/v1/models", ANTHROPIC_SDK, OA, None),
        # The shape picks the dialect, the prefix only the upstream (an OpenAI-compatible server
        # may serve Anthropic's Messages API, Anthropic serves the Chat Completions API).
        ("POST", "/openai/v1/messages", NO_HEADERS, OA, ANTHROPIC),
        ("POST", "/anthropic/v1/chat/completions", NO_HEADERS, A, OPENAI_CHAT),
        ("POST", "/anthropic/v1/responses", NO_HEADERS, A, OPENAI_RESPONSES),
        # With or without /v1, under any prefix.
        ("POST", "/messages", NO_HEADERS, A, ANTHROPIC),
        ("POST", "/chat/completions", NO_HEADERS, OA, OPENAI_CHAT),
        ("POST", "/responses", NO_HEADERS, OA, OPENAI_RESPONSES),
        ("POST", "/api/v2/messages", NO_HEADERS, A, ANTHROPIC),
        ("POST", "/openai/deployments/gpt/chat/completions", NO_HEADERS, OA, OPENAI_CHAT),
        # Assistants thread messages are not Anthropic's /messages.
        ("POST", "/v1/threads/thread_1/messages", NO_HEADERS, OA, None),
        # Encoding tricks cannot steer a model request past its dialect.
        ("POST", "/v1/%6dessages", NO_HEADERS, A, ANTHROPIC),
        ("POST", "/v1//messages", NO_HEADERS, A, ANTHROPIC),
        ("POST", "/x/../v1/messages", NO_HEADERS, A, ANTHROPIC),
        ("POST", "/x/%2e%2e/v1/messages", NO_HEADERS, A, ANTHROPIC),
        ("POST", "/x%2F..%2Fv1/chat/completions", NO_HEADERS, OA, OPENAI_CHAT),
        ("POST", "/v1%2Fresponses", NO_HEADERS, OA, OPENAI_RESPONSES),
        ("post", "/v1/messages", NO_HEADERS, A, ANTHROPIC),
    ],
)
def test_resolve(method, path, headers, provider, dialect):
    route = resolve(method, path, headers)
    assert route.provider is provider
    assert route.dialect is dialect


@pytest.mark.parametrize(
    ("path", "provider_path"),
    [
        ("/anthropic/v1/messages", "/v1/messages"),
        ("/openai/v1/models", "/v1/models"),
        ("/anthropic", "/"),
        ("/anthropicx/v1/models", "/anthropicx/v1/models"),
        ("/v1/files/file%2Fx", "/v1/files/file%2Fx"),
    ],
)
def test_route_path_drops_only_our_prefix(path, provider_path):
    assert resolve("GET", path, NO_HEADERS).path == provider_path


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("/v1/messages", "/v1/messages"),
        ("/v1/messages/", "/v1/messages/"),
        ("/", "/"),
        ("", "/"),
        ("//127.0.0.1:9/x", "/127.0.0.1:9/x"),
        ("/..//x", "/x"),
        ("/../../x", "/x"),
        ("/a/./b/../c", "/a/c"),
        ("/a/..", "/"),
        ("/a/b/..", "/a/"),
        ("/%7Euser/%41", "/~user/A"),
        ("/a%2Fb%3Fc%20d", "/a%2Fb%3Fc%20d"),  # reserved escapes stay escaped
        ("/%2e%2e/x", "/x"),
    ],
)
def test_canonical_path(raw, canonical):
    assert canonical_path(raw) == canonical


BASE = URL("http://10.0.0.5:8000")
PREFIXED = URL("http://10.0.0.5:8000/anthropic")


@pytest.mark.parametrize(
    ("base", "path", "query", "expected"),
    [
        (BASE, "/v1/messages", "", "http://10.0.0.5:8000/v1/messages"),
        (PREFIXED, "/v1/messages", "", "http://10.0.0.5:8000/anthropic/v1/messages"),
        (URL("http://10.0.0.5:8000/anthropic/"), "/v1/messages", "", "http://10.0.0.5:8000/anthropic/v1/messages"),
        (
            PREFIXED,
            "/v1/models",
            "limit=2&after_id=a%26b",
            "http://10.0.0.5:8000/anthropic/v1/models?limit=2&after_id=a%26b",
        ),
        (BASE, "/v1/files", "purpose=fine%2Dtune&x=%2F+y", "http://10.0.0.5:8000/v1/files?purpose=fine%2Dtune&x=%2F+y"),
        # Nothing in the path can change the origin or climb out of the prefix.
        (BASE, "//127.0.0.1:9/x", "", "http://10.0.0.5:8000/127.0.0.1:9/x"),
        (PREFIXED, "/..//x", "", "http://10.0.0.5:8000/anthropic/x"),
        (PREFIXED, "/../../../v1/messages", "", "http://10.0.0.5:8000/anthropic/v1/messages"),
        (PREFIXED, "/%2e%2e/x", "", "http://10.0.0.5:8000/anthropic/x"),
        (BASE, "/v1/files/a%2Fb", "", "http://10.0.0.5:8000/v1/files/a%2Fb"),
        (URL("https://user:pw@api.example.com"), "/v1/x", "", "https://user:pw@api.example.com/v1/x"),
    ],
)
def test_upstream_url(base, path, query, expected):
    url = upstream_url(base, path, query)
    assert str(url) == expected
    assert (url.scheme, url.host, url.port) == (base.scheme, base.host, base.port)
    assert url.raw_path.startswith(base.raw_path.rstrip("/") + "/")


def test_a_remembered_route_is_the_route_and_memory_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Routes are remembered by (method, raw path): asked again, or with other headers, the
    answer is what resolving afresh gives; the memory holds a bounded number of short paths."""
    from sidecar.proxy import routing

    monkeypatch.setattr(routing, "_routes", ShortMemo(routing._REMEMBERED, routing._REMEMBERED_PATH))
    cases = [
        ("GET", "/v1/models", ANTHROPIC_SDK),
        ("GET", "/v1/models", NO_HEADERS),  # same path, other headers: the headers still decide
        ("POST", "/anthropic/v1/%6dessages", NO_HEADERS),
        ("POST", "/x%2F..%2Fv1/messages", NO_HEADERS),
    ]
    fresh = [resolve(*case) for case in cases]
    again = [resolve(*case) for case in cases]
    assert again == fresh
    assert [r.provider for r in again[:2]] == [A, OA]
    assert again[2].dialect is ANTHROPIC and again[2].provider is A

    for i in range(routing._REMEMBERED + 10):
        resolve("GET", f"/v1/files/file_{i}", NO_HEADERS)
    assert len(routing._routes) <= routing._REMEMBERED
    long_path = "/v1/files/" + "a" * routing._REMEMBERED_PATH
    assert resolve("GET", long_path, NO_HEADERS).path == long_path
    assert ("GET", long_path) not in routing._routes


def test_a_remembered_upstream_url_is_the_url_and_memory_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream URLs are remembered by (base, path, query): asked again, the answer is what
    building afresh gives, and each base, path and query keeps its own."""
    from sidecar.proxy import routing

    monkeypatch.setattr(routing, "_urls", ShortMemo(routing._REMEMBERED, routing._REMEMBERED_PATH))
    cases = [
        (BASE, "/v1/messages", ""),
        (PREFIXED, "/v1/messages", ""),
        (BASE, "/v1/messages", "beta=true"),
        (BASE, "/../v1/messages", ""),
    ]
    fresh = [str(upstream_url(*case)) for case in cases]
    assert fresh == [
        "http://10.0.0.5:8000/v1/messages",
        "http://10.0.0.5:8000/anthropic/v1/messages",
        "http://10.0.0.5:8000/v1/messages?beta=true",
        "http://10.0.0.5:8000/v1/messages",
    ]
    assert [str(upstream_url(*case)) for case in cases] == fresh
    assert upstream_url(*cases[0]) is upstream_url(*cases[0])

    for i in range(routing._REMEMBERED + 10):
        upstream_url(BASE, f"/v1/files/file_{i}", "")
    assert len(routing._urls) <= routing._REMEMBERED
    long_query = "q=" + "a" * routing._REMEMBERED_PATH
    assert upstream_url(BASE, "/v1/files", long_query).raw_query_string == long_query
    assert (BASE, "/v1/files", long_query) not in routing._urls
