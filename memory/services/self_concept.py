from django.utils import timezone

from memory.models import (
    Actor,
    AuditAction,
    ExpiredBy,
    Memory,
    MemoryStatus,
    Scope,
    SelfConcept,
    SelfConceptField,
)
from memory.services.audit import audit_record
from memory.services.consolidation import rejection_audit
from memory.services.embedding import embedding_schedule
from memory.services.errors import Conflict, InvalidInput
from memory.services.gate import GateVerdict, gate_injection
from memory.services.races import atomic_retrying
from memory.services.scopes import scope_global

SELF_CONCEPT_MAX_CHARS = 4000


def _current_versions(field: str):
    return SelfConcept.objects.filter(field=field, status=MemoryStatus.ACTIVE).order_by(
        "-recorded_at", "-pk"
    )


def self_concept_current(*, field: str) -> SelfConcept | None:
    return _current_versions(field).first()


def self_concept_write(
    *,
    field: str,
    content: str,
    supersedes_id: int | None = None,
    pinned: bool = False,
    secret: bool = False,
    actor: str = Actor.AGENT,
    reason: str = "",
    request_id: str = "",
    writer_sees_secrets: bool = False,
) -> SelfConcept:
    """Write a new version of one self-concept field. The previous version is superseded, never
    overwritten, so the history of who the agent thought it was stays readable. An edit of one
    version (`supersedes_id`) is written only while that version is still current; the new
    version carries `pinned` and `secret` as given (an edit passes the edited version's).

    Secrecy follows the facts' rule (`fact_commit`). A writer that may read secrets is Tideline's
    own (DREAM) and speaks for no agent: its new content for a field whose current version the
    owner made secret stays secret, and restating that content changes nothing. A writer that may
    not is answered as if no secret were stored: its content is never compared with a secret
    current version (a "same content" answer would confirm a guess) and replaces it in plain,
    since the writer holds that content already."""
    if field not in SelfConceptField.values:
        raise InvalidInput(f"field must be one of {SelfConceptField.values}", field="field")
    content = (content or "").strip()
    if not content:
        raise InvalidInput("self-concept content must not be empty", field="content")
    if len(content) > SELF_CONCEPT_MAX_CHARS:
        raise InvalidInput(
            f"self-concept content is longer than {SELF_CONCEPT_MAX_CHARS} characters",
            field="content",
        )
    # The self-concept is injected first in every session of every project (T0), so text that
    # would act on the agent is held back as for any memory: stored rejected, never current.
    verdict = gate_injection(texts=[content])
    return atomic_retrying(
        lambda: _commit(
            field=field,
            content=content,
            verdict=verdict,
            supersedes_id=supersedes_id,
            pinned=pinned,
            secret=secret,
            actor=actor,
            reason=reason,
            request_id=request_id,
            writer_sees_secrets=writer_sees_secrets,
        ),
        model=Memory,
        constraints=("memory_one_active_per_key", "memory_one_live_successor"),
        lost=f"self-concept {field} kept changing under this write; try again",
    )


def _commit(
    *,
    field: str,
    content: str,
    verdict: GateVerdict,
    supersedes_id: int | None,
    pinned: bool,
    secret: bool,
    actor: str,
    reason: str,
    request_id: str,
    writer_sees_secrets: bool,
) -> SelfConcept:
    now = timezone.now()
    scope = scope_global()
    if not verdict.passed:
        refused = SelfConcept.objects.create(
            scope=scope,
            field=field,
            content=content,
            summary=f"[自我·{field}] {content}"[:500],
            valid_from=now,
            importance=4,
            pinned=pinned,
            secret=secret,
            status=MemoryStatus.REJECTED,
        )
        rejection_audit(
            memory=refused, verdict=verdict, actor=actor, reason=reason, request_id=request_id
        )
        return refused
    # Writers of the self-concept take turns on the global scope's row (a no-op on SQLite, whose
    # IMMEDIATE transactions already take turns), so each supersedes the version it read.
    Scope.objects.select_for_update().filter(pk=scope.pk).first()
    # Locked as well: an expiry locks only the memory, and a version read unlocked could be
    # superseded after an expiry ended it, undoing the expiry.
    current = _current_versions(field).select_for_update().first()
    if supersedes_id is not None and (current is None or current.pk != supersedes_id):
        state = Memory.objects.filter(pk=supersedes_id).values_list("status", flat=True).first()
        raise Conflict(
            f"self-concept #{supersedes_id} is {state or 'unknown'}, no longer current; the "
            f"current {field} is " + (f"#{current.pk}" if current is not None else "none")
        )
    comparable = current is not None and (
        writer_sees_secrets or not current.secret or current.pk == supersedes_id
    )
    if comparable and current.content == content:
        audit_record(
            actor=actor,
            action=AuditAction.SKIP,
            target=current,
            reason=reason or "same self-concept already current",
            request_id=request_id,
        )
        return current
    if current is not None:
        current.status = MemoryStatus.SUPERSEDED
        current.expired_by = ExpiredBy.SUPERSEDED
        # Never before it began: a clock stepped back (NTP, a restored VM) leaves the current
        # version dated after now, and the database refuses an interval that ends first.
        current.valid_to = max(now, current.valid_from)
        current.save(update_fields=["status", "expired_by", "valid_to", "updated_at"])
    version = SelfConcept(
        scope=scope,
        field=field,
        content=content,
        summary=f"[自我·{field}] {content}"[:500],
        valid_from=now,
        supersedes=current,
        importance=4,
        pinned=pinned,
        secret=secret or (writer_sees_secrets and current is not None and current.secret),
    )
    version.save()
    if current is not None:
        current.superseded_by = version
        current.save(update_fields=["superseded_by", "updated_at"])
    audit_record(
        actor=actor,
        action=AuditAction.INVALIDATE if current else AuditAction.INSERT,
        target=version,
        reason=reason or f"self-concept {field} updated",
        before={"id": current.pk, "content": current.content} if current else None,
        after={"content": content},
        request_id=request_id,
    )
    embedding_schedule(memory_ids=[version.pk])
    return version
