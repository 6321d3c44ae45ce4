import hashlib
import re
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Max, Q, QuerySet
from django.utils import timezone

from memory.models import Actor, AuditAction, ContextTurn, Session, SessionOrigin
from memory.services.audit import audit_record
from memory.services.bounds import moment_storable, text_storable
from memory.services.capture import turns_capture
from memory.services.embedding import embedding_schedule
from memory.services.errors import Conflict, InvalidInput
from memory.services.races import atomic_retrying, constraint_violated
from memory.services.scopes import scope_validate

TURN_MAX_CHARS = 100_000
TURN_EXTERNAL_ID_MAX_CHARS = 200
ROLES = ("user", "assistant", "system", "tool")
# Where a runtime's own turn id travels in TurnInput.meta (and stays, next to the column).
EXTERNAL_ID_KEY = "external_id"
SEGMENT_ID = re.compile(r"@scope-\d+$")


@dataclass(frozen=True)
class TurnInput:
    role: str
    content: str
    speaker: str = ""
    occurred_at: datetime | None = None
    meta: dict | None = None

    @property
    def external_id(self) -> str | None:
        """The runtime's own id for this turn, if it gave one."""
        return (self.meta or {}).get(EXTERNAL_ID_KEY) or None


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
    key_id: int | None = None,
    actor: str = Actor.AGENT,
    request_id: str = "",
) -> Session:
    """Get or open the session (runtime, external_id). Re-opening an existing one changes nothing.
    Safe under concurrency: when several first turns open one session at once, one creates it and
    the others get it. `key_id` is the API key opening it, if any (kept on the session and on
    a segment it opens in another scope)."""
    if not external_id or len(external_id) > 200:
        raise InvalidInput("external_id must be 1–200 characters", field="external_id")
    if SEGMENT_ID.search(external_id):
        # Tideline names a session's part in another scope so; a caller who could choose such an
        # id could take the name of another key's segment, or nest segments without end.
        raise InvalidInput(
            "a session id may not end in '@scope-<number>': Tideline names segments so",
            field="external_id",
        )
    if origin not in SessionOrigin.values:
        raise InvalidInput(f"origin must be one of {SessionOrigin.values}", field="origin")
    if delegation_depth < 0:
        raise InvalidInput("delegation_depth must not be negative", field="delegation_depth")
    return _session_open(
        runtime=runtime,
        external_id=external_id,
        scope_id=scope_id,
        cwd=cwd,
        origin=origin,
        parent_id=parent_id,
        delegation_depth=delegation_depth,
        started_at=started_at,
        key_id=key_id,
        actor=actor,
        request_id=request_id,
    )


def _session_open(
    *,
    runtime: str,
    external_id: str,
    scope_id: int,
    cwd: str,
    origin: str,
    parent_id: int | None,
    delegation_depth: int,
    started_at: datetime | None,
    key_id: int | None,
    actor: str,
    request_id: str,
    segment: bool = False,
) -> Session:
    scope_validate(scope_id=scope_id)
    # A subagent is whatever the session header says it is: any delegation makes it one.
    if delegation_depth >= 1:
        origin = SessionOrigin.SUBAGENT
    with transaction.atomic():
        existing = Session.objects.filter(runtime=runtime, external_id=external_id).first()
        if existing is None:
            try:
                with transaction.atomic():
                    session = Session.objects.create(
                        runtime=runtime,
                        external_id=external_id,
                        scope_id=scope_id,
                        cwd=cwd,
                        origin=origin,
                        parent_id=parent_id,
                        delegation_depth=delegation_depth,
                        started_at=started_at or timezone.now(),
                        key_id=key_id,
                    )
            except IntegrityError as exc:
                if not constraint_violated(
                    exc, model=Session, name="session_runtime_external_unique"
                ):
                    raise
                existing = Session.objects.get(runtime=runtime, external_id=external_id)
        if existing is not None:
            if existing.scope_id != scope_id and segment:
                # Only a row stored before segment ids were reserved can hold one elsewhere.
                raise Conflict(f"session id {external_id!r} is taken; open a new session id")
            if existing.scope_id != scope_id:
                return _segment(
                    existing,
                    scope_id=scope_id,
                    cwd=cwd,
                    origin=origin,
                    delegation_depth=delegation_depth,
                    key_id=key_id,
                    actor=actor,
                )
            return existing
        audit_record(
            actor=actor,
            action=AuditAction.RECORD,
            target=session,
            reason="session opened",
            after={"origin": origin, "delegation_depth": delegation_depth, "cwd": cwd},
            request_id=request_id,
        )
    return session


def segment_external_id(*, external_id: str, scope_id: int) -> str:
    """The stored id of a session's part in another scope. An id too long to carry the suffix is
    shortened with a hash of the whole, so two long ids sharing a prefix stay two sessions."""
    suffix = f"@scope-{scope_id}"
    if len(external_id) + len(suffix) > 200:
        digest = hashlib.sha256(external_id.encode()).hexdigest()[:16]
        external_id = f"{external_id[: 200 - len(suffix) - 17]}~{digest}"
    return external_id + suffix


def session_external_id_given(session: Session) -> str:
    """The id the runtime gave this session. A segment's stored id carries its scope as a suffix,
    which would tell a caller that the same id is in use in another scope it may not read; the
    runtime's id is its first part's."""
    parent = session.parent
    if parent is not None and session.external_id == segment_external_id(
        external_id=parent.external_id, scope_id=session.scope_id
    ):
        return parent.external_id
    return session.external_id


def _segment(
    session: Session,
    *,
    scope_id: int,
    cwd: str,
    origin: str,
    delegation_depth: int,
    key_id: int | None,
    actor: str,
) -> Session:
    """A session whose agent moved into another project goes on there as a linked segment: a
    session of that scope, child of the first, so each part is recorded and injected in its own
    scope and nothing of one part reaches the other. The segment is what this call's header says
    (origin, delegation), not what the first part was: the same id in another project may be
    another key's session, and its being a subagent must not stop this one being recorded."""
    return _session_open(
        runtime=session.runtime,
        external_id=segment_external_id(external_id=session.external_id, scope_id=scope_id),
        scope_id=scope_id,
        cwd=cwd,
        origin=origin,
        parent_id=session.pk,
        delegation_depth=delegation_depth,
        started_at=None,
        key_id=key_id,
        actor=actor,
        request_id="",
        segment=True,
    )


def turns_validate(*, turns: list[TurnInput]) -> None:
    """Refuse turns that cannot be recorded (InvalidInput), so a caller can check them before it
    opens a session for them: a refused batch leaves no empty session behind."""
    if not turns:
        raise InvalidInput("no turns to record", field="turns")
    for turn in turns:
        _validate_turn(turn)


def _validate_turn(turn: TurnInput) -> None:
    external_id = turn.external_id
    if external_id is not None and (
        not isinstance(external_id, str) or len(external_id) > TURN_EXTERNAL_ID_MAX_CHARS
    ):
        raise InvalidInput(
            f"a turn's external_id must be a string of ≤ {TURN_EXTERNAL_ID_MAX_CHARS} characters",
            field="external_id",
        )
    if turn.role not in ROLES:
        raise InvalidInput(f"role must be one of {ROLES}", field="role")
    if not turn.content or not turn.content.strip():
        raise InvalidInput("turn content must not be empty", field="content")
    if turn.occurred_at is not None and not moment_storable(turn.occurred_at):
        raise InvalidInput("a turn's time is out of the range the store holds", field="occurred_at")
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
    scope_ids_readable: Collection[int] | None = (),
    key_id: int | None = None,
) -> list[ContextTurn]:
    """Append raw turns to a session's timeline, verbatim, with one audit row for the batch. A turn
    whose runtime id the session already holds is skipped, and so is one another part of it holds
    in a scope of `scope_ids_readable` (None: every scope, every part) that the caller's key
    (`key_id`) or no key opened, so re-sending overlapping history is safe after a move into
    another project too; returns only the turns stored now."""
    turns_validate(turns=turns)
    if not Session.objects.filter(pk=session_id).exists():
        raise InvalidInput(f"unknown session {session_id!r}", field="session")
    return atomic_retrying(
        lambda: _append(
            session_id=session_id,
            turns=turns,
            actor=actor,
            request_id=request_id,
            scope_ids_readable=scope_ids_readable,
            key_id=key_id,
        ),
        model=ContextTurn,
        constraints=("turn_session_seq_unique", "turn_session_external_unique"),
        lost=f"session {session_id} kept changing under this write; try again",
    )


def _segment_root(session: Session) -> Session | None:
    """The session this one is a segment of, or None for a first part (or a subagent, whose
    parent is another session, not an earlier part of its own)."""
    parent = session.parent
    if parent is not None and session.external_id == segment_external_id(
        external_id=parent.external_id, scope_id=session.scope_id
    ):
        return parent
    return None


def _family_ids(root: Session) -> list[int]:
    """The first part of a runtime's session and every segment of it."""
    return [root.pk] + [
        pk
        for pk, external_id, scope_id in root.children.values_list("pk", "external_id", "scope_id")
        if external_id == segment_external_id(external_id=root.external_id, scope_id=scope_id)
    ]


def _held_elsewhere(
    *,
    root: Session,
    wanted: set[str],
    scope_ids_readable: Collection[int] | None,
    key_id: int | None,
) -> QuerySet[ContextTurn]:
    """The wanted turns that the parts of the session hold where the caller may read, in parts
    its own key or no key opened (None: every part, for the owner). A part another key opened
    under the same runtime id is that key's session: a skip because of it would lose this key's
    turn — and, where the caller may not read that part, tell it what the other key recorded. A
    part no key opened is the owner's (an import, a command, the local agent): its turns are the
    ones the runtime sends again."""
    held = ContextTurn.objects.filter(session_id__in=_family_ids(root), external_id__in=wanted)
    if scope_ids_readable is None:
        return held
    return held.filter(scope_id__in=scope_ids_readable).filter(
        Q(session__key_id__isnull=True) | Q(session__key_id=key_id)
    )


def _append(
    *,
    session_id: int,
    turns: list[TurnInput],
    actor: str,
    request_id: str,
    scope_ids_readable: Collection[int] | None,
    key_id: int | None,
) -> list[ContextTurn]:
    # The session row is the lock that makes appends take turns: the known ids and the last seq
    # are read after it is held, so no concurrent batch can slip in between (a no-op on SQLite,
    # whose IMMEDIATE transactions already take turns). The first part's row is the lock of the
    # whole session, so two parts in two projects take turns too; a segment's row is always
    # taken before its first part's, and the first part's alone otherwise, so no two appends wait
    # on each other in a circle.
    session = Session.objects.select_for_update().get(pk=session_id)
    root = _segment_root(session)
    root = session if root is None else Session.objects.select_for_update().get(pk=root.pk)
    wanted = {turn.external_id for turn in turns} - {None}
    known = set(session.turns.filter(external_id__in=wanted).values_list("external_id", flat=True))
    if wanted and scope_ids_readable != ():
        known |= set(
            _held_elsewhere(
                root=root, wanted=wanted, scope_ids_readable=scope_ids_readable, key_id=key_id
            ).values_list("external_id", flat=True)
        )
    new = []
    for turn in turns:
        if turn.external_id is not None:
            if turn.external_id in known:
                continue
            known.add(turn.external_id)
        new.append(turn)
    if not new:
        return []
    now = timezone.now()
    last_seq = session.turns.aggregate(last=Max("seq"))["last"] or 0
    rows = ContextTurn.objects.bulk_create(
        [
            ContextTurn(
                session=session,
                scope_id=session.scope_id,
                seq=last_seq + offset,
                role=turn.role,
                speaker=turn.speaker,
                content=text_storable(turn.content),
                occurred_at=turn.occurred_at or now,
                recorded_at=now,
                meta=turn.meta or {},
                external_id=turn.external_id,
            )
            for offset, turn in enumerate(new, start=1)
        ]
    )
    if rows and rows[0].pk is None:
        rows = list(session.turns.filter(seq__gt=last_seq).order_by("seq"))
    captured = turns_capture(session=session, turns=rows)
    audit_record(
        actor=actor,
        action=AuditAction.RECORD,
        target_type="contextturn",
        target_id=rows[0].pk,
        reason=f"{len(rows)} turn(s) recorded in session {session}",
        after={
            "session_id": session.pk,
            "turn_ids": [row.pk for row in rows],
            "captured_inbox_ids": [item.pk for item in captured],
        },
        request_id=request_id,
    )
    embedding_schedule(turn_ids=[row.pk for row in rows])
    return rows


def turn_record(
    *,
    session_id: int,
    turn: TurnInput,
    actor: str = Actor.AGENT,
    request_id: str = "",
    scope_ids_readable: Collection[int] | None = (),
    key_id: int | None = None,
) -> ContextTurn:
    """One turn; a turn the session (or, as in turns_record, another part of it) already holds
    under the same runtime id is returned as is."""
    rows = turns_record(
        session_id=session_id,
        turns=[turn],
        actor=actor,
        request_id=request_id,
        scope_ids_readable=scope_ids_readable,
        key_id=key_id,
    )
    if rows:
        return rows[0]
    held = ContextTurn.objects.filter(session_id=session_id, external_id=turn.external_id).first()
    if held is not None:
        return held
    session = Session.objects.get(pk=session_id)
    return _held_elsewhere(
        root=_segment_root(session) or session,
        wanted={turn.external_id},
        scope_ids_readable=scope_ids_readable,
        key_id=key_id,
    ).earliest("pk")
