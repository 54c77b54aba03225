"""Which upstream a request belongs to, and which dialect (if any) parses it.

The sidecar connects only to its configured upstream origins: the request path is appended to
the configured base and nothing from the request (Host, absolute URIs, headers, `//host` or
`..` in the path) can change the destination or climb out of the base's path prefix.

Paths are canonicalised before anything else looks at them: percent-encoded unreserved
characters are decoded, empty segments collapse and dot segments are resolved (RFC 3986
§6.2.2). The canonical path, still percent-encoded, is what goes upstream. The routing
decision is taken on the fully decoded form, so an encoding trick (`/v1/%6dessages`,
`/x%2F..%2Fv1/messages`) cannot steer a model request past the dialect that parses it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from yarl import URL

from sidecar.dialects import BY_PATH, Dialect
from sidecar.model import Provider

_ANTHROPIC_ONLY = ("/v1/messages", "/v1/complete")
_OPENAI_ONLY = (
    "/v1/chat/",
    "/v1/responses",
    "/v1/embeddings",
    "/v1/completions",
    "/v1/audio/",
    "/v1/images/",
    "/v1/moderations",
    "/v1/assistants",
    "/v1/threads",
    "/v1/vector_stores",
    "/v1/fine_tuning/",
    "/v1/uploads",
    "/v1/realtime",
    "/v1/conversations",
    "/v1/containers",
)
_PREFIXES = {"/anthropic": Provider.ANTHROPIC, "/openai": Provider.OPENAI}
# Headers only the Anthropic SDK sends: they decide paths both providers serve (/v1/models).
_ANTHROPIC_HEADERS = frozenset({"anthropic-version", "x-api-key"})

_UNRESERVED_ESCAPE = re.compile(r"%(2[DdEe]|3[0-9]|[46][1-9A-Fa-f]|[57][0-9Aa]|5[Ff]|7[Ee])")


@dataclass(frozen=True, slots=True)
class Route:
    provider: Provider
    path: str  # canonical, percent-encoded path as the provider knows it (no /anthropic or /openai)
    dialect: Dialect | None


def _remove_dot_segments(path: str) -> str:
    """Collapse empty segments and resolve `.`/`..` without ever climbing above the root."""
    out: list[str] = []
    segments = path.split("/")
    for segment in segments:
        if segment in ("", "."):
            continue
        if segment == "..":
            if out:
                out.pop()
            continue
        out.append(segment)
    trailing = bool(out) and segments[-1] in ("", ".", "..")
    return "/" + "/".join(out) + ("/" if trailing else "")


def canonical_path(raw_path: str) -> str:
    """The request path made unambiguous, still percent-encoded (reserved escapes kept)."""
    decoded = _UNRESERVED_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), raw_path)
    return _remove_dot_segments(decoded)


def _decision_path(path: str) -> str:
    """What any server could take the path to mean once fully decoded."""
    return _remove_dot_segments(unquote(path).replace("\\", "/"))


def _matches(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == p.rstrip("/") or path.startswith(p.rstrip("/") + "/") for p in prefixes)


def _names_anthropic(headers: Mapping[str, str]) -> bool:
    return any(name.lower() in _ANTHROPIC_HEADERS for name in headers)


def resolve(method: str, raw_path: str, headers: Mapping[str, str]) -> Route:
    """Route a request by its raw (as received, percent-encoded) path and its headers."""
    path = canonical_path(raw_path)
    for prefix, provider in _PREFIXES.items():
        if path == prefix or path.startswith(prefix + "/"):
            rest = path[len(prefix) :] or "/"
            return Route(provider, rest, _dialect(method, _decision_path(rest), provider))
    decided = _decision_path(path)
    if _matches(decided, _ANTHROPIC_ONLY):
        provider = Provider.ANTHROPIC
    elif _matches(decided, _OPENAI_ONLY):
        provider = Provider.OPENAI
    elif _names_anthropic(headers):
        provider = Provider.ANTHROPIC
    else:
        provider = Provider.OPENAI
    return Route(provider, path, _dialect(method, decided, provider))


def _dialect(method: str, path: str, provider: Provider) -> Dialect | None:
    dialect = BY_PATH.get(path.rstrip("/"))
    if method.upper() != "POST" or dialect is None or dialect.provider is not provider:
        return None
    return dialect


def upstream_url(base: URL, path: str, raw_query: str) -> URL:
    """`base` path prefix + canonical request path + the query exactly as received.

    Scheme, host and port always come from `base`; nothing is re-encoded.
    """
    joined = base.raw_path.rstrip("/") + "/" + canonical_path(path).lstrip("/")
    return URL.build(
        scheme=base.scheme, authority=base.raw_authority, path=joined, query_string=raw_query, encoded=True
    )


# Untouched paths by what they serve, for sidecar_passthrough_requests_total{path_class}.
_PATH_CLASSES = (
    ("/v1/messages/count_tokens", "count_tokens"),
    ("/v1/models", "models"),
    ("/v1/files", "files"),
    ("/v1/messages/batches", "batches"),
    ("/v1/batches", "batches"),
    ("/v1/embeddings", "embeddings"),
    ("/v1/moderations", "moderations"),
    ("/v1/audio/", "audio"),
    ("/v1/images/", "images"),
)


def path_class(path: str) -> str:
    """The class of an untouched path (a small, fixed set of label values; else `other`)."""
    decided = _decision_path(path)
    return next((name for prefix, name in _PATH_CLASSES if _matches(decided, (prefix,))), "other")
