from django.db import transaction
from django.utils import timezone

from memory.models import (
    Actor,
    AuditAction,
    ExpiredBy,
    MemoryStatus,
    SelfConcept,
    SelfConceptField,
)
from memory.services.audit import audit_record
from memory.services.embedding import embedding_schedule
from memory.services.errors import InvalidInput
from memory.services.scopes import scope_global

SELF_CONCEPT_MAX_CHARS = 4000


def self_concept_current(*, field: str) -> SelfConcept | None:
    return (
        SelfConcept.objects.filter(field=field, status=MemoryStatus.ACTIVE)
        .order_by("-recorded_at", "-pk")
        .first()
    )


def self_concept_write(
    *, field: str, content: str, actor: str = Actor.AGENT, reason: str = "", request_id: str = ""
) -> SelfConcept:
    """Write a new version of one self-concept field. The previous version is superseded, never
    overwritten, so the history of who the agent thought it was stays readable."""
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
    now = timezone.now()
    with transaction.atomic():
        current = self_concept_current(field=field)
        if current is not None and current.content == content:
            audit_record(
                actor=actor,
                action=AuditAction.SKIP,
                target=current,
                reason=reason or "same self-concept already current",
                request_id=request_id,
            )
            return current
        version = SelfConcept(
            scope=scope_global(),
            field=field,
            content=content,
            summary=f"[自我·{field}] {content}"[:500],
            valid_from=now,
            supersedes=current,
            importance=4,
        )
        version.save()
        if current is not None:
            current.status = MemoryStatus.SUPERSEDED
            current.expired_by = ExpiredBy.SUPERSEDED
            current.valid_to = now
            current.superseded_by = version
            current.save(
                update_fields=["status", "expired_by", "valid_to", "superseded_by", "updated_at"]
            )
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
