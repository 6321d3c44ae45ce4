"""The REST API (django-ninja) under /api/v1/, OpenAPI docs at /api/docs.

Every route needs an API key (`Authorization: Bearer tl_…`, created by `manage.py apikey create`);
the key's scopes bound what a request may read or write. Each route parses its input into the
operation's own model (`injection/operations/fields.py`), calls that one operation, and returns
its dict. Errors are JSON `{"detail": …}`: 400 bad input, 401 no key, 403 scope not held, 404
unknown (or outside the key's scopes), 409 lost a race, 413 too large, 422 invalid fields.
"""

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import NinjaAPI, Query, Schema
from ninja.errors import AuthenticationError
from ninja.security import HttpBearer
from pydantic import ValidationError

from injection import operations as ops
from injection.operations.fields import (
    AttentionIn,
    FactIn,
    Id,
    ListIn,
    MemoryEditIn,
    MemoryExpireIn,
    MemoryPatch,
    NarrativeIn,
    ProfilesIn,
    RecallIn,
    SearchIn,
    SelfConceptIn,
    SessionSearchIn,
    SessionStartIn,
    SnapshotIn,
    SnapshotQuery,
    SurfaceIn,
    ThreadIn,
    ThreadPatch,
    ThreadQuery,
    ThreadUpdateIn,
    TimelineIn,
    TranscriptIn,
    TurnIn,
    TurnSearchIn,
    TurnsIn,
    WhereIn,
    Whole,
)
from injection.services.access import apikey_authenticate
from memory.selectors.visibility import Principal
from memory.services.audit import request_id_given
from memory.services.errors import Conflict, Forbidden, InvalidInput, NotFound, TidelineError

logger = logging.getLogger(__name__)
REQUEST_ID_HEADER = "X-Request-Id"


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


class ErrorOut(Schema):
    detail: Any


ERRORS = {code: ErrorOut for code in (400, 401, 403, 404, 408, 409, 413, 422, 429, 500)}
ONE = {200: dict, **ERRORS}
MANY = {200: list[dict], **ERRORS}


def _error(request, status: int, message: str):
    return api.create_response(request, {"detail": message}, status=status)


# What Django itself answers before a route runs, as HTML or plain text. A 400 under /api/ comes
# from a middleware refusing the request, in practice a Host header not in ALLOWED_HOSTS
# (CommonMiddleware reads it first; Django's security logger says which).
DJANGO_ERRORS = {
    400: "bad request: refused before it reached the API (a Host header naming an address "
    "this server does not answer to, or another malformed header)",
    404: "no such route",
    405: "method not allowed",
}


class ApiErrorsAsJsonMiddleware:
    """Every error under /api/ answers `{"detail": …}`, as the routes' own errors do: a refused
    Host header, a path no route serves and a method a route does not take are answered by Django
    and django-ninja as an HTML page or plain text, which an agent's client cannot parse as an
    error."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            request.path.startswith("/api/")
            and response.status_code in DJANGO_ERRORS
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            detail = DJANGO_ERRORS[response.status_code]
            answer = JsonResponse({"detail": detail}, status=response.status_code)
            if response.has_header("Allow"):
                answer["Allow"] = response["Allow"]
            return answer
        return response


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


@api.exception_handler(ValidationError)
def _invalid_fields(request, exc):
    errors = [{"loc": e["loc"], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
    return api.create_response(request, {"detail": errors}, status=422)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request, exc):
    return _error(request, 401, "a valid API key is required (Authorization: Bearer tl_…)")


@api.exception_handler(BodyTooLarge)
@api.exception_handler(RequestDataTooBig)
def _too_large(request, exc):
    return _error(
        request, 413, f"request body is larger than {settings.TIDELINE_API_MAX_BODY_BYTES} bytes"
    )


@api.exception_handler(SuspiciousOperation)
def _suspicious(request, exc):
    """Django's refusals of a request's input (more than DATA_UPLOAD_MAX_NUMBER_FIELDS query
    parameters, …) raised while a route reads it: bad input, not a 500. Logged where Django logs
    them itself, one line each."""
    logging.getLogger(f"django.security.{type(exc).__name__}").warning("%s", exc)
    return _error(request, 400, str(exc))


@api.exception_handler(Exception)
def _unexpected(request, exc):
    request_id = _request_id(request)
    logger.exception(
        "unexpected error in %s %s (request %s)", request.method, request.path, request_id
    )
    return api.create_response(
        request,
        # Not "nothing was changed": an operation's steps commit one by one (a turn is stored
        # before its block is read), so the audit log, found by this id, says what was.
        {
            "detail": "internal error; the audit log shows what, if anything, was stored",
            "request_id": request_id,
        },
        status=500,
    )


def _request_id(request) -> str:
    if not hasattr(request, "tideline_request_id"):
        request.tideline_request_id = request_id_given(request.headers.get(REQUEST_ID_HEADER, ""))
    return request.tideline_request_id


class UnknownQueryFields(Exception):
    def __init__(self, names: list[str]) -> None:
        super().__init__(names)
        self.names = names


class UnexpectedBody(Exception):
    pass


@api.exception_handler(UnknownQueryFields)
def _unknown_query_fields(request, exc):
    errors = [
        {"loc": ["query", name], "msg": "Extra inputs are not permitted"} for name in exc.names
    ]
    return api.create_response(request, {"detail": errors}, status=422)


@api.exception_handler(UnexpectedBody)
def _unexpected_body(request, exc):
    detail = [{"loc": ["body"], "msg": "this route takes no body; send its fields in the query"}]
    return api.create_response(request, {"detail": detail}, status=422)


def _caller(request, *, accepts: frozenset[str] = frozenset()) -> ops.Caller:
    """Who calls; also refuses query parameters the route does not take (bodies refuse unknown
    fields by their models), so a misspelt filter is an error, not a silently wider answer, and a
    `?secret=true` beside a body is not silently dropped; and for a GET or DELETE, a body, which
    such a route never reads (a DELETE's reason sent there was dropped for the default one)."""
    unknown = sorted(set(request.GET) - accepts)
    if unknown:
        raise UnknownQueryFields(unknown)
    if request.method in ("GET", "DELETE") and request.body.strip():
        raise UnexpectedBody
    return ops.Caller(principal=request.auth, request_id=_request_id(request))


def _fields(model) -> frozenset[str]:
    return frozenset(model.model_fields)


@api.post("/v1/session/start", response=ONE, tags=["injection"])
def session_start_view(request, payload: SessionStartIn):
    return ops.session_begin(caller=_caller(request), data=payload)


@api.post("/v1/turn", response=ONE, tags=["injection"])
def turn_view(request, payload: TurnIn):
    return ops.turn_take(caller=_caller(request), data=payload)


@api.post("/v1/surface", response=ONE, tags=["injection"])
def surface_view(request, payload: SurfaceIn):
    return ops.memories_surface(caller=_caller(request), data=payload)


@api.post("/v1/turns", response=ONE, tags=["timeline"])
def turns_view(request, payload: TurnsIn):
    return ops.turns_record(caller=_caller(request), data=payload)


@api.post("/v1/transcripts", response=ONE, tags=["timeline"])
def transcripts_view(request, payload: TranscriptIn):
    return ops.transcript_record(caller=_caller(request), data=payload)


@api.get("/v1/timeline", response=MANY, tags=["timeline"])
def timeline_view(request, query: Query[TimelineIn]):
    return ops.timeline_read(caller=_caller(request, accepts=_fields(TimelineIn)), data=query)


@api.get("/v1/timeline/search", response=MANY, tags=["timeline"])
def timeline_search_view(request, query: Query[TurnSearchIn]):
    return ops.turns_search(caller=_caller(request, accepts=_fields(TurnSearchIn)), data=query)


@api.get("/v1/timeline/sessions", response=MANY, tags=["timeline"])
def timeline_sessions_view(request, query: Query[SessionSearchIn]):
    return ops.sessions_search(
        caller=_caller(request, accepts=_fields(SessionSearchIn)), data=query
    )


@api.post("/v1/facts", response=ONE, tags=["memories"])
def fact_create(request, payload: FactIn):
    return ops.fact_create(caller=_caller(request), data=payload)


@api.post("/v1/narratives", response=ONE, tags=["memories"])
def narrative_create(request, payload: NarrativeIn):
    return ops.narrative_create(caller=_caller(request), data=payload)


@api.get("/v1/memories", response=MANY, tags=["memories"])
def memories_view(request, query: Query[ListIn]):
    return ops.memories_list(caller=_caller(request, accepts=_fields(ListIn)), data=query)


@api.get("/v1/memories/{memory_id}", response=ONE, tags=["memories"])
def memory_view(request, memory_id: Id, evidence_turns: Whole = 5):
    data = RecallIn(memory_id=memory_id, evidence_turns=evidence_turns)
    caller = _caller(request, accepts=frozenset({"evidence_turns"}))
    return ops.memory_recall(caller=caller, data=data, source="rest_recall")


@api.patch("/v1/memories/{memory_id}", response=ONE, tags=["memories"])
def memory_patch(request, memory_id: Id, payload: MemoryPatch):
    data = MemoryEditIn(memory_id=memory_id, changes=payload.changes, reason=payload.reason)
    return ops.memory_edit(caller=_caller(request), data=data)


@api.delete("/v1/memories/{memory_id}", response=ONE, tags=["memories"])
def memory_delete(request, memory_id: Id, reason: str = "deleted through the API"):
    data = MemoryExpireIn(memory_id=memory_id, reason=reason)
    return ops.memory_expire(caller=_caller(request, accepts=frozenset({"reason"})), data=data)


@api.get("/v1/profiles", response=MANY, tags=["memories"])
def profiles_view(request, query: Query[ProfilesIn]):
    return ops.profiles_list(caller=_caller(request, accepts=_fields(ProfilesIn)), data=query)


@api.get("/v1/self-concept", response=ONE, tags=["memories"])
def self_concept_view(request):
    return ops.self_concept_read(caller=_caller(request))


@api.post("/v1/self-concept", response=ONE, tags=["memories"])
def self_concept_create(request, payload: SelfConceptIn):
    return ops.self_concept_set(caller=_caller(request), data=payload)


@api.get("/v1/threads", response=MANY, tags=["memories"])
def threads_view(request, query: Query[ThreadQuery]):
    return ops.threads_list(caller=_caller(request, accepts=_fields(ThreadQuery)), data=query)


@api.post("/v1/threads", response=ONE, tags=["memories"])
def thread_create(request, payload: ThreadIn):
    return ops.thread_create(caller=_caller(request), data=payload)


@api.patch("/v1/threads/{thread_id}", response=ONE, tags=["memories"])
def thread_patch(request, thread_id: Id, payload: ThreadPatch):
    data = ThreadUpdateIn(thread_id=thread_id, status=payload.status, reason=payload.reason)
    return ops.thread_update(caller=_caller(request), data=data)


@api.get("/v1/snapshots", response=MANY, tags=["memories"])
def snapshots_view(request, query: Query[SnapshotQuery]):
    return ops.snapshots_list(caller=_caller(request, accepts=_fields(SnapshotQuery)), data=query)


@api.post("/v1/snapshots", response=ONE, tags=["memories"])
def snapshot_create(request, payload: SnapshotIn):
    return ops.snapshot_create(caller=_caller(request), data=payload)


@api.get("/v1/search", response=MANY, tags=["search"])
def search_view(request, query: Query[SearchIn]):
    return ops.memories_search(
        caller=_caller(request, accepts=_fields(SearchIn)), data=query, source="rest_search"
    )


@api.get("/v1/stats", response=ONE, tags=["stats"])
def stats_view(request, query: Query[WhereIn]):
    return ops.stats_read(caller=_caller(request, accepts=_fields(WhereIn)), data=query)


@api.get("/v1/attention", response=ONE, tags=["stats"])
def attention_view(request, query: Query[AttentionIn]):
    return ops.heatmap_read(caller=_caller(request, accepts=_fields(AttentionIn)), data=query)


@api.get("/v1/clusters", response=ONE, tags=["stats"])
def clusters_view(request, query: Query[WhereIn]):
    return ops.clusters_read(caller=_caller(request, accepts=_fields(WhereIn)), data=query)


@api.get("/v1/graph", response=ONE, tags=["stats"])
def graph_view(request, query: Query[WhereIn]):
    return ops.graph_read(caller=_caller(request, accepts=_fields(WhereIn)), data=query)
