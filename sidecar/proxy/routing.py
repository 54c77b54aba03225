"""Which upstream a request belongs to, and which dialect (if any) parses it.

The sidecar connects only to its configured upstream origins: the request path is appended to
the configured base and nothing from the request (Host, absolute URIs, headers) can change
the destination.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from yarl import URL

from sidecar.dialects import BY_PATH, Dialect
from sidecar.model import Provider

_ANTHROPIC_ONLY = ("/v1/messages", "/v1/complete")
_OPENAI_ONLY = (
    "/v1/chat/", "/v1/responses", "/v1/embeddings", "/v1/completions", "/v1/audio/",
    "/v1/images/", "/v1/moderations", "/v1/assistants", "/v1/threads", "/v1/vector_stores",
    "/v1/fine_tuning/", "/v1/uploads", "/v1/realtime", "/v1/conversations", "/v1/containers",
)
_PREFIXES = {"/anthropic": Provider.ANTHROPIC, "/openai": Provider.OPENAI}


@dataclass(frozen=True, slots=True)
class Route:
    provider: Provider
    path: str  # path as the provider knows it, without our /anthropic or /openai prefix
    dialect: Dialect | None


def _matches(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == p.rstrip("/") or path.startswith(p.rstrip("/") + "/") for p in prefixes)


def resolve(method: str, path: str, headers: Mapping[str, str]) -> Route:
    for prefix, provider in _PREFIXES.items():
        if path == prefix or path.startswith(prefix + "/"):
            rest = path[len(prefix):] or "/"
            return Route(provider, rest, _dialect(method, rest, provider))
    if _matches(path, _ANTHROPIC_ONLY):
        provider = Provider.ANTHROPIC
    elif _matches(path, _OPENAI_ONLY):
        provider = Provider.OPENAI
    elif "anthropic-version" in headers or "x-api-key" in headers:
        provider = Provider.ANTHROPIC
    else:
        provider = Provider.OPENAI
    return Route(provider, path, _dialect(method, path, provider))


def _dialect(method: str, path: str, provider: Provider) -> Dialect | None:
    dialect = BY_PATH.get(path.rstrip("/"))
    if method != "POST" or dialect is None or dialect.provider is not provider:
        return None
    return dialect


def upstream_url(base: URL, path: str, query_string: str) -> URL:
    """`base` path prefix + request path; scheme, host and port always come from `base`."""
    joined = base.path.rstrip("/") + "/" + path.lstrip("/")
    url = base.with_path(joined, encoded=False)
    return url.with_query(query_string) if query_string else url
