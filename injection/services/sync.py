"""Capturing the raw timeline from agent runtimes: open the session, append only new turns.

Runtimes re-send overlapping history (a Stop hook reads the whole transcript; an import is re-run),
so each turn may carry the runtime's own id and a turn already recorded under that id is skipped.
Subagent sessions are not the owner and are not captured unless configured.
"""

from collections.abc import Collection
from dataclasses import dataclass

from memory.models import ContextTurn, Session, SessionOrigin
from memory.services.capture import session_captured
from memory.services.timeline import TurnInput, segment_external_id, session_start, turns_record


@dataclass(frozen=True)
class SessionRef:
    runtime: str
    external_id: str
    scope_id: int
    cwd: str = ""
    origin: str = "user"
    delegation_depth: int = 0
    parent_external_id: str = ""
    key_id: int | None = None


@dataclass(frozen=True)
class SyncResult:
    session: Session
    recorded: list[ContextTurn]
    skipped: int
    captured: bool


def session_as_called(*, session: Session, origin: str, delegation_depth: int) -> Session:
    """The session as this call acts in it. A subagent may name a session the user opened (its
    parent's id, handed down): for this call it is still a subagent, so it is neither injected
    nor captured. Only this instance changes, and it is never saved: the user's session stays
    the user's. A call that says "user" does not lift a session opened as a subagent's: "user"
    is the field's default, so it cannot tell a caller that claims it from one that left it
    out, and capture, DREAM and T2b read the stored origin anyway."""
    if origin == SessionOrigin.SUBAGENT or delegation_depth >= 1:
        session.origin = SessionOrigin.SUBAGENT
        session.delegation_depth = max(session.delegation_depth, delegation_depth)
    return session


def session_open(*, ref: SessionRef, actor: str, request_id: str = "") -> Session:
    """The session, opened on first sight, as this call acts in it (session_as_called). Every
    turn of a runtime names its session, so the common case — already open, same scope — is
    answered by one read without a write lock."""
    existing = Session.objects.filter(runtime=ref.runtime, external_id=ref.external_id).first()
    if existing is not None and existing.scope_id == ref.scope_id:
        return session_as_called(
            session=existing, origin=ref.origin, delegation_depth=ref.delegation_depth
        )
    parent_id = None
    if ref.parent_external_id:
        # The parent is looked for in this session's scope only: the same id in another project
        # is another key's session, and a link to it would tie two tenants' timelines.
        parent_id = (
            Session.objects.filter(
                runtime=ref.runtime,
                scope_id=ref.scope_id,
                external_id__in=[
                    ref.parent_external_id,
                    segment_external_id(external_id=ref.parent_external_id, scope_id=ref.scope_id),
                ],
            )
            .values_list("pk", flat=True)
            .first()
        )
    opened = session_start(
        runtime=ref.runtime,
        external_id=ref.external_id,
        scope_id=ref.scope_id,
        cwd=ref.cwd,
        origin=ref.origin,
        parent_id=parent_id,
        delegation_depth=ref.delegation_depth,
        key_id=ref.key_id,
        actor=actor,
        request_id=request_id,
    )
    # session_start hands back a stored session as it is: one a concurrent first call opened, or
    # the segment of this session id that an earlier call opened here.
    return session_as_called(
        session=opened, origin=ref.origin, delegation_depth=ref.delegation_depth
    )


def turns_sync(
    *,
    session: Session,
    turns: list[TurnInput],
    actor: str,
    scope_ids_readable: Collection[int] | None,
    key_id: int | None = None,
    request_id: str = "",
) -> SyncResult:
    """Record the turns this session does not hold yet (by the runtime's turn id when given), nor
    another part of it in a scope the caller reads (`scope_ids_readable`, None: every scope) that
    the caller's key (`key_id`) or no key opened: a runtime re-sends its history after a move
    into another project. The known ids are read inside
    the write transaction (turns_record), so identical concurrent batches store each turn once."""
    if not session_captured(session):
        return SyncResult(session=session, recorded=[], skipped=len(turns), captured=False)
    recorded = (
        turns_record(
            session_id=session.pk,
            turns=turns,
            actor=actor,
            request_id=request_id,
            scope_ids_readable=scope_ids_readable,
            key_id=key_id,
        )
        if turns
        else []
    )
    return SyncResult(
        session=session, recorded=recorded, skipped=len(turns) - len(recorded), captured=True
    )
