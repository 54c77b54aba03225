"""Session and call identity (DESIGN.md: "Session and call identity").

The session is the first of: the explicit header; the provider's conversation handle (an OpenAI
conversation id here; a message thread's root and a Responses chain's root are resolved from
what the sidecar remembers, in `sidecar/filters/conversation.py`); the provider's user field;
else a hash of how the conversation began (derived, weak). Ids of any length are used whole:
short ones as given, long ones as the sha256 of all of their bytes, never truncated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cachetools import LRUCache

from sidecar.model import RequestView, Session, SessionSource, canonical_json, sha256_hex

# Ids up to this length stay readable in logs and `sidecar approvals list --session`.
_MAX_PLAIN = 128

# Derived sessions by seed. A seed (the system prompt and the first user message) comes again
# on every request of its conversation, and hashing it takes 3.2 us for the benchmark's 2.8 KB,
# more for longer prompts; a seed seen before costs a string hash and a lookup instead. Bounded
# by the seeds' characters; a seed longer than a tenth of the bound is hashed every time.
DERIVED_CACHE_CHARS = 8 * 1024 * 1024
_DERIVED: LRUCache[str, tuple[Session, int]] = LRUCache(DERIVED_CACHE_CHARS, getsizeof=lambda entry: entry[1])


def _whole(raw: str) -> str:
    """The id as given when short, else the sha256 of all of it: two ids never become one."""
    return raw if len(raw) <= _MAX_PLAIN else "sha256:" + sha256_hex(raw.encode())


def named(source: SessionSource, raw: str) -> Session:
    """A session named by `source`: the header's value as it is, the others prefixed by their
    source (`thread:msg_…`, `user:alice`), so a user named like a conversation is not one."""
    value = _whole(raw)
    return Session(value if source is SessionSource.HEADER else f"{source.value}:{value}", source)


def session_id(headers: Mapping[str, str], header_name: str, view: RequestView) -> Session:
    """Header, else the request's conversation, else the user field, else derived (a thread or
    chain continuation is refined by the conversation filter, which knows their roots)."""
    explicit = (headers.get(header_name) or "").strip()
    if explicit:
        return named(SessionSource.HEADER, explicit)
    if view.conversation:
        return named(SessionSource.CONVERSATION, view.conversation)
    if view.session_hint:
        return named(SessionSource.USER, str(view.session_hint))
    return derived(view.session_seed)


def derived(seed: str) -> Session:
    """The weak session of a conversation that begins with `seed`: sha256 of its bytes."""
    known = _DERIVED.get(seed)
    if known is not None:
        return known[0]
    session = Session("derived:" + sha256_hex(seed.encode())[:32], SessionSource.DERIVED)
    if len(seed) <= DERIVED_CACHE_CHARS // 10:
        _DERIVED[seed] = (session, len(seed))
    return session


def replay_key(session: str, tool: str, arguments: Any) -> str:
    """sha256(session | tool | canonical_json(args)): equal calls give equal keys."""
    return call_key(session, tool, canonical_json(arguments))


def call_key(session: str, tool: str, canonical_arguments: bytes) -> str:
    """The replay key from arguments already in canonical form."""
    return sha256_hex(session.encode() + b"|" + tool.encode() + b"|" + canonical_arguments)
