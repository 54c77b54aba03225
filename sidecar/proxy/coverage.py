"""The coverage contract (docs/coverage.md): what the sidecar does with every path.

Every request falls in exactly one row of `RULES` (first match wins, on the fully decoded path
without the sidecar's own `/anthropic` / `/openai` prefix):

- `ENFORCE`: a model request (`…/messages`, `…/chat/completions`, `…/responses`, POST, with or
  without `/v1`, under any prefix): parsed by the dialect of that shape, every call checked;
- `RETRIEVE`: a stored Responses response read back (`GET /v1/responses/{id}`, the stream resume,
  `POST …/cancel`): checked like a created one, refused calls removed (no repair round);
- `HISTORY`: listings of items the provider keeps (`…/input_items`, conversation items,
  `/responses/compact`): the calls the sidecar refused or withheld are removed;
- `UNPARSED`: paths that can carry a model tool call but that no dialect parses (Assistants,
  batches, Realtime, hosted agents, stored Chat completions, and anything unknown): refused
  unless `coverage.unparsed.<class>` says `forward`;
- `FORWARD`: paths that cannot carry a tool call (models, files, count_tokens, embeddings…):
  forwarded untouched.

WebSocket upgrades are refused on every path (`Upgrade: websocket`): no dialect reads frames.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from sidecar.config.settings import CoverageSettings
from sidecar.model import Provider


class Handling(StrEnum):
    ENFORCE = "enforce"
    RETRIEVE = "retrieve"
    HISTORY = "history"
    UNPARSED = "unparsed"
    FORWARD = "forward"


class PathClass(StrEnum):
    """What a path serves: the `path_class` label and the `coverage.unparsed.<class>` keys."""

    MESSAGES = "messages"
    CHAT = "chat_completions"
    RESPONSES = "responses"
    RESPONSES_RETRIEVE = "responses_retrieve"
    HISTORY = "history"
    ASSISTANTS = "assistants"
    BATCHES = "batches"
    REALTIME = "realtime"
    HOSTED_AGENTS = "hosted_agents"
    STORED_COMPLETIONS = "stored_completions"
    COUNT_TOKENS = "count_tokens"
    MODELS = "models"
    FILES = "files"
    EMBEDDINGS = "embeddings"
    MODERATIONS = "moderations"
    AUDIO = "audio"
    IMAGES = "images"
    VIDEOS = "videos"
    LEGACY_COMPLETIONS = "legacy_completions"
    STORAGE = "storage"  # uploads, vector stores, containers, skills, vaults, memory stores
    FINE_TUNING = "fine_tuning"  # fine-tuning jobs, evals, graders
    ADMIN = "admin"  # organizations, projects, webhooks, compliance, user profiles, tunnels
    CONVERSATIONS = "conversations"  # conversation objects (their item listings are HISTORY)
    UNKNOWN = "unknown"


ANY: frozenset[str] = frozenset()
POST = frozenset({"POST"})
GET = frozenset({"GET"})


@dataclass(frozen=True, slots=True)
class Rule:
    path_class: PathClass
    pattern: re.Pattern[str]
    handling: Handling
    methods: frozenset[str] = ANY  # empty: every method
    provider: Provider | None = None  # None: both serve it, the SDK's headers decide
    # For refused rows: what to use instead (docs/coverage.md repeats it).
    instead: str = ""

    def matches(self, method: str, path: str) -> bool:
        return (not self.methods or method in self.methods) and self.pattern.search(path) is not None


def _at(prefixes: str) -> re.Pattern[str]:
    """`/v1/<one of prefixes>` (or without `/v1`) and everything below it."""
    return re.compile(rf"^(?:/v1)?/(?:{prefixes})(?:/|$)")


ANT, OAI = Provider.ANTHROPIC, Provider.OPENAI
_POST = "POST, the one method of a model endpoint"
_CREATE_INSTEAD = "create requests (POST /v1/messages, /v1/chat/completions or /v1/responses) through the sidecar"

RULES: tuple[Rule, ...] = (
    # Ahead of the model shapes: these contain `/messages` or `/responses` segments too.
    Rule(
        PathClass.ASSISTANTS,
        _at("assistants|threads"),
        Handling.UNPARSED,
        provider=OAI,
        instead="the Responses API (POST /v1/responses): the Assistants API's runs carry tool calls "
        "the sidecar does not parse",
    ),
    Rule(
        PathClass.REALTIME,
        _at("realtime|live"),
        Handling.UNPARSED,
        provider=OAI,
        instead="HTTP: POST /v1/responses with stream: true (Realtime and live sessions carry function "
        "calls the sidecar does not parse)",
    ),
    Rule(
        PathClass.COUNT_TOKENS,
        re.compile(r"^(?:/v1)?/messages/count_tokens/?$"),
        Handling.FORWARD,
        provider=ANT,
    ),
    Rule(
        PathClass.BATCHES,
        _at("messages/batches"),
        Handling.UNPARSED,
        provider=ANT,
        instead="one request per conversation turn: " + _CREATE_INSTEAD + " (batch results carry tool "
        "calls nobody checks)",
    ),
    Rule(
        PathClass.BATCHES,
        _at("batches"),
        Handling.UNPARSED,
        provider=OAI,
        instead="one request per conversation turn: " + _CREATE_INSTEAD + " (batch results carry tool "
        "calls nobody checks)",
    ),
    Rule(
        PathClass.STORED_COMPLETIONS,
        re.compile(r"(?:^|/)chat/completions/[^/]+(?:/messages)?/?$"),
        Handling.UNPARSED,
        provider=OAI,
        instead="the reply of the create request itself (stored completions are read back unchecked)",
    ),
    Rule(
        PathClass.STORED_COMPLETIONS,
        re.compile(r"(?:^|/)chat/completions/?$"),
        Handling.UNPARSED,
        methods=GET,
        provider=OAI,
        instead="the reply of the create request itself (stored completions are listed unchecked)",
    ),
    Rule(PathClass.CHAT, re.compile(r"(?:^|/)chat/completions/?$"), Handling.ENFORCE, methods=POST, provider=OAI),
    Rule(
        PathClass.RESPONSES,
        re.compile(r"(?:^|/)responses/input_tokens/?$"),
        Handling.FORWARD,
        methods=POST,
        provider=OAI,
    ),
    Rule(PathClass.HISTORY, re.compile(r"(?:^|/)responses/compact/?$"), Handling.HISTORY, methods=POST, provider=OAI),
    Rule(
        PathClass.HISTORY,
        re.compile(r"(?:^|/)responses/[^/]+/input_items/?$"),
        Handling.HISTORY,
        methods=GET,
        provider=OAI,
    ),
    Rule(
        PathClass.RESPONSES_RETRIEVE,
        re.compile(r"(?:^|/)responses/[^/]+/?$"),
        Handling.RETRIEVE,
        methods=GET,
        provider=OAI,
    ),
    Rule(
        PathClass.RESPONSES_RETRIEVE,
        re.compile(r"(?:^|/)responses/[^/]+/cancel/?$"),
        Handling.RETRIEVE,
        methods=POST,
        provider=OAI,
    ),
    Rule(
        PathClass.RESPONSES, re.compile(r"(?:^|/)responses/[^/]+/?$"), Handling.FORWARD, methods=frozenset({"DELETE"})
    ),
    Rule(PathClass.RESPONSES, re.compile(r"(?:^|/)responses/?$"), Handling.ENFORCE, methods=POST, provider=OAI),
    Rule(PathClass.MESSAGES, re.compile(r"(?:^|/)messages/?$"), Handling.ENFORCE, methods=POST, provider=ANT),
    # A model shape with another method: no such endpoint; refused as unknown, in its provider's shape.
    Rule(PathClass.UNKNOWN, re.compile(r"(?:^|/)messages/?$"), Handling.UNPARSED, provider=ANT, instead=_POST),
    Rule(PathClass.UNKNOWN, re.compile(r"(?:^|/)responses/?$"), Handling.UNPARSED, provider=OAI, instead=_POST),
    # After the model shapes: Azure OpenAI serves /openai/deployments/{name}/chat/completions.
    Rule(
        PathClass.HOSTED_AGENTS,
        _at("agents|chatkit|sessions|environments|deployments|deployment_runs|dreams"),
        Handling.UNPARSED,
        instead="an agent loop of your own over " + _CREATE_INSTEAD + "; hosted agent sessions run tool "
        "calls the sidecar cannot check",
    ),
    Rule(
        PathClass.HISTORY,
        re.compile(r"^(?:/v1)?/conversations/[^/]+/items(?:/[^/]+)?/?$"),
        Handling.HISTORY,
        methods=GET,
        provider=OAI,
    ),
    Rule(PathClass.CONVERSATIONS, _at("conversations"), Handling.FORWARD, provider=OAI),
    Rule(PathClass.MODELS, _at("models"), Handling.FORWARD),
    Rule(PathClass.FILES, _at("files"), Handling.FORWARD),
    Rule(PathClass.EMBEDDINGS, _at("embeddings"), Handling.FORWARD, provider=OAI),
    Rule(PathClass.MODERATIONS, _at("moderations"), Handling.FORWARD, provider=OAI),
    Rule(PathClass.AUDIO, _at("audio"), Handling.FORWARD, provider=OAI),
    Rule(PathClass.IMAGES, _at("images"), Handling.FORWARD, provider=OAI),
    Rule(PathClass.VIDEOS, _at("videos"), Handling.FORWARD, provider=OAI),
    Rule(PathClass.LEGACY_COMPLETIONS, _at("completions"), Handling.FORWARD, provider=OAI),
    Rule(PathClass.LEGACY_COMPLETIONS, _at("complete"), Handling.FORWARD, provider=ANT),
    Rule(
        PathClass.STORAGE,
        _at("uploads|vector_stores|containers|skills|vaults|memory_stores"),
        Handling.FORWARD,
    ),
    Rule(PathClass.FINE_TUNING, _at("fine_tuning|evals"), Handling.FORWARD, provider=OAI),
    Rule(
        PathClass.ADMIN,
        _at(
            "organizations|organization|projects|webhook_endpoints|webhook_event_types|compliance|"
            "user_profiles|tunnels|content_provenance_checks|safety"
        ),
        Handling.FORWARD,
    ),
)

UNKNOWN = Rule(
    PathClass.UNKNOWN,
    re.compile(""),
    Handling.UNPARSED,
    instead="a path the coverage table lists (docs/coverage.md), or coverage.unparsed.unknown: forward "
    "for paths that cannot carry a tool call",
)


def rule_for(method: str, path: str) -> Rule:
    """The row of the coverage table for a request (`path`: decoded, without our prefix)."""
    upper = method.upper()
    return next((rule for rule in RULES if rule.matches(upper, path)), UNKNOWN)


def refused(rule: Rule, settings: CoverageSettings) -> bool:
    """Whether an UNPARSED (or retrieve) row is refused under these settings."""
    if rule.handling is Handling.RETRIEVE:
        return settings.retrieve == "refuse"
    if rule.handling is not Handling.UNPARSED:
        return False
    return bool(getattr(settings.unparsed, rule.path_class.value) == "refuse")


def refusal_message(rule: Rule, method: str, path: str) -> str:
    """The actionable error an agent gets for a refused path."""
    if rule.handling is Handling.RETRIEVE:
        return (
            f"the sidecar refuses {method} {path}: reading stored responses back is turned off "
            "(coverage.retrieve: refuse); use the reply of the create request"
        )
    setting = f"coverage.unparsed.{rule.path_class.value}"
    return (
        f"the sidecar refuses {method} {path}: this path can carry model tool calls that the sidecar "
        f"does not check ({rule.path_class.value}); use {rule.instead}. An operator can forward it "
        f"unchecked with {setting}: forward"
    )


WEBSOCKET_MESSAGE = (
    "the sidecar does not enforce WebSocket connections (Responses over WebSocket, Realtime): use HTTP, "
    "POST /v1/responses with stream: true (OpenAI Agents SDK: the default HTTP transport, "
    "OpenAIResponsesModel, not OpenAIResponsesWSModel)"
)
