from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from memory.models import Actor, AuditAction, ContextTurn, Session, SessionOrigin
from memory.services.audit import audit_record
from memory.services.embedding import embedding_schedule
from memory.services.errors import InvalidInput
from memory.services.scopes import scope_validate

TURN_MAX_CHARS = 100_000
ROLES = ("user", "assistant", "system", "tool")


@dataclass(frozen=True)
class TurnInput:
    role: str
    content: str
    speaker: str = ""
    occurred_at: datetime | None = None
    meta: dict | None = None


def session_start(
    *,
    runtime: str,
    external_id: str,
    scope_id: int,
    cwd: str = "",
    origin: str = SessionOrigin.USER,
    parent_id: int | None = None,
    delegation_depth: int = 0,
    started_at: datetime | None = None,
    actor: str = Actor.AGENT,
    request_id: str = "",
) -> Session:
    """Get or open the session (runtime, external_id). Re-opening an existing one changes nothing."""
    if not external_id or len(external_id) > 200:
        raise InvalidInput("external_id must be 1–200 characters", field="external_id")
    if origin not in SessionOrigin.values:
        raise InvalidInput(f"origin must be one of {SessionOrigin.values}", field="origin")
    if delegation_depth < 0:
        raise InvalidInput("delegation_depth must not be negative", field="delegation_depth")
    scope_validate(scope_id=scope_id)
    with transaction.atomic():
        existing = Session.objects.filter(runtime=runtime, external_id=external_id).first()
        if existing is not None:
            if existing.scope_id != scope_id:
                raise InvalidInput(
                    "this session already belongs to another scope", field="external_id"
                )
            return existing
        # A subagent is whatever the session header says it is: any delegation makes it one.
        if delegation_depth >= 1:
            origin = SessionOrigin.SUBAGENT
        session = Session.objects.create(
            runtime=runtime,
            external_id=external_id,
            scope_id=scope_id,
            cwd=cwd,
            origin=origin,
            parent_id=parent_id,
            delegation_depth=delegation_depth,
            started_at=started_at or timezone.now(),
        )
        audit_record(
            actor=actor,
            action=AuditAction.RECORD,
            target=session,
            reason="session opened",
            after={"origin": origin, "delegation_depth": delegation_depth, "cwd": cwd},
            request_id=request_id,
        )
    return session


def _validate_turn(turn: TurnInput) -> None:
    if turn.role not in ROLES:
        raise InvalidInput(f"role must be one of {ROLES}", field="role")
    if not turn.content or not turn.content.strip():
        raise InvalidInput("turn content must not be empty", field="content")
    if len(turn.content) > TURN_MAX_CHARS:
        raise InvalidInput(
            f"turn content is longer than {TURN_MAX_CHARS} characters", field="content"
        )


def turns_record(
    *,
    session_id: int,
    turns: list[TurnInput],
    actor: str = Actor.AGENT,
    request_id: str = "",
) -> list[ContextTurn]:
    """Append raw turns to a session's timeline, verbatim, with one audit row for the batch."""
    if not turns:
        raise InvalidInput("no turns to record", field="turns")
    for turn in turns:
        _validate_turn(turn)
    session = Session.objects.filter(pk=session_id).first()
    if session is None:
        raise InvalidInput(f"unknown session {session_id!r}", field="session")
    now = timezone.now()
    with transaction.atomic():
        last_seq = session.turns.aggregate(last=Max("seq"))["last"] or 0
        rows = ContextTurn.objects.bulk_create(
            [
                ContextTurn(
                    session=session,
                    scope_id=session.scope_id,
                    seq=last_seq + offset,
                    role=turn.role,
                    speaker=turn.speaker,
                    content=turn.content,
                    occurred_at=turn.occurred_at or now,
                    recorded_at=now,
                    meta=turn.meta or {},
                )
                for offset, turn in enumerate(turns, start=1)
            ]
        )
        if rows and rows[0].pk is None:
            rows = list(session.turns.filter(seq__gt=last_seq).order_by("seq"))
        audit_record(
            actor=actor,
            action=AuditAction.RECORD,
            target_type="contextturn",
            target_id=rows[0].pk,
            reason=f"{len(rows)} turn(s) recorded in session {session}",
            after={"session_id": session.pk, "turn_ids": [row.pk for row in rows]},
            request_id=request_id,
        )
        embedding_schedule(turn_ids=[row.pk for row in rows])
    return rows


def turn_record(
    *, session_id: int, turn: TurnInput, actor: str = Actor.AGENT, request_id: str = ""
) -> ContextTurn:
    return turns_record(session_id=session_id, turns=[turn], actor=actor, request_id=request_id)[0]
