"""Operations of a running agent session: the session-start block, the per-turn block, recording
turns, and reading the raw timeline back."""

from injection.operations.calls import (
    Caller,
    operation,
    readable_ids,
    readable_or_held_ids,
    require_write,
    scope_for_read,
    scope_for_write,
)
from injection.operations.fields import (
    SessionIn,
    SessionSearchIn,
    SessionStartIn,
    SurfaceIn,
    TimelineIn,
    TranscriptIn,
    TurnIn,
    TurnItem,
    TurnRecordIn,
    TurnSearchIn,
    TurnsIn,
)
from injection.operations.present import session_as_dict, turn_as_dict
from injection.services.context import context_session_start, context_turn
from injection.services.sync import SessionRef, session_as_called, session_open, turns_sync
from injection.transcripts import claude_code_turns
from memory.models import Scope, Session
from memory.search import turn_search
from memory.search.sessions import session_search
from memory.selectors.reads import session_visible_pk, sessions_meant, timeline_stretch
from memory.selectors.visibility import scope_ids_held, scope_ids_readable
from memory.services.errors import Conflict
from memory.services.timeline import TurnInput, turns_validate


def _runtime_of(*, caller: Caller, data: SessionIn, scope: Scope) -> str:
    """The runtime that, with the session id, names the session the caller continues in `scope`.
    A caller that gives none means the session it already has under that id, whichever runtime
    opened it: the one in `scope`, else in the nearest other scope it holds (sessions_meant, the
    rule the timeline reads by), so a moved session goes on as its segment and another key's
    session of that id in global neither blocks nor takes over this one. A new id opens under
    the caller's default runtime."""
    if data.runtime:
        return data.runtime
    known = sorted(
        {
            session.runtime
            for session in sessions_meant(
                principal=caller.principal,
                scope_ids=scope_ids_held(principal=caller.principal),
                scope_id=scope.pk,
                external_id=data.session_id,
            )
        }
    )
    if len(known) > 1:
        raise Conflict(
            f"session {data.session_id!r} exists under runtimes {', '.join(known)}; "
            "say which with runtime"
        )
    return known[0] if known else caller.runtime


def _session_opened(*, caller: Caller, data: SessionIn) -> Session:
    scope = scope_for_write(caller=caller, where=data)
    return session_open(
        ref=SessionRef(
            runtime=_runtime_of(caller=caller, data=data, scope=scope),
            external_id=data.session_id,
            scope_id=scope.pk,
            cwd=data.cwd,
            origin=data.origin,
            delegation_depth=data.delegation_depth,
            parent_external_id=data.parent_session_id,
            key_id=caller.principal.key_id,
        ),
        actor=caller.principal.actor,
    )


def _session_for_block(*, caller: Caller, data: SessionIn) -> tuple[Session | None, list[int]]:
    """The session a block is for, and what it reads. A read-only key opens no session: it gets
    the block of an existing one, or a block without per-session memory."""
    if caller.principal.can_write:
        opened = _session_opened(caller=caller, data=data)
        return opened, scope_ids_readable(principal=caller.principal, scope=opened.scope)
    scope = scope_for_read(caller=caller, where=data)
    # Only this scope's: the session a writing key would open here, never another scope's.
    existing = next(
        iter(
            sessions_meant(
                principal=caller.principal,
                scope_ids=[scope.pk],
                scope_id=scope.pk,
                external_id=data.session_id,
                runtime=_runtime_of(caller=caller, data=data, scope=scope),
            )
        ),
        None,
    )
    if existing is not None:
        existing = session_as_called(
            session=existing, origin=data.origin, delegation_depth=data.delegation_depth
        )
    return existing, scope_ids_readable(principal=caller.principal, scope=scope)


def _turn_input(turn: TurnItem | TurnIn) -> TurnInput:
    return TurnInput(
        role=turn.role,
        content=turn.content,
        speaker=getattr(turn, "speaker", ""),
        occurred_at=getattr(turn, "occurred_at", None),
        meta={"external_id": turn.turn_id} if turn.turn_id else None,
    )


def _resent_from(caller: Caller) -> list[int] | None:
    """Where a turn the caller sends again may already be held (None: anywhere): only scopes it
    reads, so a skip never tells it what another key recorded under the same session id (and
    there only the parts its own key or no key opened: turns_record)."""
    if caller.principal.scope_ids is None:
        return None
    return scope_ids_held(principal=caller.principal)


def _recorded(*, caller: Caller, data: SessionIn, turns: list[TurnItem]) -> dict:
    inputs = [_turn_input(turn) for turn in turns]
    turns_validate(turns=inputs)
    opened = _session_opened(caller=caller, data=data)
    result = turns_sync(
        session=opened,
        turns=inputs,
        actor=caller.principal.actor,
        scope_ids_readable=_resent_from(caller),
        key_id=caller.principal.key_id,
    )
    return {
        "session": session_as_dict(opened),
        "captured": result.captured,
        "recorded": len(result.recorded),
        "skipped": result.skipped,
        "turn_ids": [row.pk for row in result.recorded],
    }


@operation
def session_begin(*, caller: Caller, data: SessionStartIn) -> dict:
    """Open (or re-open) a session and return its session-start block: T0 identity, T2 prefetch
    pool, T2b context bridge and T3 memory map, within the token budget."""
    opened, scope_ids = _session_for_block(caller=caller, data=data)
    block = context_session_start(
        scope_ids=scope_ids, session=opened, budget_tokens=data.budget_tokens
    )
    return {"session": session_as_dict(opened) if opened else None, **block.as_dict()}


@operation
def turn_take(*, caller: Caller, data: TurnIn) -> dict:
    """Record the user's turn in the raw timeline (unless record is false) and return the
    per-turn block (T1 related memories, T4 keyword fallback)."""
    if data.record:
        require_write(caller=caller)
    opened, scope_ids = _session_for_block(caller=caller, data=data)
    recorded = False
    if data.record and opened is not None:
        result = turns_sync(
            session=opened,
            turns=[_turn_input(data)],
            actor=caller.principal.actor,
            scope_ids_readable=_resent_from(caller),
            key_id=caller.principal.key_id,
        )
        recorded = bool(result.recorded)
    block = context_turn(
        query=data.content, scope_ids=scope_ids, session=opened, budget_tokens=data.budget_tokens
    )
    return {
        "session": session_as_dict(opened) if opened else None,
        "recorded": recorded,
        **block.as_dict(),
    }


@operation
def turns_record(*, caller: Caller, data: TurnsIn) -> dict:
    """Batch-sync turns into a session's raw timeline, verbatim; turns already held under their
    turn_id are skipped, so re-sending a whole transcript is harmless."""
    return _recorded(caller=caller, data=data, turns=data.turns)


@operation
def turn_record(*, caller: Caller, data: TurnRecordIn) -> dict:
    """Append one raw turn (with its speaker and time, when known) to a session's timeline,
    verbatim, never summarised. A turn_id makes re-sending the same turn harmless."""
    return _recorded(caller=caller, data=data, turns=[data])


@operation
def transcript_record(*, caller: Caller, data: TranscriptIn) -> dict:
    """Record the conversation in a runtime's raw transcript lines (Claude Code JSONL): user and
    assistant text only, no subagent lines or command echoes, each under its own id, so the
    same tail can be sent again and again."""
    turns = [
        TurnItem(
            role=turn.role,
            content=turn.content,
            turn_id=turn.turn_id,
            occurred_at=turn.occurred_at,
        )
        for turn in claude_code_turns(data.lines)
    ]
    if not turns:
        opened = _session_opened(caller=caller, data=data)
        return {
            "session": session_as_dict(opened),
            "captured": True,
            "recorded": 0,
            "skipped": 0,
            "turn_ids": [],
        }
    return _recorded(caller=caller, data=data, turns=turns)


@operation
def memories_surface(*, caller: Caller, data: SurfaceIn) -> dict:
    """Surface the memories related to a piece of text (a user message, a plan), as the per-turn
    injection would: semantic matches, with a keyword fallback. Records nothing."""
    block = context_turn(
        query=data.text,
        scope_ids=readable_ids(caller=caller, where=data),
        budget_tokens=data.budget_tokens,
    )
    return block.as_dict()


@operation
def turns_search(*, caller: Caller, data: TurnSearchIn) -> list[dict]:
    """Search the raw conversation timeline (every recorded turn) by keywords and meaning."""
    hits = turn_search(
        query=data.q, scope_ids=readable_or_held_ids(caller=caller, where=data), limit=data.limit
    )
    return [{"turn": turn_as_dict(hit.turn), "score": hit.score, "why": hit.why} for hit in hits]


@operation
def sessions_search(*, caller: Caller, data: SessionSearchIn) -> list[dict]:
    """Find the earlier conversations a question is about: whole sessions ranked by keywords and
    meaning, each with its best turns as evidence."""
    hits = session_search(
        query=data.q, scope_ids=readable_or_held_ids(caller=caller, where=data), limit=data.limit
    )
    return [
        {
            "session": session_as_dict(hit.session),
            "score": hit.score,
            "why": hit.why,
            "turns": [{"turn": turn_as_dict(turn.turn), "score": turn.score} for turn in hit.turns],
        }
        for hit in hits
    ]


@operation
def timeline_read(*, caller: Caller, data: TimelineIn) -> list[dict]:
    """Read a stretch of the raw timeline: the turns around one turn (e.g. a memory's evidence),
    a session's newest turns, or the newest turns in this scope."""
    scope = scope_for_read(caller=caller, where=data)
    scope_ids = scope_ids_readable(principal=caller.principal, scope=scope)
    session_pk = (
        session_visible_pk(
            principal=caller.principal,
            scope_ids=scope_ids,
            scope_id=scope.pk,
            external_id=data.session_id,
        )
        if data.session_id
        else None
    )
    turns = timeline_stretch(
        principal=caller.principal,
        scope_ids=scope_ids,
        session_pk=session_pk,
        around_turn_id=data.around_turn_id,
        limit=data.limit,
    )
    return [turn_as_dict(turn) for turn in turns]
