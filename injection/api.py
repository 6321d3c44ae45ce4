"""The REST API (django-ninja) under /api/v1/, OpenAPI docs at /api/docs.

Every route needs an API key (`Authorization: Bearer tl_…`, created by `manage.py apikey create`);
the key's scopes bound what a request may read or write. Endpoints parse, call one service, format.
Service errors become JSON `{"detail": message}` with 400 / 403 / 404; a missing or bad key is 401.
"""

import uuid
from datetime import datetime
from typing import Literal

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from ninja import Field, NinjaAPI, Query, Schema
from ninja.errors import AuthenticationError
from ninja.security import HttpBearer

from dream.selectors import attention_heatmap_read
from injection.services.access import (
    Principal,
    apikey_authenticate,
    memory_for_principal,
    principal_all_ids,
    principal_readable_ids,
    principal_require_write,
    principal_scope,
)
from injection.services.context import context_session_start, context_turn
from injection.services.memories import memory_update
from injection.services.reads import (
    memories_list,
    memory_as_dict,
    self_concept_read,
    snapshot_as_dict,
    snapshots_list,
    stats_read,
    thread_as_dict,
    threads_list,
)
from injection.services.sync import SessionRef, session_open, turns_sync
from memory.models import Thread
from memory.search import memory_search
from memory.services.errors import Conflict, Forbidden, InvalidInput, NotFound, TidelineError
from memory.services.facts import FactInput, fact_write
from memory.services.lifecycle import memory_expire
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.scopes import scope_global
from memory.services.self_concept import self_concept_write
from memory.services.threads import snapshot_write, thread_set_status, thread_write
from memory.services.timeline import TurnInput

MAX_TURNS_PER_SYNC = 500


class BodyTooLarge(Exception):
    pass


class ApiKeyAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Principal | None:
        # Checked here because authentication runs before the body is parsed.
        length = request.META.get("CONTENT_LENGTH") or "0"
        if length.isdigit() and int(length) > settings.TIDELINE_API_MAX_BODY_BYTES:
            raise BodyTooLarge
        return apikey_authenticate(raw=token)


api = NinjaAPI(
    title="Tideline",
    version="1",
    description="Long-term memory for agents: injection blocks, turn sync, memories, search.",
    auth=ApiKeyAuth(),
    docs_url="/docs",
    urls_namespace="tideline-api",
)


def _error(request, status: int, message: str):
    return api.create_response(request, {"detail": message}, status=status)


@api.exception_handler(InvalidInput)
def _invalid(request, exc):
    return _error(request, 400, str(exc))


@api.exception_handler(Forbidden)
def _forbidden(request, exc):
    return _error(request, 403, str(exc))


@api.exception_handler(NotFound)
def _not_found(request, exc):
    return _error(request, 404, str(exc))


@api.exception_handler(Conflict)
def _conflict(request, exc):
    return _error(request, 409, str(exc))


@api.exception_handler(TidelineError)
def _tideline(request, exc):
    return _error(request, 400, str(exc))


@api.exception_handler(AuthenticationError)
def _unauthenticated(request, exc):
    return _error(request, 401, "a valid API key is required (Authorization: Bearer tl_…)")


@api.exception_handler(BodyTooLarge)
@api.exception_handler(RequestDataTooBig)
def _too_large(request, exc):
    return _error(
        request, 413, f"request body is larger than {settings.TIDELINE_API_MAX_BODY_BYTES} bytes"
    )


def _principal(request) -> Principal:
    return request.auth


def _request_id(request) -> str:
    return request.headers.get("X-Request-Id", "")[:64] or uuid.uuid4().hex


class Where(Schema):
    """Where the caller is: an explicit scope id, or its working directory / git remote."""

    scope_id: int | None = None
    cwd: str = Field("", max_length=1024)
    git_remote: str = Field("", max_length=512)


class SessionIn(Where):
    session_id: str = Field(..., min_length=1, max_length=200)
    runtime: str = Field("generic", min_length=1, max_length=60)
    origin: Literal["user", "subagent"] = "user"
    delegation_depth: int = Field(0, ge=0, le=50)
    parent_session_id: str = Field("", max_length=200)


class SessionStartIn(SessionIn):
    budget_tokens: int | None = Field(None, ge=50, le=200_000)


class TurnIn(SessionIn):
    content: str = Field(..., min_length=1, max_length=100_000)
    role: Literal["user", "assistant"] = "user"
    turn_id: str | None = Field(None, max_length=200)
    record: bool = True
    budget_tokens: int | None = Field(None, ge=50, le=200_000)


class TurnItem(Schema):
    role: Literal["user", "assistant", "system", "tool"]
    content: str = Field(..., min_length=1, max_length=100_000)
    speaker: str = Field("", max_length=120)
    occurred_at: datetime | None = None
    turn_id: str | None = Field(None, max_length=200)


class TurnsIn(SessionIn):
    turns: list[TurnItem] = Field(..., min_length=1, max_length=MAX_TURNS_PER_SYNC)


def _where(principal: Principal, where: Where, *, create: bool = False):
    scope = principal_scope(
        principal=principal,
        scope_id=where.scope_id,
        cwd=where.cwd,
        git_remote=where.git_remote,
        create=create,
    )
    return scope, principal_readable_ids(principal=principal, scope=scope)


def _session(request, payload: SessionIn):
    principal = _principal(request)
    scope, readable = _where(principal, payload, create=True)
    session = session_open(
        ref=SessionRef(
            runtime=payload.runtime,
            external_id=payload.session_id,
            scope_id=scope.pk,
            cwd=payload.cwd,
            origin=payload.origin,
            delegation_depth=payload.delegation_depth,
            parent_external_id=payload.parent_session_id,
        ),
        actor=principal.actor,
        request_id=_request_id(request),
    )
    return session, readable


def _session_dict(session) -> dict:
    return {
        "id": session.pk,
        "external_id": session.external_id,
        "runtime": session.runtime,
        "scope_id": session.scope_id,
        "origin": session.origin,
        "subagent": session.is_subagent,
    }


@api.post("/v1/session/start", tags=["injection"])
def session_start_view(request, payload: SessionStartIn):
    """Open (or re-open) a session and return its session-start block: T0 identity, T2 prefetch
    pool, T2b context bridge and T3 memory map, within the token budget."""
    session, readable = _session(request, payload)
    block = context_session_start(
        scope_ids=readable, session=session, budget_tokens=payload.budget_tokens
    )
    return {"session": _session_dict(session), **block.as_dict()}


@api.post("/v1/turn", tags=["injection"])
def turn_view(request, payload: TurnIn):
    """Record the user's turn in the raw timeline and return the per-turn block (T1, T4)."""
    principal = _principal(request)
    session, readable = _session(request, payload)
    recorded = False
    if payload.record:
        principal_require_write(principal=principal)
        result = turns_sync(
            session=session,
            turns=[
                TurnInput(
                    role=payload.role,
                    content=payload.content,
                    meta={"external_id": payload.turn_id} if payload.turn_id else None,
                )
            ],
            actor=principal.actor,
            request_id=_request_id(request),
        )
        recorded = bool(result.recorded)
    block = context_turn(
        query=payload.content,
        scope_ids=readable,
        session=session,
        budget_tokens=payload.budget_tokens,
    )
    return {"session": _session_dict(session), "recorded": recorded, **block.as_dict()}


@api.post("/v1/turns", tags=["timeline"])
def turns_view(request, payload: TurnsIn):
    """Batch-sync user and assistant turns into the raw timeline; turns already recorded under the
    same turn_id are skipped, so re-sending a whole transcript is safe."""
    principal = _principal(request)
    principal_require_write(principal=principal)
    session, _ = _session(request, payload)
    result = turns_sync(
        session=session,
        turns=[
            TurnInput(
                role=turn.role,
                content=turn.content,
                speaker=turn.speaker,
                occurred_at=turn.occurred_at,
                meta={"external_id": turn.turn_id} if turn.turn_id else None,
            )
            for turn in payload.turns
        ],
        actor=principal.actor,
        request_id=_request_id(request),
    )
    return {
        "session": _session_dict(session),
        "captured": result.captured,
        "recorded": len(result.recorded),
        "skipped": result.skipped,
        "turn_ids": [turn.pk for turn in result.recorded],
    }


class FactIn(Where):
    profile_name: str = Field(..., min_length=1, max_length=120)
    profile_kind: Literal["user", "person", "self", "project"] = "user"
    kind: Literal["preference", "fact", "episode", "reflection", "impression", "relationship"]
    predicate: str = Field(..., max_length=41)
    value: str = Field(..., max_length=60)
    summary: str = Field("", max_length=500)
    confidence: float = Field(1.0, ge=0, le=1)
    importance: int = Field(3, ge=1, le=5)
    pinned: bool = False
    reason: str = Field("", max_length=500)


class NarrativeIn(Where):
    gesture: str = Field(..., min_length=1, max_length=500)
    context: str = Field("", max_length=20_000)
    moment: str = Field("", max_length=20_000)
    cognition_direction: str = Field("", max_length=500)
    importance: int | None = Field(None, ge=1, le=5)
    emotional: int | None = Field(None, ge=1, le=5)
    unresolved: int | None = Field(None, ge=1, le=5)
    layer: Literal["fact", "experience", "decision"] = "experience"
    ntype: str = Field("general", max_length=32)
    tags: list[str] = Field(default_factory=list, max_length=30)
    entities_role: str = Field("", max_length=300)
    related_entities: list[str] = Field(default_factory=list, max_length=30)
    valence: float = Field(0.0, ge=-1, le=1)
    emotion_intensity: float = Field(0.0, ge=0, le=10)
    confidence: float = Field(1.0, ge=0, le=1)
    source_turn_ids: list[int] = Field(default_factory=list, max_length=200)
    reason: str = Field("", max_length=500)


class MemoryPatch(Schema):
    changes: dict
    reason: str = Field("", max_length=500)


class SelfConceptIn(Schema):
    field: Literal["fact", "terrain", "self_reflection"]
    content: str = Field(..., min_length=1, max_length=4000)
    reason: str = Field("", max_length=500)


class ThreadIn(Where):
    content: str = Field(..., min_length=1, max_length=4000)
    importance: int = Field(3, ge=1, le=5)
    emotional: int = Field(3, ge=1, le=5)
    recurrence: int = Field(3, ge=1, le=5)
    unresolved: int = Field(3, ge=1, le=5)


class ThreadPatch(Schema):
    status: Literal["open", "explored", "abandoned"]
    reason: str = Field("", max_length=500)


class SnapshotIn(Where):
    content: str = Field(..., min_length=1, max_length=4000)


def _write_scope(request, where: Where):
    principal = _principal(request)
    principal_require_write(principal=principal)
    return principal, principal_scope(
        principal=principal, scope_id=where.scope_id, cwd=where.cwd, git_remote=where.git_remote
    )


@api.post("/v1/facts", tags=["memories"])
def fact_create(request, payload: FactIn):
    """Write a fact under its stable key; a new value supersedes the current one."""
    principal, scope = _write_scope(request, payload)
    fact = fact_write(
        data=FactInput(
            scope_id=scope.pk,
            **payload.dict(exclude={"scope_id", "cwd", "git_remote", "reason"}),
        ),
        actor=principal.actor,
        reason=payload.reason,
        request_id=_request_id(request),
    )
    return memory_as_dict(fact)


@api.post("/v1/narratives", tags=["memories"])
def narrative_create(request, payload: NarrativeIn):
    """Write a narrative memory (gesture, context, moment, cognition_direction, weights)."""
    principal, scope = _write_scope(request, payload)
    narrative = narrative_write(
        data=NarrativeInput(
            scope_id=scope.pk,
            **payload.dict(exclude={"scope_id", "cwd", "git_remote", "reason"}),
        ),
        actor=principal.actor,
        reason=payload.reason,
        request_id=_request_id(request),
    )
    return memory_as_dict(narrative)


class ListQuery(Where):
    memory_type: Literal["", "narrative", "fact", "self_concept"] = ""
    status: Literal["", "candidate", "active", "superseded", "expired", "rejected"] = "active"
    limit: int = Field(50, ge=1, le=200)
    offset: int = Field(0, ge=0)


@api.get("/v1/memories", tags=["memories"])
def memories_view(request, query: Query[ListQuery]):
    """Memories visible from the caller's scope, newest first."""
    _, readable = _where(_principal(request), query)
    return memories_list(
        scope_ids=readable,
        memory_type=query.memory_type,
        status=query.status,
        limit=query.limit,
        offset=query.offset,
    )


@api.get("/v1/memories/{memory_id}", tags=["memories"])
def memory_view(request, memory_id: int):
    return memory_as_dict(memory_for_principal(principal=_principal(request), memory_id=memory_id))


@api.patch("/v1/memories/{memory_id}", tags=["memories"])
def memory_patch(request, memory_id: int, payload: MemoryPatch):
    """Change a memory: the edited copy supersedes the old row, which stays in history."""
    principal = _principal(request)
    principal_require_write(principal=principal)
    memory = memory_for_principal(principal=principal, memory_id=memory_id)
    successor = memory_update(
        memory=memory,
        changes=payload.changes,
        actor=principal.actor,
        reason=payload.reason,
        request_id=_request_id(request),
    )
    return memory_as_dict(successor)


@api.delete("/v1/memories/{memory_id}", tags=["memories"])
def memory_delete(request, memory_id: int, reason: str = ""):
    """Delete = an audited expiry: the memory stops being recalled and stays in the store."""
    principal = _principal(request)
    principal_require_write(principal=principal)
    memory_for_principal(principal=principal, memory_id=memory_id)
    expired = memory_expire(
        memory_id=memory_id,
        actor=principal.actor,
        reason=reason[:500] or "deleted through the API",
        request_id=_request_id(request),
    )
    return memory_as_dict(expired)


def _require_global(principal: Principal) -> None:
    if not principal.allows(scope_global()):
        raise Forbidden("the self-concept is global; this key does not hold the global scope")


@api.get("/v1/self-concept", tags=["memories"])
def self_concept_view(request):
    _require_global(_principal(request))
    return self_concept_read()


@api.post("/v1/self-concept", tags=["memories"])
def self_concept_create(request, payload: SelfConceptIn):
    principal = _principal(request)
    principal_require_write(principal=principal)
    _require_global(principal)
    version = self_concept_write(
        field=payload.field,
        content=payload.content,
        actor=principal.actor,
        reason=payload.reason,
        request_id=_request_id(request),
    )
    return memory_as_dict(version)


class ThreadQuery(Where):
    status: Literal["", "open", "explored", "abandoned"] = "open"
    limit: int = Field(50, ge=1, le=200)


@api.get("/v1/threads", tags=["memories"])
def threads_view(request, query: Query[ThreadQuery]):
    _, readable = _where(_principal(request), query)
    return threads_list(scope_ids=readable, status=query.status, limit=query.limit)


@api.post("/v1/threads", tags=["memories"])
def thread_create(request, payload: ThreadIn):
    principal, scope = _write_scope(request, payload)
    thread = thread_write(
        scope_id=scope.pk,
        **payload.dict(exclude={"scope_id", "cwd", "git_remote"}),
        actor=principal.actor,
        request_id=_request_id(request),
    )
    return thread_as_dict(thread)


@api.patch("/v1/threads/{thread_id}", tags=["memories"])
def thread_patch(request, thread_id: int, payload: ThreadPatch):
    principal = _principal(request)
    principal_require_write(principal=principal)
    thread = Thread.objects.select_related("scope").filter(pk=thread_id).first()
    if thread is None or not principal.allows(thread.scope):
        raise NotFound(f"unknown thread {thread_id}")
    updated = thread_set_status(
        thread_id=thread_id,
        status=payload.status,
        actor=principal.actor,
        reason=payload.reason,
        request_id=_request_id(request),
    )
    return thread_as_dict(updated)


class SnapshotQuery(Where):
    limit: int = Field(1, ge=1, le=200)


@api.get("/v1/snapshots", tags=["memories"])
def snapshots_view(request, query: Query[SnapshotQuery]):
    _, readable = _where(_principal(request), query)
    return snapshots_list(scope_ids=readable, limit=query.limit)


@api.post("/v1/snapshots", tags=["memories"])
def snapshot_create(request, payload: SnapshotIn):
    principal, scope = _write_scope(request, payload)
    snapshot = snapshot_write(
        scope_id=scope.pk,
        content=payload.content,
        actor=principal.actor,
        request_id=_request_id(request),
    )
    return snapshot_as_dict(snapshot)


class SearchQuery(Where):
    q: str = Field(..., min_length=1, max_length=2000)
    limit: int = Field(10, ge=1, le=100)
    memory_type: Literal["", "narrative", "fact", "self_concept"] = ""


def _readable_for(principal: Principal, where: Where) -> list[int]:
    """A request that names no scope reads everything its key holds."""
    if where.scope_id is None and not where.cwd and not where.git_remote:
        return principal_all_ids(principal=principal)
    return _where(principal, where)[1]


@api.get("/v1/search", tags=["search"])
def search_view(request, query: Query[SearchQuery]):
    """Hybrid search (keywords + meaning) over the memories the key may read; each hit says why."""
    readable = _readable_for(_principal(request), query)
    hits = memory_search(
        query=query.q,
        scope_ids=readable,
        limit=query.limit,
        memory_types=[query.memory_type] if query.memory_type else None,
        activation_source="rest_search",
    )
    return [
        {
            "memory": memory_as_dict(hit.memory),
            "score": hit.score,
            "lexical": hit.lexical,
            "semantic": hit.semantic,
            "why": hit.why,
        }
        for hit in hits
    ]


@api.get("/v1/stats", tags=["stats"])
def stats_view(request, query: Query[Where]):
    return stats_read(scope_ids=_readable_for(_principal(request), query))


class AttentionQuery(Where):
    days: int = Field(30, ge=1, le=365)


@api.get("/v1/attention", tags=["stats"])
def attention_view(request, query: Query[AttentionQuery]):
    """Which memory clusters recall lights up per day, and which stay dark."""
    return attention_heatmap_read(
        days=query.days, scope_ids=_readable_for(_principal(request), query)
    )
