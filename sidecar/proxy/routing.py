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

from sidecar.dialects import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES, Dialect
from sidecar.memo import ShortMemo
from sidecar.model import Provider
from sidecar.proxy.coverage import Handling, PathClass, Rule, rule_for

# The dialect that reads each enforced shape (and the stored Responses objects read back).
_DIALECTS: dict[PathClass, Dialect] = {
    PathClass.MESSAGES: ANTHROPIC,
    PathClass.CHAT: OPENAI_CHAT,
    PathClass.RESPONSES: OPENAI_RESPONSES,
    PathClass.RESPONSES_RETRIEVE: OPENAI_RESPONSES,
    PathClass.HISTORY: OPENAI_RESPONSES,
}

_PREFIXES = {"/anthropic": Provider.ANTHROPIC, "/openai": Provider.OPENAI}
# Headers only the Anthropic SDK sends: they decide paths both providers serve (/v1/models).
_ANTHROPIC_HEADERS = frozenset({"anthropic-version", "x-api-key"})

_UNRESERVED_ESCAPE = re.compile(r"%(2[DdEe]|3[0-9]|[46][1-9A-Fa-f]|[57][0-9Aa]|5[Ff]|7[Ee])")


@dataclass(frozen=True, slots=True)
class Route:
    """Where a request goes (`provider`: the upstream) and what the sidecar does with it
    (`rule`: its row of the coverage table; `dialect`: the protocol the client speaks, which
    reads the body and shapes every error, whatever the upstream)."""

    provider: Provider
    path: str  # canonical, percent-encoded path as the provider knows it (no /anthropic or /openai)
    dialect: Dialect | None
    rule: Rule

    @property
    def handling(self) -> Handling:
        return self.rule.handling

    @property
    def error_dialect(self) -> Dialect:
        """Errors in the shape the client's SDK raises its normal API error for."""
        if self.dialect is not None:
            return self.dialect
        return ANTHROPIC if self.provider is Provider.ANTHROPIC else OPENAI_CHAT


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


# What a (method, raw path) resolves to, remembered: an agent sends the same few paths all the
# time, and the decoding and the table walk cost 5 us warm (more between two requests' work).
# Bounded: paths up to _REMEMBERED_PATH characters, _REMEMBERED entries (then forgotten at once).
_REMEMBERED = 1024
_REMEMBERED_PATH = 256
_routes: ShortMemo[tuple[str, str], tuple[Provider | None, str, Dialect | None, Rule]] = ShortMemo(
    _REMEMBERED, _REMEMBERED_PATH
)


def resolve(method: str, raw_path: str, headers: Mapping[str, str]) -> Route:
    """Route a request by its raw (as received, percent-encoded) path and its headers.

    The path's shape picks the row of the coverage table (and so the dialect); the sidecar's
    own prefix (`/anthropic`, `/openai`) picks the upstream, else the row's provider, else the
    SDK's headers on paths both providers serve."""
    key = (method, raw_path)
    found = _routes.get(key)
    if found is None:
        found = _routes.keep(key, _route_of(method, raw_path), len(raw_path))
    chosen, path, dialect, rule = found
    if chosen is None:
        chosen = rule.provider or (Provider.ANTHROPIC if _names_anthropic(headers) else Provider.OPENAI)
    return Route(chosen, path, dialect, rule)


def _route_of(method: str, raw_path: str) -> tuple[Provider | None, str, Dialect | None, Rule]:
    """What the path alone decides: our prefix's provider (None: none), the canonical path
    without it, the dialect and the coverage row."""
    path = canonical_path(raw_path)
    chosen: Provider | None = None
    for prefix, provider in _PREFIXES.items():
        if path == prefix or path.startswith(prefix + "/"):
            chosen, path = provider, path[len(prefix) :] or "/"
            break
    rule = rule_for(method, _decision_path(path))
    dialect = _DIALECTS.get(rule.path_class) if rule.handling is not Handling.FORWARD else None
    return chosen, path, dialect, rule


# Upstream URLs, remembered like routes (building one took 17 k instructions per request).
_urls: ShortMemo[tuple[URL, str, str], URL] = ShortMemo(_REMEMBERED, _REMEMBERED_PATH)


def upstream_url(base: URL, path: str, raw_query: str) -> URL:
    """`base` path prefix + canonical request path + the query exactly as received.

    Scheme, host and port always come from `base`; nothing is re-encoded.
    """
    key = (base, path, raw_query)
    found = _urls.get(key)
    if found is None:
        found = _urls.keep(key, _upstream_url(base, path, raw_query), len(path) + len(raw_query))
    return found


def _upstream_url(base: URL, path: str, raw_query: str) -> URL:
    joined = base.raw_path.rstrip("/") + "/" + canonical_path(path).lstrip("/")
    return URL.build(
        scheme=base.scheme, authority=base.raw_authority, path=joined, query_string=raw_query, encoded=True
    )
