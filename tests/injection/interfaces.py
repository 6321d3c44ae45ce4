"""Every REST route and MCP tool, driven the same way, for the isolation tests.

`REST_ROUTES` and `MCP_TOOLS` map each entry point to the operation it serves; `OPERATIONS` says
how to build a call of that operation aimed at one place. The drivers run a call for real: REST
through Django's test client with a bearer key, MCP through the built MCPServer's own tool
machinery (argument validation, our tool body, result conversion) with the key's principal in the
ASGI scope exactly where `BearerKeyMiddleware` puts it (or no request at all: the stdio agent).

Canaries: every write carries a fresh token (`qzx` + 6 letters). Which scope a token belongs to,
and whether it is secret, is read back from the rows that hold it, so the oracle never trusts the
code under test to say where a write landed.
"""

import itertools
import json
import re
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from urllib.parse import urlencode

from django.db.models import Q
from django.test import Client
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ValidationError

from injection.mcp_server import PRINCIPAL_KEY
from memory.models import (
    AuditEvent,
    ContextTurn,
    Memory,
    Profile,
    Scope,
    ScopeKind,
    Session,
    Snapshot,
    Thread,
)
from memory.selectors.visibility import Principal

TOKEN = re.compile(r"qzx[a-z]{6}")
COMMON_WORDS = "harbour ledger"
_serial = itertools.count()


def token_new() -> str:
    n = next(_serial)
    letters = []
    for _ in range(6):
        n, digit = divmod(n, 26)
        letters.append(string.ascii_lowercase[digit])
    return "qzx" + "".join(reversed(letters))


# --- where each token lives ---------------------------------------------------------------------


@dataclass(frozen=True)
class Owner:
    scope_id: int
    secret: bool


class TokenBook:
    """Where each canary token is stored, looked up from the rows themselves and cached."""

    def __init__(self) -> None:
        self._known: dict[str, Owner] = {}

    def owner(self, token: str) -> Owner | None:
        if token not in self._known:
            found = self._lookup(token)
            if found is None:
                return None
            self._known[token] = found
        return self._known[token]

    @staticmethod
    def _lookup(token: str) -> Owner | None:
        memory_text = (
            Q(summary__contains=token)
            | Q(narrative__gesture__contains=token)
            | Q(narrative__context__contains=token)
            | Q(narrative__moment__contains=token)
            | Q(fact__value__contains=token)
            | Q(selfconcept__content__contains=token)
        )
        rows = list(Memory.objects.filter(memory_text).values_list("scope_id", "secret"))
        for model in (ContextTurn, Thread, Snapshot):
            rows += [
                (scope_id, False)
                for scope_id in model.objects.filter(content__contains=token).values_list(
                    "scope_id", flat=True
                )
            ]
        if not rows:
            return None
        scopes = {scope_id for scope_id, _ in rows}
        assert len(scopes) == 1, f"token {token} is stored in several scopes: {scopes}"
        return Owner(scope_id=rows[0][0], secret=any(secret for _, secret in rows))

    def forget(self) -> None:
        self._known.clear()


def scope_ids_permitted(principal: Principal) -> set[int]:
    """The rule, written out independently of the code under test: the scopes a key holds, the
    projects inside a workspace it holds, and global unless the key says otherwise."""
    if principal.scope_ids is None:
        return set(Scope.objects.values_list("pk", flat=True))
    held = set(principal.scope_ids)
    held |= set(Scope.objects.filter(workspace_id__in=held).values_list("pk", flat=True))
    if principal.include_global:
        held |= set(Scope.objects.filter(kind=ScopeKind.GLOBAL).values_list("pk", flat=True))
    return held


def tokens_in(value) -> set[str]:
    return set(TOKEN.findall(json.dumps(value, ensure_ascii=False, default=str)))


def leaks(
    *,
    book: TokenBook,
    principal: Principal,
    response_text: str,
    sent: set[str],
    agent: bool = True,
) -> list[str]:
    """Tokens in a response that the caller may not see: another scope's, or (for an agent) a
    secret's. Tokens the request itself sent are its own input coming back, not a leak."""
    permitted = scope_ids_permitted(principal)
    found = []
    for token in sorted(set(TOKEN.findall(response_text)) - sent):
        owner = book.owner(token)
        if owner is None:
            continue
        if owner.scope_id not in permitted:
            found.append(f"{token} of scope {owner.scope_id}")
        elif agent and owner.secret:
            found.append(f"{token} (secret)")
    return found


ROW_MODELS = (Memory, Scope, Session, ContextTurn, AuditEvent, Thread, Snapshot, Profile)


def row_counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in ROW_MODELS}


# --- what a call aims at ------------------------------------------------------------------------


@dataclass
class Place:
    """A scope as a caller names it."""

    scope_id: int | None
    kind: str
    cwd: str = ""
    git_remote: str = ""

    def where(self, how: str) -> dict:
        if how == "cwd" and self.cwd:
            return {"cwd": self.cwd}
        if how == "git_remote" and self.git_remote:
            return {"git_remote": self.git_remote}
        if how == "none":
            return {}
        return {"scope_id": self.scope_id}


@dataclass
class Aim:
    """One call's target: where, and the ids it may act on (chosen from that place)."""

    where: dict
    token: str
    session_id: str = "s-1"
    memory_id: int = 1
    thread_id: int = 1
    turn_id: int | None = None
    secret: bool = False
    flag: bool = False
    number: int = 0


@dataclass(frozen=True)
class Operation:
    build: Callable[[Aim], dict]
    writes: bool
    # Arguments that must be refused as bad input (wrong type, unknown field, out of range).
    bad: tuple[dict, ...]
    by_id: str = ""
    global_only: bool = False


def _text(aim: Aim, what: str) -> str:
    return f"{COMMON_WORDS} {what} {aim.token}"


OPERATIONS: dict[str, Operation] = {
    "session_begin": Operation(
        lambda a: {**a.where, "session_id": a.session_id},
        writes=True,
        bad=(
            {"session_id": ""},
            {"session_id": "s", "budget_tokens": 1},
            {"session_id": 5},
            {"session_id": "s@scope-1"},
            # Before, spaces or zero-width characters alone named a session.
            {"session_id": "\u200b \u3000"},
        ),
    ),
    "turn_take": Operation(
        lambda a: {
            **a.where,
            "session_id": a.session_id,
            "content": _text(a, "turn"),
            "record": not a.flag,
        },
        writes=True,
        bad=(
            {"session_id": "s", "content": ""},
            {"session_id": "s", "content": "x", "role": 3},
            {"session_id": " ", "content": "x"},
            {"session_id": "s", "content": "x", "record": "no"},
        ),
    ),
    "memories_surface": Operation(
        lambda a: {**a.where, "text": COMMON_WORDS},
        writes=False,
        bad=({"text": ""}, {"text": "x", "budget_tokens": 10**9}),
    ),
    "turns_record": Operation(
        lambda a: {
            **a.where,
            "session_id": a.session_id,
            "turns": [{"role": "user", "content": _text(a, "synced"), "turn_id": a.token}],
        },
        writes=True,
        bad=(
            {"session_id": "s", "turns": []},
            {"session_id": "s", "turns": [{"role": "x"}]},
            {"session_id": "s", "turns": [{"role": "user", "content": "  "}]},
            {
                "session_id": "s",
                "turns": [
                    {"role": "user", "content": "x", "occurred_at": "9999-12-31T23:59:59-23:59"}
                ],
            },
        ),
    ),
    "transcript_record": Operation(
        lambda a: {
            **a.where,
            "session_id": a.session_id,
            "lines": [
                json.dumps(
                    {
                        "type": "user",
                        "uuid": a.token,
                        "message": {"role": "user", "content": _text(a, "transcript")},
                    }
                )
            ],
        },
        writes=True,
        bad=({"session_id": "s", "lines": []}, {"session_id": "s", "lines": "not a list"}),
    ),
    "turn_record": Operation(
        lambda a: {
            **a.where,
            "session_id": a.session_id,
            "role": "user",
            "speaker": "Mara",
            "content": _text(a, "recorded"),
            "turn_id": a.token,
        },
        writes=True,
        bad=(
            {"session_id": "s", "role": "user", "content": "x", "occurred_at": "not a date"},
            {
                "session_id": "s",
                "role": "user",
                "content": "x",
                "occurred_at": "9999-12-31T23:59:59-23:59",
            },
        ),
    ),
    "timeline_read": Operation(
        lambda a: {**a.where, **({"around_turn_id": a.turn_id} if a.turn_id else {})},
        writes=False,
        bad=({"limit": 0}, {"around_turn_id": -1}),
    ),
    "turns_search": Operation(
        lambda a: {**a.where, "q": COMMON_WORDS},
        writes=False,
        bad=({"q": ""}, {"q": "x", "limit": 1000}),
    ),
    "sessions_search": Operation(
        lambda a: {**a.where, "q": COMMON_WORDS},
        writes=False,
        bad=({"q": ""}, {"q": "x", "limit": 51}),
    ),
    "fact_create": Operation(
        lambda a: {
            **a.where,
            "profile_name": "user",
            "kind": "fact",
            "predicate": f"note_{a.number}",
            "value": f"harbour {a.token}",
            "secret": a.secret,
        },
        writes=True,
        bad=(
            {"profile_name": "u", "kind": "fact", "predicate": "BAD KEY", "value": "v"},
            {"profile_name": "u", "kind": "fact", "predicate": "ok_key", "value": "v" * 61},
            {
                "profile_name": "u",
                "kind": "fact",
                "predicate": "ok_key",
                "value": "v",
                "confidence": float("nan"),
            },
            {
                "profile_name": "u",
                "kind": "fact",
                "predicate": "ok_key",
                "value": "v",
                "valid_from": "9999-12-31T23:59:59-23:59",
            },
        ),
    ),
    "narrative_create": Operation(
        lambda a: {
            **a.where,
            "gesture": _text(a, "narrative"),
            "tags": ["harbour"],
            "importance": 4,
            "secret": a.secret,
        },
        writes=True,
        bad=(
            {"gesture": ""},
            {"gesture": "g", "importance": 9},
            {"gesture": "g", "secret": "x"},
            {"gesture": "g", "expires_at": "0001-01-01T00:00:00+14:00"},
            {"gesture": "g", "depends_on": ["memory:" + "9" * 30]},
            {"gesture": "g", "depends_on": ["memory:²"]},
            # Before, lax parsing took "yes" as a flag and true as a number.
            {"gesture": "g", "pinned": "yes"},
            {"gesture": "g", "confidence": True},
        ),
    ),
    "memories_list": Operation(
        lambda a: {**a.where, "status": "" if a.flag else "active"},
        writes=False,
        bad=({"status": "nonsense"}, {"limit": 0}, {"offset": "+1"}),
    ),
    "memory_recall": Operation(
        lambda a: {"memory_id": a.memory_id},
        writes=False,
        bad=({"memory_id": 0}, {"memory_id": "abc"}),
        by_id="memory",
    ),
    "memory_edit": Operation(
        lambda a: {"memory_id": a.memory_id, "changes": {"importance": 4}, "reason": "isolation"},
        writes=True,
        bad=(
            {"memory_id": 1, "changes": {"importance": 0}},
            {"memory_id": 1, "changes": 3},
            {"memory_id": 1, "changes": {"expires_at": "9999-12-31T23:59:59-23:59"}},
        ),
        by_id="memory",
    ),
    "memory_expire": Operation(
        lambda a: {"memory_id": a.memory_id, "reason": "isolation"},
        writes=True,
        bad=({"memory_id": 1, "reason": ""}, {"memory_id": -5, "reason": "r"}),
        by_id="memory",
    ),
    "profiles_list": Operation(
        lambda a: {**a.where}, writes=False, bad=({"name": "x" * 500}, {"scope_id": 0})
    ),
    "self_concept_read": Operation(lambda a: {}, writes=False, bad=({"field": "fact"},)),
    "self_concept_set": Operation(
        lambda a: {"field": "terrain", "content": _text(a, "self")},
        writes=True,
        bad=({"field": "mood", "content": "x"}, {"field": "fact", "content": ""}),
        global_only=True,
    ),
    "threads_list": Operation(
        lambda a: {**a.where, "status": ""},
        writes=False,
        bad=({"status": "closed"}, {"limit": 10_000}),
    ),
    "thread_create": Operation(
        lambda a: {**a.where, "content": _text(a, "thread")},
        writes=True,
        bad=({"content": ""}, {"content": "x", "importance": 6}),
    ),
    "thread_update": Operation(
        lambda a: {"thread_id": a.thread_id, "status": "explored", "reason": "isolation"},
        writes=True,
        bad=({"thread_id": 1, "status": "done"}, {"thread_id": 0, "status": "open"}),
        by_id="thread",
    ),
    "snapshots_list": Operation(
        lambda a: {**a.where, "limit": 5},
        writes=False,
        bad=({"limit": 0}, {"limit": "many"}, {"limit": "5.0"}),
    ),
    "snapshot_create": Operation(
        lambda a: {**a.where, "content": _text(a, "snapshot")},
        writes=True,
        bad=({"content": ""}, {"content": "x" * 5000}),
    ),
    "memories_search": Operation(
        lambda a: {**a.where, "q": COMMON_WORDS},
        writes=False,
        bad=({"q": ""}, {"q": "x", "memory_type": "poem"}),
    ),
    "stats_read": Operation(
        lambda a: {**a.where}, writes=False, bad=({"scope_id": -1}, {"cwd": "x" * 2000})
    ),
    "heatmap_read": Operation(
        lambda a: {**a.where, "days": 30},
        writes=False,
        bad=({"days": 0}, {"days": 400}, {"days": True}),
    ),
    "clusters_read": Operation(
        lambda a: {**a.where}, writes=False, bad=({"scope_id": "one"}, {"git_remote": "x" * 600})
    ),
    "graph_read": Operation(
        lambda a: {**a.where}, writes=False, bad=({"scope_id": 0}, {"cwd": "x" * 2000})
    ),
}

# Every REST route: (method, path) → the operation it serves. A new route fails the meta-test
# until it is listed here, and so gets every case below.
REST_ROUTES: dict[tuple[str, str], str] = {
    ("POST", "/api/v1/session/start"): "session_begin",
    ("POST", "/api/v1/turn"): "turn_take",
    ("POST", "/api/v1/surface"): "memories_surface",
    ("POST", "/api/v1/turns"): "turns_record",
    ("POST", "/api/v1/transcripts"): "transcript_record",
    ("GET", "/api/v1/timeline"): "timeline_read",
    ("GET", "/api/v1/timeline/search"): "turns_search",
    ("GET", "/api/v1/timeline/sessions"): "sessions_search",
    ("POST", "/api/v1/facts"): "fact_create",
    ("POST", "/api/v1/narratives"): "narrative_create",
    ("GET", "/api/v1/memories"): "memories_list",
    ("GET", "/api/v1/memories/{memory_id}"): "memory_recall",
    ("PATCH", "/api/v1/memories/{memory_id}"): "memory_edit",
    ("DELETE", "/api/v1/memories/{memory_id}"): "memory_expire",
    ("GET", "/api/v1/profiles"): "profiles_list",
    ("GET", "/api/v1/self-concept"): "self_concept_read",
    ("POST", "/api/v1/self-concept"): "self_concept_set",
    ("GET", "/api/v1/threads"): "threads_list",
    ("POST", "/api/v1/threads"): "thread_create",
    ("PATCH", "/api/v1/threads/{thread_id}"): "thread_update",
    ("GET", "/api/v1/snapshots"): "snapshots_list",
    ("POST", "/api/v1/snapshots"): "snapshot_create",
    ("GET", "/api/v1/search"): "memories_search",
    ("GET", "/api/v1/stats"): "stats_read",
    ("GET", "/api/v1/attention"): "heatmap_read",
    ("GET", "/api/v1/clusters"): "clusters_read",
    ("GET", "/api/v1/graph"): "graph_read",
}

# Every MCP tool → the operation it serves.
MCP_TOOLS: dict[str, str] = {
    "memory_write": "narrative_create",
    "memory_write_profile": "fact_create",
    "memory_recall": "memory_recall",
    "memory_list": "memories_list",
    "memory_search": "memories_search",
    "memory_update": "memory_edit",
    "memory_expire": "memory_expire",
    "memory_surface": "memories_surface",
    "memory_session_start": "session_begin",
    "context_record": "turn_record",
    "context_sync": "turns_record",
    "context_record_transcript": "transcript_record",
    "context_search": "turns_search",
    "context_search_sessions": "sessions_search",
    "context_timeline": "timeline_read",
    "memory_read_profiles": "profiles_list",
    "memory_write_self_concept": "self_concept_set",
    "memory_read_self_concept": "self_concept_read",
    "memory_write_snapshot": "snapshot_create",
    "memory_read_snapshot": "snapshots_list",
    "memory_write_thread": "thread_create",
    "memory_update_thread": "thread_update",
    "memory_read_threads": "threads_list",
    "memory_graph": "graph_read",
    "memory_attention_heatmap": "heatmap_read",
    "memory_soft_clusters": "clusters_read",
    "memory_stats": "stats_read",
}

# --- drivers ------------------------------------------------------------------------------------


@dataclass
class Answer:
    """What an interface answered: a status (MCP: 200, or 400 for a tool error, 500 for a
    crash) and the text an agent would read."""

    status: int
    text: str
    body: object = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def refused(self) -> bool:
        return 400 <= self.status < 500


def rest_call(
    client: Client, route: tuple[str, str], arguments: dict, *, request_id: str = ""
) -> Answer:
    method, template = route
    arguments = dict(arguments)
    path = template
    for name in re.findall(r"{(\w+)}", template):
        path = path.replace("{" + name + "}", str(arguments.pop(name, "")))
    headers = {"HTTP_X_REQUEST_ID": request_id} if request_id else {}
    if method in {"GET", "DELETE"}:
        query = urlencode(arguments)
        response = client.generic(method, f"{path}?{query}" if query else path, **headers)
    else:
        response = client.generic(
            method, path, json.dumps(arguments), content_type="application/json", **headers
        )
    text = response.content.decode("utf-8", "replace")
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    return Answer(status=response.status_code, text=text, body=body)


class McpDriver:
    """Calls the built server's tools synchronously in this thread, through the SDK's own argument
    validation and result conversion around our tool body, so they share the test's database
    connection (the SDK would run a sync tool on a worker thread, outside the test transaction)."""

    def __init__(self, server) -> None:
        self.server = server

    def call(self, tool: str, arguments: dict, *, principal: Principal | None) -> Answer:
        """`principal` None is the stdio agent: no HTTP request at all."""
        request = (
            None
            if principal is None
            else SimpleNamespace(scope={PRINCIPAL_KEY: principal}, headers={})
        )
        return self.call_with_request(tool, arguments, request=request)

    def call_with_request(self, tool: str, arguments: dict, *, request) -> Answer:
        found = self.server.tools_ensure().get_tool(tool)
        context = Context(request_context=SimpleNamespace(request=request), mcp_server=self.server)
        try:
            validated = found.fn_metadata.validate_arguments(arguments)
        except ValidationError as exc:
            return Answer(status=400, text=str(exc))
        try:
            result = found.fn(**validated, **{found.context_kwarg: context})
        except ToolError as exc:
            return Answer(status=400, text=str(exc))
        except Exception as exc:  # a crash: what the SDK would report as UnexpectedToolError
            return Answer(status=500, text=f"{exc!r}")
        converted = found.fn_metadata.convert_result(result)
        body = converted.structured_content
        text = json.dumps(body, ensure_ascii=False, default=str) + "".join(
            getattr(block, "text", "") for block in converted.content
        )
        return Answer(status=400 if converted.is_error else 200, text=text, body=body)


def inline_worker_threads(monkeypatch) -> None:
    """A tool's worker thread drops stale connections first; called inline, the connection is the
    test's own transaction, which must stay open."""
    from injection import mcp_tools

    monkeypatch.setattr(mcp_tools, "close_old_connections", lambda: None)


@dataclass
class Tally:
    """How often each entry point was exercised, so a test can prove it reached all of them."""

    calls: dict[str, int] = field(default_factory=dict)

    def add(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
